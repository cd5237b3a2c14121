package crash

import (
	"context"
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
)

// groupPod is a pod of group of size pods for LocalQueue queue.
func groupPod(ns, group, name, cpu, runFor string, size int) *corev1.Pod {
	p := newPod(ns, name, userQueue, cpu, runFor)
	p.Labels[podkeys.PodGroupNameLabel] = group
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[podkeys.PodGroupTotalCountAnnotation] = fmt.Sprint(size)
	return p
}

// TestCrashGroup crashes a service on each step of a pod group's life:
// submitted once whole, admitted, every pod ungated, finished, and — once
// its pods are deleted — its Workload deleted by sluice (a group's
// Workload has no owners). However the crash falls, each pod is ungated
// once, the Workload is created, reserved, admitted and finished once, and
// it goes after its pods.
func TestCrashGroup(t *testing.T) {
	for _, point := range []string{
		"grouper/submit", "grouper/ungate", "grouper/report-finish", "grouper/remove-finalizer",
		"grouper/report-no-pods", "admitter/delete-empty-group",
	} {
		t.Run(point, func(t *testing.T) { crashGroup(t, point) })
	}
}

func crashGroup(t *testing.T, point string) {
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	defer cancel()

	// Scenario: a 2-cpu queue and a group of two 1-cpu pods that run for
	// 2s; once the group finished, the user deletes its pods.
	ns := createNamespace(ctx, t, "group")
	createQueues(ctx, t, ns, userQueue, ns, "2")
	hist := record(ctx, t, ns, ns)
	pods := []*corev1.Pod{groupPod(ns, "g", "a", "1", "2s", 2), groupPod(ns, "g", "b", "1", "2s", 2)}
	afterDeletion := point == "grouper/report-no-pods" || point == "admitter/delete-empty-group"

	// Crash point.
	c := arm(ctx, t, point)
	for _, p := range pods {
		mustCreate(ctx, t, p)
	}
	if !afterDeletion {
		c.waitHit(ctx, t)
	}
	for _, p := range pods {
		waitPod(ctx, t, p, "Succeeded without sluice's finalizer", endedClean(corev1.PodSucceeded))
	}
	wl := workloadOf(ctx, t, pods[0], "Finished", condIs(sluicev1alpha1.WorkloadFinished, metav1.ConditionTrue, sluicev1alpha1.ReasonSucceeded))
	for _, p := range pods {
		if err := k8s.Delete(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	if afterDeletion {
		c.waitHit(ctx, t)
	}

	// End state: the pods and then their Workload gone.
	for _, p := range pods {
		waitGone(ctx, t, p)
	}
	waitGone(ctx, t, wl.DeepCopy())
	settle(ctx, t, ns)
	hist.stop()
	hist.check(t)

	if n := hist.added(wl.Name); n != 1 {
		t.Errorf("the group's Workload was created %d times, want once", n)
	}
	for _, cond := range []string{sluicev1alpha1.WorkloadQuotaReserved, sluicev1alpha1.WorkloadAdmitted, sluicev1alpha1.WorkloadFinished} {
		if n := hist.transitions(wl.Name, cond); n != 1 {
			t.Errorf("the Workload went to %s=True %d times, want exactly 1", cond, n)
		}
	}
	for _, p := range pods {
		if n := hist.ungates(p.Name); n != 1 {
			t.Errorf("%s was ungated %d times, want 1", p.Name, n)
		}
	}
	if q := hist.maxCPUReserved(); q.Cmp(resource.MustParse("2")) > 0 {
		t.Errorf("ClusterQueue reported %s cpu reserved, want at most the group's 2", q.String())
	}
}

// TestCrashGroupGoneWhileGrouperDown: the grouper is down while every pod
// of a queued group is deleted. Nothing tells it of the deletions when it
// starts again; it finds the group's Workload without pods among the
// Workloads it lists, and the Workload goes.
func TestCrashGroupGoneWhileGrouperDown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	defer cancel()
	ns := createNamespace(ctx, t, "group-down")
	createQueues(ctx, t, ns, userQueue, ns, "1") // the group needs 2: it stays queued
	pods := []*corev1.Pod{groupPod(ns, "g", "a", "1", "", 2), groupPod(ns, "g", "b", "1", "", 2)}
	for _, p := range pods {
		mustCreate(ctx, t, p)
	}
	wl := workloadOf(ctx, t, pods[0], "queued", condIs(sluicev1alpha1.WorkloadQuotaReserved, metav1.ConditionFalse, ""))

	grouper := sluice.Grouper
	t.Cleanup(func() { ensureRunning(t, grouper, false) })
	if err := grouper.Kill(); err != nil {
		t.Fatal(err)
	}
	// The pods hold sluice's finalizer, which only the grouper removes:
	// take it off by hand, as an operator would with the grouper down.
	for _, p := range pods {
		if err := k8s.Delete(ctx, p); err != nil {
			t.Fatal(err)
		}
		cur := &corev1.Pod{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(p), cur); err != nil {
			t.Fatal(err)
		}
		orig := cur.DeepCopy()
		cur.Finalizers = slices.DeleteFunc(cur.Finalizers, func(f string) bool { return f == podkeys.ManagedFinalizer })
		if err := k8s.Patch(ctx, cur, client.MergeFrom(orig)); err != nil {
			t.Fatal(err)
		}
		waitGone(ctx, t, p)
	}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(wl), wl); err != nil || wl.DeletionTimestamp != nil {
		t.Fatalf("the Workload went while the grouper was down (err %v): nothing else may delete it", err)
	}

	if err := grouper.Start(); err != nil {
		t.Fatal(err)
	}
	if err := grouper.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	waitGone(ctx, t, wl.DeepCopy())
	settle(ctx, t, ns)
}

// TestCrashGroupEviction crashes a service on each step of deactivating a
// running group and bringing it back: its pods are deleted, its quota
// released, and its Workload stays, waiting for its pods; pods created
// again end the wait, and once reactivated the same Workload is admitted
// again and the new pods run. However the crash falls, the Workload is
// never created again, each old pod is marked and deleted, and the queue
// never holds more than the group.
func TestCrashGroupEviction(t *testing.T) {
	for _, point := range []string{
		"admitter/evict", "grouper/delete", "admitter/release", "grouper/report-no-pods", "admitter/pods-back",
	} {
		t.Run(point, func(t *testing.T) { crashGroupEviction(t, point) })
	}
}

func crashGroupEviction(t *testing.T, point string) {
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	defer cancel()

	// Scenario: a 2-cpu queue and a group of two 1-cpu pods that run until
	// deleted; the user deactivates its Workload, creates the pods again
	// (new names, same group), and reactivates it.
	ns := createNamespace(ctx, t, "group-evict")
	createQueues(ctx, t, ns, userQueue, ns, "2")
	hist := record(ctx, t, ns, ns)
	oldPods := []*corev1.Pod{groupPod(ns, "g", "a", "1", "", 2), groupPod(ns, "g", "b", "1", "", 2)}
	for _, p := range oldPods {
		mustCreate(ctx, t, p)
	}
	for _, p := range oldPods {
		waitPod(ctx, t, p, "Running", phaseIs(corev1.PodRunning))
	}
	wl := workloadOf(ctx, t, oldPods[0], "Admitted", condIs(sluicev1alpha1.WorkloadAdmitted, metav1.ConditionTrue, ""))

	// Crash point.
	c := arm(ctx, t, point)
	setActive(ctx, t, wl, false)
	if point != "admitter/pods-back" {
		c.waitHit(ctx, t)
	}
	for _, p := range oldPods {
		waitGone(ctx, t, p)
	}
	waitWorkload(ctx, t, wl, "waiting for its pods without quota", func(w *sluicev1alpha1.Workload) error {
		if err := condIs(sluicev1alpha1.WorkloadQuotaReserved, metav1.ConditionFalse, "")(w); err != nil {
			return err
		}
		return condIs(sluicev1alpha1.WorkloadWaitingForReplacementPods, metav1.ConditionTrue, "")(w)
	})
	newPods := []*corev1.Pod{groupPod(ns, "g", "a-again", "1", "2s", 2), groupPod(ns, "g", "b-again", "1", "2s", 2)}
	for _, p := range newPods {
		mustCreate(ctx, t, p)
	}
	if point == "admitter/pods-back" {
		c.waitHit(ctx, t)
	}
	waitWorkload(ctx, t, wl, "its pods back", condIs(sluicev1alpha1.WorkloadWaitingForReplacementPods, metav1.ConditionFalse, ""))
	setActive(ctx, t, wl, true)

	// End state: the new pods ran in the same Workload.
	for _, p := range newPods {
		waitPod(ctx, t, p, "Succeeded without sluice's finalizer", endedClean(corev1.PodSucceeded))
	}
	final := waitWorkload(ctx, t, wl, "Finished", condIs(sluicev1alpha1.WorkloadFinished, metav1.ConditionTrue, sluicev1alpha1.ReasonSucceeded))
	if final.UID != wl.UID {
		t.Errorf("the group finished in Workload uid %s, want the one it was evicted from (%s)", final.UID, wl.UID)
	}
	settle(ctx, t, ns)
	hist.stop()
	hist.check(t)

	if n := hist.added(wl.Name); n != 1 {
		t.Errorf("the group's Workload was created %d times, want once", n)
	}
	if n := hist.transitions(wl.Name, sluicev1alpha1.WorkloadAdmitted); n != 2 {
		t.Errorf("the Workload went to Admitted=True %d times, want 2: before the eviction and after", n)
	}
	for _, p := range slices.Concat(oldPods, newPods) {
		if n := hist.ungates(p.Name); n != 1 {
			t.Errorf("%s was ungated %d times, want 1", p.Name, n)
		}
	}
	for _, p := range oldPods {
		if _, ok := first(hist.podEvents(p.Name), func(e event[*corev1.Pod]) bool {
			c := podCondition(e.obj, corev1.DisruptionTarget)
			return c != nil && c.Status == corev1.ConditionTrue && c.Reason == disruptionReason
		}); !ok {
			t.Errorf("%s was deleted without the DisruptionTarget condition", p.Name)
		}
	}
	if q := hist.maxCPUReserved(); q.Cmp(resource.MustParse("2")) > 0 {
		t.Errorf("ClusterQueue reported %s cpu reserved, want at most the group's 2", q.String())
	}
}

// TestCrashGroupRunAgain crashes a service while a pod group runs again
// under the name of its finished run: the finished Workload is deleted
// and a new one created for the new pod, which runs once; the first run's
// pod is left alone.
func TestCrashGroupRunAgain(t *testing.T) {
	for _, point := range []string{"admitter/delete-past-run", "grouper/report-stopped", "grouper/submit"} {
		t.Run(point, func(t *testing.T) { crashGroupRunAgain(t, point) })
	}
}

func crashGroupRunAgain(t *testing.T, point string) {
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	defer cancel()

	// Scenario: a 1-cpu queue; a group of one pod runs for 1s and
	// finishes, then the same group name is used for a new pod.
	ns := createNamespace(ctx, t, "group-again")
	createQueues(ctx, t, ns, userQueue, ns, "1")
	hist := record(ctx, t, ns, ns)
	earlier := groupPod(ns, "g", "run-1", "1", "1s", 1)
	mustCreate(ctx, t, earlier)
	waitPod(ctx, t, earlier, "Succeeded without sluice's finalizer", endedClean(corev1.PodSucceeded))
	first := workloadOf(ctx, t, earlier, "Finished", condIs(sluicev1alpha1.WorkloadFinished, metav1.ConditionTrue, sluicev1alpha1.ReasonSucceeded))

	// Crash point.
	c := arm(ctx, t, point)
	later := groupPod(ns, "g", "run-2", "1", "1s", 1)
	mustCreate(ctx, t, later)
	c.waitHit(ctx, t)

	// End state: the new pod ran in a Workload of its own.
	waitPod(ctx, t, later, "Succeeded without sluice's finalizer", endedClean(corev1.PodSucceeded))
	second := workloadOf(ctx, t, later, "Finished", condIs(sluicev1alpha1.WorkloadFinished, metav1.ConditionTrue, sluicev1alpha1.ReasonSucceeded))
	if second.UID == first.UID {
		t.Fatalf("the new run finished in the first run's Workload %s", first.UID)
	}
	settle(ctx, t, ns)
	hist.stop()
	hist.check(t)
	if n := hist.added(first.Name); n != 2 {
		t.Errorf("Workload %s was created %d times, want twice: once per run", first.Name, n)
	}
	if n := hist.ungates(later.Name); n != 1 {
		t.Errorf("the new pod was ungated %d times, want 1", n)
	}
	if cur := waitPod(ctx, t, earlier, "still there", phaseIs(corev1.PodSucceeded)); cur.DeletionTimestamp != nil {
		t.Errorf("the first run's pod was deleted")
	}
}

// TestCrashGroupProgress crashes a service right after a running group's
// progress is reported: a pod that succeeded (its quota is released at
// once, so a waiting pod starts while the group still runs), and a pod
// that failed (the group waits for its replacement). However the crash
// falls, the quota is released once and never double-booked, and the
// group ends as a success once its replacement succeeds.
func TestCrashGroupProgress(t *testing.T) {
	for _, point := range []string{"grouper/report-state", "admitter/progress"} {
		t.Run(point, func(t *testing.T) { crashGroupProgress(t, point) })
	}
}

func crashGroupProgress(t *testing.T, point string) {
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	defer cancel()

	// Scenario: a 3-cpu queue; a group of three 1-cpu pods: one succeeds
	// after 5s, one fails after 5s (time enough to arm the crash point),
	// one runs 15s. A single 1-cpu pod waits for quota; the failed pod is
	// replaced.
	ns := createNamespace(ctx, t, "group-progress")
	createQueues(ctx, t, ns, userQueue, ns, "3")
	hist := record(ctx, t, ns, ns)
	quick := groupPod(ns, "g", "quick", "1", "5s", 3)
	failing := groupPod(ns, "g", "failing", "1", "", 3)
	failing.Annotations["kwok.sluice.dev/fail-after"] = "5s"
	steady := groupPod(ns, "g", "steady", "1", "15s", 3)
	// One role: the three have the same shape, so one pod set of 3.
	for _, p := range []*corev1.Pod{quick, failing, steady} {
		mustCreate(ctx, t, p)
	}
	for _, p := range []*corev1.Pod{quick, failing, steady} {
		waitPod(ctx, t, p, "started", func(p *corev1.Pod) error {
			if gated(p) {
				return fmt.Errorf("still gated")
			}
			return nil
		})
	}
	wl := workloadOf(ctx, t, quick, "Admitted", condIs(sluicev1alpha1.WorkloadAdmitted, metav1.ConditionTrue, ""))
	waiting := newPod(ns, "waiting", userQueue, "1", "1s")

	// Crash point: armed once the group runs; the first progress report
	// (the success, the failure, or both) passes it.
	c := arm(ctx, t, point)
	mustCreate(ctx, t, waiting)
	c.waitHit(ctx, t)

	// The succeeded pod's quota lets the waiting pod run while the group
	// does; the failed pod waits for its replacement.
	waitPod(ctx, t, waiting, "Succeeded without sluice's finalizer", endedClean(corev1.PodSucceeded))
	waitWorkload(ctx, t, wl, "waiting for a replacement", condIs(sluicev1alpha1.WorkloadWaitingForReplacementPods, metav1.ConditionTrue, ""))
	replacement := groupPod(ns, "g", "failing-again", "1", "1s", 3)
	mustCreate(ctx, t, replacement)

	// End state: the group succeeded in its Workload.
	waitWorkload(ctx, t, wl, "Finished", condIs(sluicev1alpha1.WorkloadFinished, metav1.ConditionTrue, sluicev1alpha1.ReasonSucceeded))
	for _, p := range []*corev1.Pod{quick, steady, replacement} {
		waitPod(ctx, t, p, "Succeeded without sluice's finalizer", endedClean(corev1.PodSucceeded))
	}
	waitPod(ctx, t, failing, "freed by its replacement", func(p *corev1.Pod) error {
		if hasFinalizer(p) {
			return fmt.Errorf("still holds sluice's finalizer")
		}
		return nil
	})
	settle(ctx, t, ns)
	hist.stop()
	hist.check(t)
	if q := hist.maxCPUReserved(); q.Cmp(resource.MustParse("3")) > 0 {
		t.Errorf("ClusterQueue reported %s cpu reserved, want at most its 3 cpu quota", q.String())
	}
	if n := hist.transitions(wl.Name, sluicev1alpha1.WorkloadAdmitted); n != 1 {
		t.Errorf("the group went to Admitted=True %d times, want 1", n)
	}
	if n := hist.ungates(replacement.Name); n != 1 {
		t.Errorf("the replacement was ungated %d times, want 1", n)
	}
}
