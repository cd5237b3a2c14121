package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"

	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
)

// TestStory2EvictedRunKeepsItsHistory: a group of two whose first pod
// succeeded is evicted; its pods are created again and it is admitted
// again. The new run is booked whole (the earlier run's success released
// quota in that run only), and the pod that succeeded before neither
// counts toward the new run's end nor is touched by it: the group ends
// only once both new pods succeeded.
func TestStory2EvictedRunKeepsItsHistory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := createNamespace(ctx, t, "history")
	createQueues(ctx, t, ns, "history", "2")

	quick := groupPod(ns, "train", "quick", "1", 2, map[string]string{"kwok.sluice.dev/run-for": "1s"})
	slow := groupPod(ns, "train", "slow", "1", 2, map[string]string{"kwok.sluice.dev/run-for": "10m"})
	for _, p := range []*corev1.Pod{quick, slow} {
		mustCreate(ctx, t, p)
	}
	waitPod(ctx, t, quick, "Succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
	first := waitWorkloadOf(ctx, t, quick, "one pod reclaimable", func(w *sluicev1alpha1.Workload) bool {
		return len(w.Status.ReclaimablePods) == 1 && w.Status.ReclaimablePods[0].Count == 1
	})
	waitClusterQueue(ctx, t, "history", "1 cpu reserved: the pod that succeeded gave its quota back", func(cq *sluicev1alpha1.ClusterQueue) bool {
		q := cpuReserved(cq)
		return q.Cmp(resource.MustParse("1")) == 0
	})

	// Evicted: the running pod is deleted, the run ends.
	setActive(ctx, t, first, false)
	waitDeleted(ctx, t, slow)
	waitWorkloadOf(ctx, t, quick, "evicted, nothing reclaimable, waiting for its pods", func(w *sluicev1alpha1.Workload) bool {
		return meta.IsStatusConditionTrue(w.Status.Conditions, sluicev1alpha1.WorkloadEvicted) &&
			w.Status.Admission == nil && len(w.Status.ReclaimablePods) == 0
	})

	// The group's pods are created again, and it is let in again.
	again := []*corev1.Pod{
		groupPod(ns, "train", "again-0", "1", 2, map[string]string{"kwok.sluice.dev/run-for": "3s"}),
		groupPod(ns, "train", "again-1", "1", 2, map[string]string{"kwok.sluice.dev/run-for": "10m"}),
	}
	for _, p := range again {
		mustCreate(ctx, t, p)
	}
	setActive(ctx, t, getWorkload(ctx, t, ns, "train"), true)
	for _, p := range again {
		waitPod(ctx, t, p, "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	}
	waitClusterQueue(ctx, t, "history", "2 cpu reserved: the new run booked whole", func(cq *sluicev1alpha1.ClusterQueue) bool {
		q := cpuReserved(cq)
		return q.Cmp(resource.MustParse("2")) == 0
	})

	// One new pod succeeds: with the earlier run's success that would make
	// two, but the group goes on while its other pod runs.
	waitPod(ctx, t, again[0], "Succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
	second := waitWorkloadOf(ctx, t, quick, "the new run's pod reclaimable", func(w *sluicev1alpha1.Workload) bool {
		return len(w.Status.ReclaimablePods) == 1 && w.Status.ReclaimablePods[0].Count == 1
	})
	if meta.IsStatusConditionTrue(second.Status.Conditions, sluicev1alpha1.WorkloadFinished) {
		t.Fatalf("the group finished while pod %s runs: %s", again[1].Name, describe(second))
	}
	if p := getPod(ctx, t, again[1]); p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
		t.Fatalf("pod %s: phase %s, deleting %v; want it running", p.Name, p.Status.Phase, p.DeletionTimestamp != nil)
	}
	if p := getPod(ctx, t, quick); p.DeletionTimestamp != nil || p.Annotations[podkeys.ReservationAnnotation] != first.Status.Admission.ReservationID {
		t.Fatalf("the earlier run's pod: deleting %v, reservation %q; want it left alone, of reservation %s",
			p.DeletionTimestamp != nil, p.Annotations[podkeys.ReservationAnnotation], first.Status.Admission.ReservationID)
	}
}
