package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/test/harness"
)

// The tests in this file share quota between ClusterQueues through
// cohorts. Cluster-scoped objects (flavors, ClusterQueues, Cohorts) are an
// operator's, created as admin; pods are created and deleted by the
// namespace's user, with `edit`.

var editAndDeletePods = append([]harness.Access{{Verb: "delete", Resource: "pods"}}, editPods...)

// cpuLimits are the optional limits of a ClusterQueue's or Cohort's cpu.
type cpuLimits struct{ borrowing, lending string }

// cpuGroups is resource groups of cpu alone in flavor, nominal cpu.
func cpuGroups(flavor, nominal string, l cpuLimits) []sluicev1alpha1.ResourceGroup {
	rq := sluicev1alpha1.ResourceQuota{Name: corev1.ResourceCPU, NominalQuota: resource.MustParse(nominal)}
	if l.borrowing != "" {
		q := resource.MustParse(l.borrowing)
		rq.BorrowingLimit = &q
	}
	if l.lending != "" {
		q := resource.MustParse(l.lending)
		rq.LendingLimit = &q
	}
	return []sluicev1alpha1.ResourceGroup{{
		CoveredResources: []corev1.ResourceName{corev1.ResourceCPU},
		Flavors:          []sluicev1alpha1.FlavorQuotas{{Name: flavor, Resources: []sluicev1alpha1.ResourceQuota{rq}}},
	}}
}

// createCohortQueue makes the ClusterQueue name in cohort with nominal cpu
// in flavor, and a LocalQueue of the same name in ns.
func createCohortQueue(ctx context.Context, t *testing.T, ns, name, cohort, flavor, nominal string, l cpuLimits) {
	t.Helper()
	mustCreate(ctx, t, &sluicev1alpha1.ClusterQueue{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       sluicev1alpha1.ClusterQueueSpec{CohortName: cohort, ResourceGroups: cpuGroups(flavor, nominal, l)},
	})
	mustCreate(ctx, t, &sluicev1alpha1.LocalQueue{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       sluicev1alpha1.LocalQueueSpec{ClusterQueue: name},
	})
}

// cohortNamespace makes a namespace, deleted with its pods when the test
// ends so that they do not hold the shared nodes' cpu, and its user with
// edit.
func cohortNamespace(ctx context.Context, t *testing.T, prefix string) (string, *harness.User) {
	t.Helper()
	ns := createNamespace(ctx, t, prefix)
	t.Cleanup(func() {
		obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
		if err := k8s.Delete(context.Background(), obj); client.IgnoreNotFound(err) != nil {
			t.Errorf("deleting namespace %s: %v", ns, err)
		}
	})
	return ns, newUser(ctx, t, ns, "alice", []string{"edit"}, editAndDeletePods...)
}

func createFlavor(ctx context.Context, t *testing.T, name string) string {
	t.Helper()
	mustCreate(ctx, t, &sluicev1alpha1.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: name}})
	return name
}

// queuedPod is a pod of cpu in LocalQueue queue that runs until deleted.
func queuedPod(ns, name, queue, cpu string) *corev1.Pod {
	p := newPod(ns, name, cpu, "")
	delete(p.Annotations, "kwok.sluice.dev/run-for")
	p.Labels[podkeys.QueueNameLabel] = queue
	return p
}

// cpuUsage is the cpu entry of flavor in a status's flavorsReservation,
// or nil.
func cpuUsage(flavors []sluicev1alpha1.FlavorUsage, flavor string) *sluicev1alpha1.ResourceUsage {
	for _, f := range flavors {
		if f.Name != flavor {
			continue
		}
		for i := range f.Resources {
			if f.Resources[i].Name == corev1.ResourceCPU {
				return &f.Resources[i]
			}
		}
	}
	return nil
}

// quantityIs reports whether q (nil for none) equals want.
func quantityIs(q *resource.Quantity, want string) bool {
	if q == nil {
		q = &resource.Quantity{}
	}
	return q.Cmp(resource.MustParse(want)) == 0
}

// cpuIs says whether a ClusterQueue's or Cohort's cpu in flavor is total,
// borrowed and lent (those two "" when not checked).
func cpuIs(flavors []sluicev1alpha1.FlavorUsage, flavor, total, borrowed, lent string) bool {
	u := cpuUsage(flavors, flavor)
	if u == nil {
		return false
	}
	return quantityIs(&u.Total, total) && (borrowed == "" || quantityIs(u.Borrowed, borrowed)) && (lent == "" || quantityIs(u.Lent, lent))
}

// borrowedCPU is the cpu a workload's admission records as borrowed.
func borrowedCPU(wl *sluicev1alpha1.Workload) *resource.Quantity {
	total := &resource.Quantity{}
	if wl.Status.Admission == nil {
		return total
	}
	for _, psa := range wl.Status.Admission.PodSetAssignments {
		if q, ok := psa.Borrowed[corev1.ResourceCPU]; ok {
			total.Add(q)
		}
	}
	return total
}

func quotaReservedMessage(wl *sluicev1alpha1.Workload) string {
	if c := meta.FindStatusCondition(wl.Status.Conditions, sluicev1alpha1.WorkloadQuotaReserved); c != nil {
		return c.Message
	}
	return ""
}

// waitsWith is a workload waiting for quota, told each of parts.
func waitsWith(parts ...string) func(*sluicev1alpha1.Workload) bool {
	return func(w *sluicev1alpha1.Workload) bool {
		return waitsForQuota(w) && containsAll(quotaReservedMessage(w), parts...)
	}
}

func waitCohort(ctx context.Context, t *testing.T, name, what string, ok func(*sluicev1alpha1.Cohort) bool) {
	t.Helper()
	var co sluicev1alpha1.Cohort
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := k8s.Get(ctx, client.ObjectKey{Name: name}, &co); err != nil {
			return false, nil
		}
		return ok(&co), nil
	})
	if err != nil {
		t.Fatalf("Cohort %s never had %s: status %+v", name, what, co.Status)
	}
}

// activeIs is an Active condition of status and reason.
func activeIs(conds []metav1.Condition, status metav1.ConditionStatus, reason string) bool {
	c := meta.FindStatusCondition(conds, sluicev1alpha1.ClusterQueueActive)
	return c != nil && c.Status == status && (reason == "" || c.Reason == reason)
}

// TestCohortBorrowing: two ClusterQueues of 2 cpu share an implicit
// cohort. A runs three 1-cpu pods by borrowing B's idle quota, which the
// third pod's Workload and both queues' status record; a 2-cpu pod in B
// then waits, told how much borrowing leaves, and runs once one of A's
// pods is gone: the lender waits for its quota to come back.
func TestCohortBorrowing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns, alice := cohortNamespace(ctx, t, "co-borrow")
	const cohort, a, b = "co-borrow", "co-borrow-a", "co-borrow-b"
	flavor := createFlavor(ctx, t, "co-borrow-flavor")
	createCohortQueue(ctx, t, ns, a, cohort, flavor, "2", cpuLimits{})
	createCohortQueue(ctx, t, ns, b, cohort, flavor, "2", cpuLimits{})

	first, second := queuedPod(ns, "a-0", a, "1"), queuedPod(ns, "a-1", a, "1")
	createAs(ctx, t, alice, first)
	createAs(ctx, t, alice, second)
	for _, p := range []*corev1.Pod{first, second} {
		waitPod(ctx, t, p, "running", running)
		if wl := waitWorkloadOf(ctx, t, p, "admitted", admitted); !borrowedCPU(wl).IsZero() {
			t.Fatalf("workload %s within A's nominal quota records borrowed %v", wl.Name, wl.Status.Admission.PodSetAssignments)
		}
	}
	third := queuedPod(ns, "a-2", a, "1")
	createAs(ctx, t, alice, third)
	waitPod(ctx, t, third, "running on borrowed quota", running)
	wl := waitWorkloadOf(ctx, t, third, "admitted", admitted)
	if got := borrowedCPU(wl); !quantityIs(got, "1") {
		t.Errorf("the third pod's admission records borrowed cpu %s, want 1: %+v", got.String(), wl.Status.Admission)
	}
	want := fmt.Sprintf("Quota reserved in ClusterQueue %s, borrowing 1 cpu in flavor %s from Cohort %s", a, flavor, cohort)
	if msg := quotaReservedMessage(wl); msg != want {
		t.Errorf("QuotaReserved message %q, want %q", msg, want)
	}
	waitClusterQueue(ctx, t, a, "3 cpu reserved, 1 borrowed", func(cq *sluicev1alpha1.ClusterQueue) bool {
		return cpuIs(cq.Status.FlavorsReservation, flavor, "3", "1", "0")
	})
	waitClusterQueue(ctx, t, b, "1 cpu lent", func(cq *sluicev1alpha1.ClusterQueue) bool {
		return cpuIs(cq.Status.FlavorsReservation, flavor, "0", "0", "1")
	})

	// B wants its quota back: 1 of its 2 is lent, so its 2-cpu pod waits
	// until A gives the borrowed cpu back.
	lender := queuedPod(ns, "b-0", b, "2")
	createAs(ctx, t, alice, lender)
	waiting := waitWorkloadOf(ctx, t, lender, "waiting for quota lent to A", waitsWith(
		"insufficient quota for cpu in flavor "+flavor+", 1 more needed: 1 available with borrowing, as Cohort "+cohort+"'s pool has 3 of its 4 in use"))
	t.Logf("B's pod waits: %s", quotaReservedMessage(waiting))
	if cur := getPod(ctx, t, lender); !hasGate(cur) {
		t.Fatalf("pod %s ungated while its quota is lent", lender.Name)
	}
	accepted(ctx, t, alice, "delete", "pod", first.Name, "--wait=false")
	waitPod(ctx, t, lender, "running once A gave quota back", running)
	if wl := waitWorkloadOf(ctx, t, lender, "admitted", admitted); !borrowedCPU(wl).IsZero() {
		t.Errorf("B's pod within B's nominal quota records borrowed %v", wl.Status.Admission.PodSetAssignments)
	}
	for _, p := range []*corev1.Pod{second, third} {
		if cur := getPod(ctx, t, p); !running(cur) {
			t.Errorf("A's pod %s stopped (phase %s): there is no preemption", p.Name, cur.Status.Phase)
		}
	}
}

// TestCohortNestedPool: a ClusterQueue of 1 cpu in Cohort dept, whose
// parent Cohort org holds a pool of 4 cpu, admits a group of four 1-cpu
// pods whole by borrowing 3 from the pool; the Cohorts' status shows what
// their subtrees hold.
func TestCohortNestedPool(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns, alice := cohortNamespace(ctx, t, "co-nested")
	const org, dept, x = "co-nested-org", "co-nested-dept", "co-nested-x"
	flavor := createFlavor(ctx, t, "co-nested-flavor")
	mustCreate(ctx, t, &sluicev1alpha1.Cohort{
		ObjectMeta: metav1.ObjectMeta{Name: org},
		Spec:       sluicev1alpha1.CohortSpec{ResourceGroups: cpuGroups(flavor, "4", cpuLimits{})},
	})
	mustCreate(ctx, t, &sluicev1alpha1.Cohort{
		ObjectMeta: metav1.ObjectMeta{Name: dept},
		Spec:       sluicev1alpha1.CohortSpec{ParentName: org},
	})
	createCohortQueue(ctx, t, ns, x, dept, flavor, "1", cpuLimits{})

	var pods []*corev1.Pod
	for i := range 4 {
		p := groupPod(ns, "ranks", fmt.Sprintf("rank-%d", i), "1", 4, nil)
		p.Labels[podkeys.QueueNameLabel] = x
		createAs(ctx, t, alice, p)
		pods = append(pods, p)
	}
	wl := waitWorkloadOf(ctx, t, pods[0], "admitted", admitted)
	if got := borrowedCPU(wl); !quantityIs(got, "3") {
		t.Errorf("the group's admission records borrowed cpu %s, want 3: %+v", got.String(), wl.Status.Admission)
	}
	want := fmt.Sprintf("Quota reserved in ClusterQueue %s, borrowing 3 cpu in flavor %s from Cohort %s", x, flavor, dept)
	if msg := quotaReservedMessage(wl); msg != want {
		t.Errorf("QuotaReserved message %q, want %q", msg, want)
	}
	for _, p := range pods {
		waitPod(ctx, t, p, "running", running)
	}
	waitClusterQueue(ctx, t, x, "4 cpu reserved, 3 borrowed", func(cq *sluicev1alpha1.ClusterQueue) bool {
		return cpuIs(cq.Status.FlavorsReservation, flavor, "4", "3", "")
	})
	waitCohort(ctx, t, org, "4 cpu in use below it and Active", func(co *sluicev1alpha1.Cohort) bool {
		return cpuIs(co.Status.FlavorsReservation, flavor, "4", "0", "") && activeIs(co.Status.Conditions, metav1.ConditionTrue, "")
	})
	waitCohort(ctx, t, dept, "3 cpu borrowed from its parent", func(co *sluicev1alpha1.Cohort) bool {
		return cpuIs(co.Status.FlavorsReservation, flavor, "4", "3", "") && activeIs(co.Status.Conditions, metav1.ConditionTrue, "")
	})
}

// TestCohortLendingLimit: L (4 cpu, lendingLimit 1) lends a queue of no
// quota of its own one cpu and no more, and keeps the other three for
// itself.
func TestCohortLendingLimit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns, alice := cohortNamespace(ctx, t, "co-lend")
	const cohort, l, m = "co-lend", "co-lend-l", "co-lend-m"
	flavor := createFlavor(ctx, t, "co-lend-flavor")
	createCohortQueue(ctx, t, ns, l, cohort, flavor, "4", cpuLimits{lending: "1"})
	createCohortQueue(ctx, t, ns, m, cohort, flavor, "0", cpuLimits{})

	borrower := queuedPod(ns, "m-0", m, "1")
	createAs(ctx, t, alice, borrower)
	waitPod(ctx, t, borrower, "running on lent quota", running)
	if wl := waitWorkloadOf(ctx, t, borrower, "admitted", admitted); !quantityIs(borrowedCPU(wl), "1") {
		t.Errorf("M's first pod records borrowed %+v, want cpu 1", wl.Status.Admission)
	}
	beyond := queuedPod(ns, "m-1", m, "1")
	createAs(ctx, t, alice, beyond)
	waiting := waitWorkloadOf(ctx, t, beyond, "waiting beyond L's lendingLimit",
		waitsWith("insufficient quota for cpu in flavor "+flavor+", 1 more needed: 0 available with borrowing, as Cohort "+cohort+"'s pool has 1 of its 1 in use"))
	t.Logf("M's second pod waits: %s", quotaReservedMessage(waiting))
	if cur := getPod(ctx, t, beyond); !hasGate(cur) {
		t.Fatalf("pod %s ungated beyond L's lendingLimit", beyond.Name)
	}
	waitClusterQueue(ctx, t, l, "1 cpu lent", func(cq *sluicev1alpha1.ClusterQueue) bool {
		return cpuIs(cq.Status.FlavorsReservation, flavor, "0", "0", "1")
	})

	// What the lendingLimit keeps is L's at once.
	var own []*corev1.Pod
	for i := range 3 {
		p := queuedPod(ns, fmt.Sprintf("l-%d", i), l, "1")
		createAs(ctx, t, alice, p)
		own = append(own, p)
	}
	for _, p := range own {
		waitPod(ctx, t, p, "running on the quota L kept", running)
	}
	waitClusterQueue(ctx, t, l, "3 cpu reserved, 1 lent", func(cq *sluicev1alpha1.ClusterQueue) bool {
		return cpuIs(cq.Status.FlavorsReservation, flavor, "3", "0", "1")
	})
	if cur := getPod(ctx, t, beyond); !hasGate(cur) {
		t.Fatalf("pod %s ungated beyond L's lendingLimit", beyond.Name)
	}
}

// TestCohortCycle: Cohorts P and Q, each the other's parent, make the
// ClusterQueue in P inactive (reason CohortCycle) and P too; its pod stays
// gated until Q's parent is removed, and then runs.
func TestCohortCycle(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns, alice := cohortNamespace(ctx, t, "co-cycle")
	const p, q, cq = "co-cycle-p", "co-cycle-q", "co-cycle-cq"
	flavor := createFlavor(ctx, t, "co-cycle-flavor")
	mustCreate(ctx, t, &sluicev1alpha1.Cohort{ObjectMeta: metav1.ObjectMeta{Name: p}, Spec: sluicev1alpha1.CohortSpec{ParentName: q}})
	mustCreate(ctx, t, &sluicev1alpha1.Cohort{ObjectMeta: metav1.ObjectMeta{Name: q}, Spec: sluicev1alpha1.CohortSpec{ParentName: p}})
	createCohortQueue(ctx, t, ns, cq, p, flavor, "2", cpuLimits{})

	waitClusterQueue(ctx, t, cq, "Active=False, reason CohortCycle", func(c *sluicev1alpha1.ClusterQueue) bool {
		return activeIs(c.Status.Conditions, metav1.ConditionFalse, sluicev1alpha1.ReasonCohortCycle)
	})
	waitCohort(ctx, t, p, "Active=False, reason CohortCycle", func(co *sluicev1alpha1.Cohort) bool {
		return activeIs(co.Status.Conditions, metav1.ConditionFalse, sluicev1alpha1.ReasonCohortCycle)
	})
	pod := queuedPod(ns, "looped", cq, "1")
	createAs(ctx, t, alice, pod)
	held := waitWorkloadOf(ctx, t, pod, "held by the inactive queue", func(w *sluicev1alpha1.Workload) bool {
		return !meta.IsStatusConditionTrue(w.Status.Conditions, sluicev1alpha1.WorkloadQuotaReserved) &&
			containsAll(quotaReservedMessage(w), "ClusterQueue "+cq+" is inactive", "loop")
	})
	t.Logf("the pod below the loop waits: %s", quotaReservedMessage(held))
	if cur := getPod(ctx, t, pod); !hasGate(cur) {
		t.Fatalf("pod %s ungated below a loop of Cohorts", pod.Name)
	}

	// Break the loop: Q becomes a root.
	if err := k8s.Patch(ctx, &sluicev1alpha1.Cohort{ObjectMeta: metav1.ObjectMeta{Name: q}},
		client.RawPatch(types.MergePatchType, []byte(`{"spec":{"parentName":null}}`))); err != nil {
		t.Fatal(err)
	}
	waitPod(ctx, t, pod, "running once the loop is broken", running)
	waitClusterQueue(ctx, t, cq, "Active=True", func(c *sluicev1alpha1.ClusterQueue) bool {
		return activeIs(c.Status.Conditions, metav1.ConditionTrue, "")
	})
	waitCohort(ctx, t, p, "Active=True", func(co *sluicev1alpha1.Cohort) bool {
		return activeIs(co.Status.Conditions, metav1.ConditionTrue, "")
	})
}
