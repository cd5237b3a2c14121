package crash

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

// caseWindow is the replacement window of the empty-group cases: long
// enough that a restart can fall inside it, short for the suite.
const caseWindow = 5 * time.Second

// setReplacementWindow sets ClusterQueue cq's podGroupReplacementWindow.
func setReplacementWindow(ctx context.Context, t *testing.T, cq string, d time.Duration) {
	t.Helper()
	patch := []byte(`{"spec":{"podGroupReplacementWindow":"` + d.String() + `"}}`)
	target := &sluicev1alpha1.ClusterQueue{ObjectMeta: metav1.ObjectMeta{Name: cq}}
	if err := k8s.Patch(ctx, target, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
}

// TestCrashEmptyGroupWindow crashes a service on each write of an admitted
// group left with no pods: the admitter's write that opens the group's
// replacement window, the grouper's report of the empty group (whose
// answer, the window's end, lives only in the grouper's memory), and the
// admitter's deletion of the Workload once the window passed. However the
// crash falls, the Workload is deleted once, not before the window ended,
// its quota is given back once — to the group waiting behind it — and no
// pod is left Terminating.
func TestCrashEmptyGroupWindow(t *testing.T) {
	for _, point := range []string{
		"admitter/replacement-window", "grouper/report-no-pods", "admitter/delete-empty-group",
	} {
		t.Run(point, func(t *testing.T) { crashEmptyGroupWindow(t, point) })
	}
}

func crashEmptyGroupWindow(t *testing.T, point string) {
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	defer cancel()

	// Scenario: a 2-cpu queue with a short replacement window; a group of
	// two 1-cpu pods runs, a second group of the same size waits; the user
	// deletes every pod of the first.
	ns := createNamespace(ctx, t, "empty-group")
	createQueues(ctx, t, ns, userQueue, ns, "2")
	setReplacementWindow(ctx, t, ns, caseWindow)
	hist := record(ctx, t, ns, ns)
	pods := []*corev1.Pod{groupPod(ns, "g", "a", "1", "", 2), groupPod(ns, "g", "b", "1", "", 2)}
	for _, p := range pods {
		mustCreate(ctx, t, p)
	}
	for _, p := range pods {
		waitPod(ctx, t, p, "Running", phaseIs(corev1.PodRunning))
	}
	wl := workloadOf(ctx, t, pods[0], "Admitted", condIs(sluicev1alpha1.WorkloadAdmitted, metav1.ConditionTrue, ""))
	next := []*corev1.Pod{groupPod(ns, "next", "c", "1", "2s", 2), groupPod(ns, "next", "d", "1", "2s", 2)}
	for _, p := range next {
		mustCreate(ctx, t, p)
	}
	nextWl := workloadOf(ctx, t, next[0], "pending for quota", condIs(sluicev1alpha1.WorkloadQuotaReserved, metav1.ConditionFalse, sluicev1alpha1.ReasonPending))

	// Crash point.
	c := arm(ctx, t, point)
	for _, p := range pods {
		if err := k8s.Delete(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	c.waitHit(ctx, t)

	// End state: the pods gone, then the Workload; the waiting group ran
	// in the quota given back.
	for _, p := range pods {
		waitGone(ctx, t, p)
	}
	waitGone(ctx, t, wl.DeepCopy())
	for _, p := range next {
		waitPod(ctx, t, p, "Succeeded without sluice's finalizer", endedClean(corev1.PodSucceeded))
	}
	waitWorkload(ctx, t, nextWl, "Finished", condIs(sluicev1alpha1.WorkloadFinished, metav1.ConditionTrue, sluicev1alpha1.ReasonSucceeded))
	settle(ctx, t, ns)
	hist.stop()
	hist.check(t)

	if n := hist.added(wl.Name); n != 1 {
		t.Errorf("the group's Workload was created %d times, want once", n)
	}
	if n := hist.transitions(wl.Name, sluicev1alpha1.WorkloadQuotaReserved); n != 1 {
		t.Errorf("the group's Workload went to QuotaReserved=True %d times, want exactly 1", n)
	}
	if n := hist.transitions(nextWl.Name, sluicev1alpha1.WorkloadQuotaReserved); n != 1 {
		t.Errorf("the waiting group went to QuotaReserved=True %d times, want exactly 1", n)
	}
	if q := hist.maxCPUReserved(); q.Cmp(resource.MustParse("2")) > 0 {
		t.Errorf("ClusterQueue reported %s cpu reserved, want at most one group's 2: the quota was given back more than once", q.String())
	}

	// The deletion came after the window the Workload recorded, and the
	// waiting group was reserved only after it: the window held the quota.
	events := hist.workloadEvents(wl.Name)
	var opened *metav1.Condition
	for _, e := range events {
		if e.obj.DeletionTimestamp != nil {
			break
		}
		if c := meta.FindStatusCondition(e.obj.Status.Conditions, sluicev1alpha1.WorkloadWaitingForReplacementPods); c != nil &&
			c.Status == metav1.ConditionTrue && c.Reason == sluicev1alpha1.ReasonNoPods && e.obj.Status.Admission != nil {
			opened = c
		}
	}
	deleted, ok := first(events, func(e event[*sluicev1alpha1.Workload]) bool { return e.obj.DeletionTimestamp != nil })
	switch {
	case opened == nil:
		t.Errorf("the Workload never held its quota with WaitingForReplacementPods=True (NoPods) before its deletion")
	case !ok:
		t.Errorf("no version of the Workload marked for deletion was seen")
	case deleted.obj.DeletionTimestamp.Time.Before(opened.LastTransitionTime.Add(caseWindow)):
		t.Errorf("the Workload was deleted at %s, before its window (from %s, %s) ended",
			deleted.obj.DeletionTimestamp, opened.LastTransitionTime, caseWindow)
	}
	if reserved, ok := first(hist.workloadEvents(nextWl.Name), func(e event[*sluicev1alpha1.Workload]) bool {
		return isTrue(e.obj, sluicev1alpha1.WorkloadQuotaReserved)
	}); ok && deleted.rev > reserved.rev {
		t.Errorf("the waiting group was reserved (revision %d) before the emptied group's Workload was deleted (revision %d)", reserved.rev, deleted.rev)
	}
}
