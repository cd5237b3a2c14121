package crash

import (
	"context"
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/test/fakecheck"
)

// TestCrashDeletion crashes a service on each step of deleting a Workload
// whose pod is gated: the Workload stays, marked for deletion, until its
// pod is gone, then goes, and is never created again. The grouper reports
// the deleted pod's finish and, racing with it, the workload stopped; only
// the first is sure to happen here (grouper/report-stopped is crashed in
// TestCrashGatedEviction).
func TestCrashDeletion(t *testing.T) {
	for _, point := range []string{"grouper/delete", "grouper/report-finish", "admitter/remove-finalizer"} {
		t.Run(point, func(t *testing.T) { crashDeletion(t, point) })
	}
}

func crashDeletion(t *testing.T, point string) {
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	defer cancel()

	// Scenario: a 1-cpu queue whose check holds the pod at Pending, a
	// second queue without checks for the sentinel; the user deletes the
	// reserved Workload.
	ns := createNamespace(ctx, t, "deletion")
	prov := fakecheck.StartT(t)
	createCheck(ctx, t, ns+"-check", prov.Target())
	createQueues(ctx, t, ns, userQueue, ns, "1", ns+"-check")
	createQueues(ctx, t, ns, sentinelQueue, ns+"-sentinel", "1")
	hist := record(ctx, t, ns, ns)
	before := requestCounts(ctx, t)
	pod := newPod(ns, "doomed", userQueue, "1", "2s")
	mustCreate(ctx, t, pod)
	wl := workloadOf(ctx, t, pod, "reserved", condIs(sluicev1alpha1.WorkloadQuotaReserved, metav1.ConditionTrue, ""))
	if err := prov.WaitEvaluated(ctx, ns, wl.Name, 1); err != nil {
		t.Fatalf("the check was never asked: %v", err)
	}
	key := evaluationKey(t, prov, wl)

	// Crash point.
	c := arm(ctx, t, point)
	if err := k8s.Delete(ctx, wl); err != nil {
		t.Fatalf("deleting workload %s: %v", wl.Name, err)
	}
	c.waitHit(ctx, t)

	// End state: both gone, the quota free.
	waitGone(ctx, t, pod)
	waitGone(ctx, t, wl)
	waitReserved(ctx, t, ns, "0")
	if !slices.ContainsFunc(prov.Releases(), func(r *checksv1.ReleaseRequest) bool { return r.GetEvaluationKey() == key }) {
		t.Errorf("the Workload went before the check's reservation %q was released", key)
	}
	// Barrier: once a new pod is ungated, the grouper has been through
	// its resubmission of what it saw before the crash.
	sentinel := newPod(ns, "sentinel", sentinelQueue, "1", "")
	mustCreate(ctx, t, sentinel)
	waitPod(ctx, t, sentinel, "ungated", func(p *corev1.Pod) error {
		if gated(p) {
			return errGated
		}
		return nil
	})
	settle(ctx, t, ns)
	writes := podWritesBetween(requestCounts(ctx, t), before)
	hist.stop()
	hist.check(t)

	if n := hist.added(wl.Name); n != 1 {
		t.Errorf("workload %s was created %d times, want once: a deletion must never be undone", wl.Name, n)
	}
	wlEvents := hist.workloadEvents(wl.Name)
	if marked, ok := first(wlEvents, func(e event[*sluicev1alpha1.Workload]) bool { return e.obj.DeletionTimestamp != nil }); !ok {
		t.Error("the Workload's deletion is not in the history")
	} else if !slices.Contains(marked.obj.Finalizers, sluicev1alpha1.ResourceInUseFinalizer) {
		t.Errorf("deleted Workload had finalizers %v, want %s holding it", marked.obj.Finalizers, sluicev1alpha1.ResourceInUseFinalizer)
	}
	podGone, ok := first(hist.podEvents(pod.Name), func(e event[*corev1.Pod]) bool { return e.typ == watch.Deleted })
	if !ok {
		t.Fatal("the pod's removal is not in the history")
	}
	wlGone, ok := first(wlEvents, func(e event[*sluicev1alpha1.Workload]) bool { return e.typ == watch.Deleted })
	if !ok {
		t.Fatal("the Workload's removal is not in the history")
	}
	if wlGone.rev < podGone.rev {
		t.Errorf("the Workload went at revision %d, before its pod at revision %d; then the pod had %s, the Workload's last state: %s",
			wlGone.rev, podGone.rev, podAt(hist.podEvents(pod.Name), wlGone.rev), workloadBefore(wlEvents, wlGone.rev))
	}
	if n := hist.ungates(pod.Name); n != 0 {
		t.Errorf("the pod of the deleted Workload was ungated %d times, want never", n)
	}
	if q := hist.maxCPUReserved(); q.Cmp(resource.MustParse("1")) > 0 {
		t.Errorf("ClusterQueue reported %s cpu reserved, want at most the pod's 1", q.String())
	}
	// The sentinel's ungate, and the doomed pod's finalizer removal.
	if !writes.patches.is(2) {
		t.Errorf("pods were patched %v times, want 2: the doomed pod's finalizer removal and the sentinel's ungate", writes.patches)
	}
	if _, kwokDeletes := hist.kwokWrites(); !writes.deletes.less(kwokDeletes).is(1) {
		t.Errorf("the grouper deleted pods %v times (%v deletes, %d of them kwok's), want 1", writes.deletes.less(kwokDeletes), writes.deletes, kwokDeletes)
	}
}

// podAt describes the last state of a pod before revision rev.
func podAt(events []event[*corev1.Pod], rev uint64) string {
	var last *corev1.Pod
	for _, e := range events {
		if e.rev < rev {
			last = e.obj
		}
	}
	if last == nil {
		return "no state yet"
	}
	return fmt.Sprintf("deletionTimestamp %v, finalizers %v, gated %v, phase %s", last.DeletionTimestamp, last.Finalizers, gated(last), last.Status.Phase)
}

// workloadBefore describes the last state of a Workload before revision rev.
func workloadBefore(events []event[*sluicev1alpha1.Workload], rev uint64) string {
	var last *sluicev1alpha1.Workload
	for _, e := range events {
		if e.rev < rev {
			last = e.obj
		}
	}
	return describe(last)
}
