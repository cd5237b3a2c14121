package group

import (
	"errors"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/sluice-dev/sluice/pkg/podkeys"
)

// gangPod is a gated pod that names PodGroup "g" (no group label, no total
// count), of role hash role, created age seconds after epoch.
func gangPod(name, role string, age int, mutate ...func(*corev1.Pod)) *corev1.Pod {
	p := pod(name, role, age, mutate...)
	delete(p.Labels, podkeys.PodGroupNameLabel)
	delete(p.Annotations, podkeys.PodGroupTotalCountAnnotation)
	group := "g"
	p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: &group}
	return p
}

func TestAssembleGangSized(t *testing.T) {
	tests := []struct {
		name     string
		pods     []*corev1.Pod
		size     int32
		members  int
		missing  int32
		workload bool
		noSize   bool
	}{
		{name: "size unknown", pods: []*corev1.Pod{gangPod("a", "r", 1)}, size: 0, noSize: true},
		{name: "two of three", pods: []*corev1.Pod{gangPod("a", "r", 1), gangPod("b", "r", 2)}, size: 3, members: 2, missing: 1},
		{name: "three of three", pods: []*corev1.Pod{gangPod("a", "r", 1), gangPod("b", "r", 2), gangPod("c", "r", 3)}, size: 3, members: 3, workload: true},
		{name: "pods beyond the gang's size are in it, not deleted",
			pods: []*corev1.Pod{gangPod("a", "r", 1), gangPod("b", "r", 2), gangPod("c", "r", 3), gangPod("d", "r", 4)}, size: 3, members: 4, workload: true},
		{name: "a failed pod does not count", pods: []*corev1.Pod{gangPod("a", "r", 1), gangPod("b", "r", 2, failed(3)), gangPod("c", "r", 3)},
			size: 3, members: 2, missing: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := Assemble("ns", "g", tt.pods, tt.size)
			var noSize *NoSizeError
			if tt.noSize {
				if !errors.As(err, &noSize) {
					t.Fatalf("Assemble error = %v, want NoSizeError", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Assemble: %v", err)
			}
			if len(a.Members) != tt.members || a.Missing != tt.missing || (a.Workload != nil) != tt.workload || len(a.Excess) != 0 {
				t.Errorf("members %d missing %d workload %v excess %d; want %d, %d, %v, 0",
					len(a.Members), a.Missing, a.Workload != nil, len(a.Excess), tt.members, tt.missing, tt.workload)
			}
			if a.Workload != nil {
				if got := a.Workload.GetPodSets()[0].GetCount(); got != int32(tt.members) {
					t.Errorf("pod set count = %d, want %d", got, tt.members)
				}
				if a.Workload.GetPodGroup() != "g" || a.Workload.GetRef().GetName() != "g" {
					t.Errorf("workload %s of pod group %q, want both g", a.Workload.GetRef().GetName(), a.Workload.GetPodGroup())
				}
			}
		})
	}
}

func TestObserveGangSizedKeepsExtraPodsWaiting(t *testing.T) {
	admitted := func(p *corev1.Pod) { running(p); admittedIn("this")(p) }
	pods := []*corev1.Pod{gangPod("a", "r", 1, admitted), gangPod("b", "r", 2, admitted), gangPod("c", "r", 3), gangPod("x", "other", 4)}
	how := RolesOf(pods)
	if !how.WaitExtra || how.Declared {
		t.Fatalf("RolesOf = %+v, want a gang-sized group", how)
	}
	st, err := Observe(Run{UID: "this"}, map[string]int32{"r": 2}, how, pods)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(names(st.Waiting)); got != "[c x]" || len(st.Excess) != 0 {
		t.Errorf("waiting %s, excess %v; want [c x] and none", got, names(st.Excess))
	}
	// Once an admitted pod failed, the waiting pod of its role takes its place.
	failedA := gangPod("a", "r", 1, admitted, failed(5))
	st, err = Observe(Run{UID: "this"}, map[string]int32{"r": 2}, how, []*corev1.Pod{failedA, pods[1], pods[2], pods[3]})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(names(st.Waiting)); got != "[x]" || fmt.Sprint(names(st.Replaced)) != "[a]" {
		t.Errorf("waiting %s, replaced %v; want [x] and [a]", got, names(st.Replaced))
	}
}
