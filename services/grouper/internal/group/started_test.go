package group

import (
	"errors"
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/sluice-dev/sluice/pkg/podkeys"
)

func ungated(p *corev1.Pod) { p.Spec.SchedulingGates = nil }

func onNode(p *corev1.Pod) { ungated(p); p.Spec.NodeName = "node-1" }

func ready(p *corev1.Pod) {
	onNode(p)
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue})
}

func notReady(p *corev1.Pod) {
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse})
}

// byRoleHash names a pod's pod set by its role hash annotation.
func byRoleHash(p *corev1.Pod) (string, error) { return p.Annotations[podkeys.RoleHashAnnotation], nil }

func TestCountStarted(t *testing.T) {
	tests := []struct {
		name          string
		pods          []*corev1.Pod
		roleOf        func(*corev1.Pod) (string, error)
		scheduled     map[string]int32
		ready         map[string]int32
		wantErr       bool
		allReadyOfTwo bool
	}{
		{name: "gated pods have not started", pods: []*corev1.Pod{pod("a", "r", 0), pod("b", "r", 1)}},
		{name: "ungated but unscheduled", pods: []*corev1.Pod{pod("a", "r", 0, ungated)}},
		{name: "scheduled, not ready", pods: []*corev1.Pod{pod("a", "r", 0, onNode, notReady), pod("b", "r", 1, onNode)},
			scheduled: map[string]int32{"r": 2}},
		{name: "ready per role", pods: []*corev1.Pod{pod("a", "r", 0, ready), pod("b", "s", 1, onNode)},
			scheduled: map[string]int32{"r": 1, "s": 1}, ready: map[string]int32{"r": 1}},
		{name: "succeeded counts as both", pods: []*corev1.Pod{pod("a", "r", 0, ungated, succeeded), pod("b", "r", 1, ready)},
			scheduled: map[string]int32{"r": 2}, ready: map[string]int32{"r": 2}, allReadyOfTwo: true},
		{name: "failed and leaving pods do not count", pods: []*corev1.Pod{pod("a", "r", 0, ready, failed(3)), pod("b", "r", 1, ready, terminating)}},
		{name: "another run's pods do not count", pods: []*corev1.Pod{pod("a", "r", 0, ready, admittedIn("old")), pod("b", "r", 1, ready, admittedIn("uid"))},
			scheduled: map[string]int32{"r": 1}, ready: map[string]int32{"r": 1}},
		{name: "the role comes from roleOf", pods: []*corev1.Pod{pod("a", "r", 0, ready)},
			roleOf:    func(*corev1.Pod) (string, error) { return "main", nil },
			scheduled: map[string]int32{"main": 1}, ready: map[string]int32{"main": 1}},
		{name: "roleOf fails", pods: []*corev1.Pod{pod("a", "r", 0, ready)},
			roleOf: func(*corev1.Pod) (string, error) { return "", errors.New("no role") }, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			roleOf := tt.roleOf
			if roleOf == nil {
				roleOf = byRoleHash
			}
			got, err := CountStarted(Run{UID: "uid"}, tt.pods, roleOf)
			if (err != nil) != tt.wantErr {
				t.Fatalf("CountStarted error = %v, want error %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if !maps.Equal(got.Scheduled, orEmpty(tt.scheduled)) || !maps.Equal(got.Ready, orEmpty(tt.ready)) {
				t.Errorf("CountStarted = scheduled %v ready %v, want scheduled %v ready %v", got.Scheduled, got.Ready, tt.scheduled, tt.ready)
			}
			if all := got.AllReady(map[string]int32{"r": 2}); all != tt.allReadyOfTwo {
				t.Errorf("AllReady(r=2) = %v, want %v", all, tt.allReadyOfTwo)
			}
		})
	}
}

func orEmpty(m map[string]int32) map[string]int32 {
	if m == nil {
		return map[string]int32{}
	}
	return m
}
