package crash

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

// setStartupDeadline gives ClusterQueue cq a start-up deadline.
func setStartupDeadline(ctx context.Context, t *testing.T, cq string, w *sluicev1alpha1.WaitForPodsReady) {
	t.Helper()
	var q sluicev1alpha1.ClusterQueue
	if err := k8s.Get(ctx, client.ObjectKey{Name: cq}, &q); err != nil {
		t.Fatal(err)
	}
	q.Spec.WaitForPodsReady = w
	if err := k8s.Update(ctx, &q); err != nil {
		t.Fatal(err)
	}
}

// TestCrashStartupDeadlineLimit crashes the admitter between the two
// writes of a deactivation for a missed start-up deadline: spec.active is
// false, the eviction not written. The workload still ends deactivated and
// evicted, its pod deleted and its quota released.
func TestCrashStartupDeadlineLimit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	defer cancel()

	// Scenario: a 1-cpu queue whose workloads must be scheduled within 2s
	// and may not be requeued after a miss; a pod no node can take.
	ns := createNamespace(ctx, t, "startup-limit")
	createQueues(ctx, t, ns, userQueue, ns, "1")
	setStartupDeadline(ctx, t, ns, &sluicev1alpha1.WaitForPodsReady{
		Timeout: metav1.Duration{Duration: 2 * time.Second}, Condition: sluicev1alpha1.PodsScheduled,
		RequeuingStrategy: &sluicev1alpha1.RequeuingStrategy{BackoffLimitCount: ptr.To[int32](0)},
	})
	hist := record(ctx, t, ns, ns)
	stuck := newPod(ns, "stuck", userQueue, "1", "")
	stuck.Spec.NodeSelector = map[string]string{"sluice.dev/no-such-node": "true"}

	// Crash point.
	c := arm(ctx, t, "admitter/deactivate-deadline")
	mustCreate(ctx, t, stuck)
	c.waitHit(ctx, t)

	// End state: the pod is gone and the queue holds nothing.
	waitGone(ctx, t, stuck)
	waitQueueEmpty(ctx, t, ns)
	settle(ctx, t, ns)
	hist.stop()
	hist.check(t)

	// The Workload was deactivated, then evicted while it held its quota:
	// with the limit's reason when the deadline acted again first, or as
	// any inactive workload holding quota is.
	checkEvictedAfterDeactivation(t, hist, workloadName(t, hist),
		sluicev1alpha1.ReasonRequeuingLimitExceeded, sluicev1alpha1.ReasonInactive)
}

// TestCrashStartedReport crashes a service right after the report that a
// pod started: the admitter wrote PodsReady=True (admitter/progress dies
// before answering; grouper/report-started after the answer). The
// workload is never evicted for its deadline and its pod runs to the end.
func TestCrashStartedReport(t *testing.T) {
	for _, point := range []string{"grouper/report-started", "admitter/progress"} {
		t.Run(point, func(t *testing.T) { crashStartedReport(t, point) })
	}
}

func crashStartedReport(t *testing.T, point string) {
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	defer cancel()

	// Scenario: a 1-cpu queue whose workloads must be scheduled within
	// 20s; a pod that runs 5s.
	ns := createNamespace(ctx, t, "startup-report")
	createQueues(ctx, t, ns, userQueue, ns, "1")
	setStartupDeadline(ctx, t, ns, &sluicev1alpha1.WaitForPodsReady{
		Timeout: metav1.Duration{Duration: 20 * time.Second}, Condition: sluicev1alpha1.PodsScheduled,
	})
	hist := record(ctx, t, ns, ns)
	p := newPod(ns, "p", userQueue, "1", "5s")

	// Crash point.
	c := arm(ctx, t, point)
	mustCreate(ctx, t, p)
	c.waitHit(ctx, t)

	// End state: the pod succeeded and its Workload finished.
	waitPod(ctx, t, p, "Succeeded without sluice's finalizer", endedClean(corev1.PodSucceeded))
	wl := workloadOf(ctx, t, p, "Finished", condIs(sluicev1alpha1.WorkloadFinished, metav1.ConditionTrue, sluicev1alpha1.ReasonSucceeded))
	settle(ctx, t, ns)
	hist.stop()
	hist.check(t)

	events := hist.workloadEvents(wl.Name)
	if _, ok := first(events, func(e event[*sluicev1alpha1.Workload]) bool {
		return e.typ != watch.Deleted && isTrue(e.obj, sluicev1alpha1.WorkloadPodsReady)
	}); !ok {
		t.Error("the workload never had PodsReady=True")
	}
	if e, ok := first(events, func(e event[*sluicev1alpha1.Workload]) bool {
		return e.typ != watch.Deleted && isTrue(e.obj, sluicev1alpha1.WorkloadEvicted)
	}); ok {
		t.Errorf("the workload was evicted although its pod started: %s", describe(e.obj))
	}
}

// workloadName is the name of the only Workload in the history.
func workloadName(t *testing.T, h *history) string {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.workloads) == 0 {
		t.Fatal("no Workload in the history")
	}
	return h.workloads[0].obj.Name
}

// checkEvictedAfterDeactivation checks the history of Workload name after
// a crash between the two writes of a deactivation (spec.active false,
// the eviction not yet written): it was deactivated, then evicted once,
// while it still held its quota, with one of reasons. It returns the
// eviction for the caller's own checks.
func checkEvictedAfterDeactivation(t *testing.T, h *history, name string, reasons ...string) event[*sluicev1alpha1.Workload] {
	t.Helper()
	events := h.workloadEvents(name)
	deactivated, ok := first(events, func(e event[*sluicev1alpha1.Workload]) bool {
		return e.typ != watch.Deleted && !ptr.Deref(e.obj.Spec.Active, true)
	})
	if !ok {
		t.Fatal("the workload was never deactivated")
	}
	evicted, ok := first(events, func(e event[*sluicev1alpha1.Workload]) bool {
		return e.typ != watch.Deleted && isTrue(e.obj, sluicev1alpha1.WorkloadEvicted) && holdsQuota(e.obj)
	})
	if !ok {
		t.Fatal("the workload was never evicted while holding its quota")
	}
	if evicted.rev < deactivated.rev {
		t.Errorf("evicted at revision %d, before it was deactivated at %d", evicted.rev, deactivated.rev)
	}
	if r := condReason(evicted.obj, sluicev1alpha1.WorkloadEvicted); !slices.Contains(reasons, r) {
		t.Errorf("evicted with reason %q, want %s", r, strings.Join(reasons, " or "))
	}
	if n := h.transitions(name, sluicev1alpha1.WorkloadEvicted); n != 1 {
		t.Errorf("Evicted turned True %d times, want once", n)
	}
	return evicted
}
