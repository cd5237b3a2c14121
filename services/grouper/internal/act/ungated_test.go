package act

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/services/grouper/internal/workload"
)

// gatedPod is a single managed pod as the webhook leaves it.
func gatedPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: name, UID: types.UID("uid-" + name),
			Labels:      map[string]string{podkeys.ManagedLabel: podkeys.ManagedLabelValue, podkeys.QueueNameLabel: "q"},
			Annotations: map[string]string{podkeys.TraceparentAnnotation: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
			Finalizers:  []string{podkeys.ManagedFinalizer},
		},
		Spec: corev1.PodSpec{
			SchedulingGates: []corev1.PodSchedulingGate{{Name: podkeys.AdmissionGate}},
			Containers:      []corev1.Container{{Name: "main", Image: "pause"}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
}

// running puts an ungated p on a node, running.
func running(p *corev1.Pod) *corev1.Pod {
	p.Spec.NodeName, p.Status.Phase = "node-1", corev1.PodRunning
	return p
}

// ungatedBySomeoneElse removes sluice's gate alone, as a kubectl patch
// would, and lets the pod run.
func ungatedBySomeoneElse(p *corev1.Pod) *corev1.Pod {
	p.Spec.SchedulingGates = nil
	return running(p)
}

// ungatedBySluice ungates p as sluice's patch does, gate gone and mark
// set, and lets the pod run.
func ungatedBySluice(p *corev1.Pod) *corev1.Pod {
	p.Spec.SchedulingGates = nil
	p.Labels[podkeys.PodSetLabel] = workload.SinglePodSetName
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[podkeys.WorkloadAnnotation], p.Annotations[podkeys.WorkloadUIDAnnotation] = "w", "w-uid"
	return running(p)
}

// released removes sluice's gate and finalizer, as grouper release-all
// does, and lets the pod run.
func released(p *corev1.Pod) *corev1.Pod {
	p.Spec.SchedulingGates = nil
	p.Finalizers = nil
	return running(p)
}

func TestGateLossOf(t *testing.T) {
	with := func(p *corev1.Pod, change func(*corev1.Pod)) *corev1.Pod {
		change(p)
		return p
	}
	now := metav1.Now()
	tests := []struct {
		name            string
		pod             *corev1.Pod
		ungatedBySluice bool
		want            GateLoss
	}{
		{"a gated pod", gatedPod("p"), false, GateKept},
		{"a pod sluice ungated, read after a restart", ungatedBySluice(gatedPod("p")), false, GateKept},
		{"a pod this grouper ungated, the cache still without the mark", ungatedBySomeoneElse(gatedPod("p")), true, GateKept},
		{"the gate removed alone", ungatedBySomeoneElse(gatedPod("p")), false, GateRemoved},
		{"the gate removed alone from a pod not scheduled yet",
			with(ungatedBySomeoneElse(gatedPod("p")), func(p *corev1.Pod) { p.Spec.NodeName, p.Status.Phase = "", corev1.PodPending }), false, GateRemoved},
		{"the gate removed alone, another controller's gate left",
			with(gatedPod("p"), func(p *corev1.Pod) {
				p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/other"}}
			}), false, GateRemoved},
		{"the gate removed alone, the annotation's sibling written by hand",
			with(ungatedBySomeoneElse(gatedPod("p")), func(p *corev1.Pod) {
				p.Annotations[podkeys.WorkloadUIDAnnotation] = "x"
			}), false, GateRemoved},
		{"gate and finalizer removed: released", released(gatedPod("p")), false, GateReleased},
		{"released, the finalizer of someone else kept",
			with(released(gatedPod("p")), func(p *corev1.Pod) { p.Finalizers = []string{"example.com/keep"} }), false, GateReleased},
		{"only the finalizer removed: still gated", with(gatedPod("p"), func(p *corev1.Pod) { p.Finalizers = nil }), false, GateKept},
		{"ended", with(ungatedBySomeoneElse(gatedPod("p")), func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }), false, GateKept},
		{"failed", with(ungatedBySomeoneElse(gatedPod("p")), func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }), false, GateKept},
		{"being deleted", with(ungatedBySomeoneElse(gatedPod("p")), func(p *corev1.Pod) { p.DeletionTimestamp = &now }), false, GateKept},
		{"not managed", with(ungatedBySomeoneElse(gatedPod("p")), func(p *corev1.Pod) { delete(p.Labels, podkeys.ManagedLabel) }), false, GateKept},
		{"gated by another system with the same keys (Kueue's pod integration)",
			with(ungatedBySomeoneElse(gatedPod("p")), func(p *corev1.Pod) { delete(p.Annotations, podkeys.TraceparentAnnotation) }), false, GateKept},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := GateLossOf(tt.pod, tt.ungatedBySluice); got != tt.want {
				t.Fatalf("GateLossOf = %v, want %v", got, tt.want)
			}
		})
	}
}
