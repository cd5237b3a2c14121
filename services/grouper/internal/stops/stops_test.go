package stops

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
)

func TestStoppedFor(t *testing.T) {
	gated := func(group string) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{}, Finalizers: []string{podkeys.ManagedFinalizer}},
			Spec:       corev1.PodSpec{SchedulingGates: []corev1.PodSchedulingGate{{Name: podkeys.AdmissionGate}}},
		}
		if group != "" {
			p.Labels[podkeys.PodGroupNameLabel] = group
		}
		return p
	}
	ended := gated("")
	ended.Status.Phase = corev1.PodSucceeded
	freed := ended.DeepCopy()
	freed.Finalizers = nil
	evict := &admitterv1.Decision{Action: admitterv1.Decision_ACTION_EVICT}
	del := &admitterv1.Decision{Action: admitterv1.Decision_ACTION_DELETE}
	delFinished := &admitterv1.Decision{Action: admitterv1.Decision_ACTION_DELETE, Finished: true}
	tests := []struct {
		name string
		pod  *corev1.Pod
		d    *admitterv1.Decision
		want bool
	}{
		{"a gated pod waits out an eviction", gated(""), evict, true},
		{"a gated pod holds a deletion up until it is gone", gated(""), del, false},
		{"a single pod's gated pod is its own, finished or not", gated(""), delFinished, false},
		{"a later run of a finished group does not hold its deletion up", gated("g"), delFinished, true},
		{"an ended pod holds a stop up until freed", ended, del, false},
		{"a freed ended pod does not", freed, del, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := stoppedFor(tt.pod, tt.d); got != tt.want {
				t.Fatalf("stoppedFor = %v, want %v", got, tt.want)
			}
		})
	}
}
