package crash

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"

	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
)

// TestCrashMaximumExecutionTime crashes the admitter between the two
// writes of a deactivation for a maximum execution time: spec.active is
// false, the eviction not written. The next leader still evicts the
// workload with reason MaximumExecutionTimeExceeded (not as any inactive
// workload), once; the pod is deleted and the quota released after it.
func TestCrashMaximumExecutionTime(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	defer cancel()

	// Scenario: a 1-cpu queue; a pod that would run until deleted, allowed
	// 3s of execution.
	ns := createNamespace(ctx, t, "exec-time")
	createQueues(ctx, t, ns, userQueue, ns, "1")
	hist := record(ctx, t, ns, ns)
	bounded := newPod(ns, "bounded", userQueue, "1", "")
	bounded.Labels[podkeys.MaxExecTimeLabel] = "3"

	// Crash point.
	c := arm(ctx, t, "admitter/deactivate-exec-time")
	mustCreate(ctx, t, bounded)
	c.waitHit(ctx, t)

	// End state: the pod is gone and the queue holds nothing.
	waitGone(ctx, t, bounded)
	waitQueueEmpty(ctx, t, ns)
	settle(ctx, t, ns)
	hist.stop()
	hist.check(t)

	// The pod ran, admitted once.
	if n := hist.ungates(bounded.Name); n != 1 {
		t.Errorf("the pod was ungated %d times, want 1", n)
	}

	// The Workload was deactivated, then evicted while it held its quota,
	// with the reason of the deactivation and its account reset.
	name := workloadName(t, hist)
	evicted := checkEvictedAfterDeactivation(t, hist, name, sluicev1alpha1.ReasonMaximumExecutionTimeExceeded)
	if got := evicted.obj.Status.AccumulatedPastExecutionTimeSeconds; got != nil {
		t.Errorf("accumulatedPastExecutionTimeSeconds = %d at the eviction, want it reset", *got)
	}

	// The quota went only once the pod had stopped.
	released, ok := first(hist.workloadEvents(name), func(e event[*sluicev1alpha1.Workload]) bool {
		return e.rev > evicted.rev && (e.typ == watch.Deleted || !holdsQuota(e.obj))
	})
	stopped, stoppedOK := first(hist.podEvents(bounded.Name), func(e event[*corev1.Pod]) bool {
		return e.typ == watch.Deleted || e.obj.Status.Phase == corev1.PodFailed
	})
	if ok && stoppedOK && released.rev < stopped.rev {
		t.Errorf("the workload gave its quota up at revision %d, before the pod stopped at revision %d", released.rev, stopped.rev)
	}
}
