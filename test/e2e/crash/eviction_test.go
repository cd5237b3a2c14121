package crash

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

// disruptionReason is the reason of the DisruptionTarget condition the
// grouper sets on the pods it evicts.
const disruptionReason = "EvictedBySluice"

// TestCrashEviction crashes a service on each step of evicting a running
// pod whose quota another pod waits for. The evicted Workload keeps its
// quota until its pod has stopped, the pod is marked and deleted once, and
// only then does the waiting pod start.
func TestCrashEviction(t *testing.T) {
	for _, point := range []string{
		"admitter/evict", "grouper/disrupt", "grouper/delete",
		"grouper/report-finish", "admitter/finish", "grouper/remove-finalizer",
	} {
		t.Run(point, func(t *testing.T) { crashEviction(t, point) })
	}
}

func crashEviction(t *testing.T, point string) {
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	defer cancel()

	// Scenario: a 1-cpu queue without checks; P1 runs until deleted, P2
	// waits for its quota; then the user deactivates P1's Workload.
	ns := createNamespace(ctx, t, "eviction")
	createQueues(ctx, t, ns, userQueue, ns, "1")
	hist := record(ctx, t, ns, ns)
	before := requestCounts(ctx, t)
	p1 := newPod(ns, "p1", userQueue, "1", "")
	mustCreate(ctx, t, p1)
	waitPod(ctx, t, p1, "Running", phaseIs(corev1.PodRunning))
	wl1 := workloadOf(ctx, t, p1, "Admitted", condIs(sluicev1alpha1.WorkloadAdmitted, metav1.ConditionTrue, ""))
	p2 := newPod(ns, "p2", userQueue, "1", "2s")
	mustCreate(ctx, t, p2)
	wl2 := workloadOf(ctx, t, p2, "waiting for quota", condIs(sluicev1alpha1.WorkloadQuotaReserved, metav1.ConditionFalse, ""))

	// Crash point.
	c := arm(ctx, t, point)
	setActive(ctx, t, wl1, false)
	c.waitHit(ctx, t)

	// End state: P1 gone, P2 ran in its place.
	waitGone(ctx, t, p1)
	waitPod(ctx, t, p2, "Succeeded without sluice's finalizer", endedClean(corev1.PodSucceeded))
	waitWorkload(ctx, t, wl2, "Finished", condIs(sluicev1alpha1.WorkloadFinished, metav1.ConditionTrue, sluicev1alpha1.ReasonSucceeded))
	settle(ctx, t, ns)
	writes := podWritesBetween(requestCounts(ctx, t), before)
	hist.stop()
	hist.check(t)

	// P1's Workload was evicted while it held its quota, and ended Failed
	// (the garbage collector may delete it once P1 is gone, so judge by
	// its history).
	wl1Events := hist.workloadEvents(wl1.Name)
	evicting, ok := first(wl1Events, func(e event[*sluicev1alpha1.Workload]) bool {
		return e.typ != watch.Deleted && isTrue(e.obj, sluicev1alpha1.WorkloadEvicted) &&
			condReason(e.obj, sluicev1alpha1.WorkloadEvicted) == sluicev1alpha1.ReasonInactive && holdsQuota(e.obj)
	})
	if !ok {
		t.Fatalf("P1's workload was never Evicted (reason %s) while holding its quota", sluicev1alpha1.ReasonInactive)
	}
	released, gaveUp := first(wl1Events, func(e event[*sluicev1alpha1.Workload]) bool {
		return e.rev > evicting.rev && (e.typ == watch.Deleted || !holdsQuota(e.obj))
	})
	if !gaveUp {
		t.Errorf("P1's workload never gave its quota up")
	}
	finished, ok := first(wl1Events, func(e event[*sluicev1alpha1.Workload]) bool {
		return e.typ != watch.Deleted && isTrue(e.obj, sluicev1alpha1.WorkloadFinished)
	})
	if !ok {
		t.Errorf("P1's workload never Finished")
	} else if r := condReason(finished.obj, sluicev1alpha1.WorkloadFinished); r != sluicev1alpha1.ReasonFailed {
		t.Errorf("P1's workload Finished with reason %q, want %q", r, sluicev1alpha1.ReasonFailed)
	}

	// P1 was marked, then deleted, then failed; its quota went only
	// after that, and only then did P2 start.
	p1Events := hist.podEvents(p1.Name)
	marked, wasMarked := first(p1Events, func(e event[*corev1.Pod]) bool {
		c := podCondition(e.obj, corev1.DisruptionTarget)
		return c != nil && c.Status == corev1.ConditionTrue && c.Reason == disruptionReason
	})
	if !wasMarked {
		t.Errorf("P1 never had condition DisruptionTarget=True reason %s", disruptionReason)
	}
	deleted, ok := first(p1Events, func(e event[*corev1.Pod]) bool { return e.obj.DeletionTimestamp != nil })
	if !ok {
		t.Fatal("P1 was never deleted")
	}
	if wasMarked && marked.rev > deleted.rev {
		t.Errorf("P1 was deleted (revision %d) before it was marked DisruptionTarget (revision %d)", deleted.rev, marked.rev)
	}
	stopped, ok := first(p1Events, func(e event[*corev1.Pod]) bool {
		return e.typ == watch.Deleted || e.obj.Status.Phase == corev1.PodFailed
	})
	if !ok {
		t.Fatal("P1 never stopped")
	}
	if gaveUp && released.rev < stopped.rev {
		t.Errorf("P1's workload gave its quota up at revision %d, before P1 stopped at revision %d", released.rev, stopped.rev)
	}
	p2Ungated, ok := first(hist.podEvents(p2.Name), func(e event[*corev1.Pod]) bool {
		return e.typ != watch.Deleted && !gated(e.obj)
	})
	if !ok {
		t.Errorf("P2's ungating is not in the history")
	} else if p2Ungated.rev < stopped.rev {
		t.Errorf("P2 was ungated at revision %d, before P1 stopped at revision %d", p2Ungated.rev, stopped.rev)
	}
	if q := hist.maxCPUReserved(); q.Cmp(resource.MustParse("1")) > 0 {
		t.Errorf("ClusterQueue reported %s cpu reserved, want at most its 1 cpu quota", q.String())
	}

	// Every pod write once.
	checkPodWritesOnce(t, hist, writes, []*corev1.Pod{p1, p2}, 1, "P1")
}

// checkPodWritesOnce checks that sluice wrote each of pods once of each
// kind: one ungate and one finalizer removal each, and, for the stopped
// of them (named by which), one DisruptionTarget status patch and one
// delete each; kwok's own writes are not sluice's.
func checkPodWritesOnce(t *testing.T, hist *history, writes podWrites, pods []*corev1.Pod, stopped int, which string) {
	t.Helper()
	for _, p := range pods {
		if n := hist.ungates(p.Name); n != 1 {
			t.Errorf("%s was ungated %d times, want 1", p.Name, n)
		}
	}
	if want := 2 * len(pods); !writes.patches.is(want) {
		t.Errorf("the pods were patched %v times, want %d: one ungate and one finalizer removal each; the pods' history:%s",
			writes.patches, want, hist.podStory())
	}
	kwokStatus, kwokDeletes := hist.kwokWrites()
	if n := writes.statusPatches.less(kwokStatus); !n.is(stopped) {
		t.Errorf("the grouper patched pod status %v times (%v patches, %d of them kwok's), want %d: %s's DisruptionTarget",
			n, writes.statusPatches, kwokStatus, stopped, which)
	}
	if n := writes.deletes.less(kwokDeletes); !n.is(stopped) {
		t.Errorf("the grouper deleted pods %v times (%v deletes, %d of them kwok's), want %d: %s", n, writes.deletes, kwokDeletes, stopped, which)
	}
}
