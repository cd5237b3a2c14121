package admitter

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	sluicev1 "github.com/sluice-dev/sluice/gen/sluice/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

// member is a ClusterQueue of a cohort test: its cohort and its cpu quota
// in the test's one flavor; limits "" are unset.
type member struct {
	cohort             string
	cpu                string
	borrowing, lending string
	extra              []v1alpha1.ResourceQuota // more resources of the same group
	coveredExtra       []corev1.ResourceName
	waitActive         bool
	// weight is the queue's fair-sharing weight; "" sets none.
	weight string
}

// cohortSetup is a namespace, one flavor, and per member a ClusterQueue
// with a LocalQueue of the same name in the namespace.
type cohortSetup struct {
	ns, flavor string
}

// newMembers creates the namespace, flavor and queues; each member's
// ClusterQueue name is returned in the same order. Members with
// waitActive are waited for until the admitter reports them Active.
func newMembers(ctx context.Context, t *testing.T, members ...member) (cohortSetup, []string) {
	t.Helper()
	st := cohortSetup{ns: unique("cohort"), flavor: unique("flavor")}
	create(ctx, t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: st.ns}})
	create(ctx, t, &v1alpha1.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: st.flavor}})
	names := make([]string, len(members))
	for i, m := range members {
		names[i] = unique("cq")
		cq := &v1alpha1.ClusterQueue{
			ObjectMeta: metav1.ObjectMeta{Name: names[i]},
			Spec: v1alpha1.ClusterQueueSpec{
				CohortName: m.cohort,
				ResourceGroups: []v1alpha1.ResourceGroup{{
					CoveredResources: append([]corev1.ResourceName{corev1.ResourceCPU}, m.coveredExtra...),
					Flavors: []v1alpha1.FlavorQuotas{{Name: st.flavor, Resources: append(
						[]v1alpha1.ResourceQuota{limitedQuota(corev1.ResourceCPU, m.cpu, m.borrowing, m.lending)}, m.extra...)}},
				}},
			},
		}
		if m.weight != "" {
			cq.Spec.FairSharing = &v1alpha1.FairSharing{Weight: ptr.To(resource.MustParse(m.weight))}
		}
		create(ctx, t, cq)
		create(ctx, t, &v1alpha1.LocalQueue{
			ObjectMeta: metav1.ObjectMeta{Namespace: st.ns, Name: names[i]},
			Spec:       v1alpha1.LocalQueueSpec{ClusterQueue: names[i]},
		})
	}
	for i, m := range members {
		if m.waitActive {
			waitClusterQueue(ctx, t, names[i], "Active", func(cq *v1alpha1.ClusterQueue) bool {
				return meta.IsStatusConditionTrue(cq.Status.Conditions, v1alpha1.ClusterQueueActive)
			})
		}
	}
	return st, names
}

func limitedQuota(res corev1.ResourceName, nominal, borrowing, lending string) v1alpha1.ResourceQuota {
	q := v1alpha1.ResourceQuota{Name: res, NominalQuota: resource.MustParse(nominal)}
	if borrowing != "" {
		q.BorrowingLimit = ptr.To(resource.MustParse(borrowing))
	}
	if lending != "" {
		q.LendingLimit = ptr.To(resource.MustParse(lending))
	}
	return q
}

// newCohort creates the Cohort name with parent and, when cpu is not "",
// a pool of cpu in flavor.
func newCohort(ctx context.Context, t *testing.T, name, parent, flavor, cpu string) {
	t.Helper()
	co := &v1alpha1.Cohort{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1alpha1.CohortSpec{ParentName: parent},
	}
	if cpu != "" {
		co.Spec.ResourceGroups = []v1alpha1.ResourceGroup{{
			CoveredResources: []corev1.ResourceName{corev1.ResourceCPU},
			Flavors: []v1alpha1.FlavorQuotas{{Name: flavor, Resources: []v1alpha1.ResourceQuota{
				{Name: corev1.ResourceCPU, NominalQuota: resource.MustParse(cpu)},
			}}},
		}}
	}
	create(ctx, t, co)
}

// inQueue submits to the LocalQueue lq instead of "lq".
func inQueue(lq string) func(*sluicev1.Workload) {
	return func(w *sluicev1.Workload) { w.QueueName = lq }
}

func waitClusterQueue(ctx context.Context, t *testing.T, name, what string, cond func(*v1alpha1.ClusterQueue) bool) *v1alpha1.ClusterQueue {
	t.Helper()
	var last *v1alpha1.ClusterQueue
	waitFor(ctx, t, "ClusterQueue "+name+" "+what, func() (bool, string) {
		var got v1alpha1.ClusterQueue // fresh: fields the server omits must not keep earlier values
		if err := s.k8s.Get(ctx, clientKey(name), &got); err != nil {
			return false, err.Error()
		}
		last = &got
		return cond(&got), fmt.Sprintf("conditions %+v flavorsReservation %s", got.Status.Conditions, describeUsage(got.Status.FlavorsReservation))
	})
	return last
}

func waitCohort(ctx context.Context, t *testing.T, name, what string, cond func(*v1alpha1.Cohort) bool) *v1alpha1.Cohort {
	t.Helper()
	var last *v1alpha1.Cohort
	waitFor(ctx, t, "Cohort "+name+" "+what, func() (bool, string) {
		var got v1alpha1.Cohort // fresh: fields the server omits must not keep earlier values
		if err := s.k8s.Get(ctx, clientKey(name), &got); err != nil {
			return false, err.Error()
		}
		last = &got
		return cond(&got), fmt.Sprintf("conditions %+v flavorsReservation %s", got.Status.Conditions, describeUsage(got.Status.FlavorsReservation))
	})
	return last
}

// usageIs reports whether flavors records, for flavor and res, total,
// borrowed and lent as given ("" skips a figure; an unset figure counts
// as 0).
func usageIs(flavors []v1alpha1.FlavorUsage, flavor string, res corev1.ResourceName, total, borrowed, lent string) bool {
	for _, f := range flavors {
		if f.Name != flavor {
			continue
		}
		for _, r := range f.Resources {
			if r.Name != res {
				continue
			}
			return quantityIs(&r.Total, total) && quantityIs(r.Borrowed, borrowed) && quantityIs(r.Lent, lent)
		}
	}
	return false
}

func quantityIs(q *resource.Quantity, want string) bool {
	if want == "" {
		return true
	}
	w := resource.MustParse(want)
	if q == nil {
		return w.IsZero()
	}
	return q.Cmp(w) == 0
}

func describeUsage(flavors []v1alpha1.FlavorUsage) string {
	show := func(q *resource.Quantity) string {
		if q == nil {
			return "<unset>"
		}
		return q.String()
	}
	var parts []string
	for _, f := range flavors {
		for _, r := range f.Resources {
			parts = append(parts, fmt.Sprintf("%s/%s{total %s borrowed %s lent %s}", f.Name, r.Name, r.Total.String(), show(r.Borrowed), show(r.Lent)))
		}
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func activeCondition(conds []metav1.Condition) *metav1.Condition {
	return meta.FindStatusCondition(conds, v1alpha1.ClusterQueueActive)
}

// pendingWith waits until the workload waits for quota with a message
// that satisfies ok, and checks it holds no reservation.
func pendingWith(ctx context.Context, t *testing.T, ns, name string, ok func(string) bool) string {
	t.Helper()
	wl := waitWorkload(ctx, t, ns, name, "pending", func(wl *v1alpha1.Workload) bool {
		c := condition(wl, v1alpha1.WorkloadQuotaReserved)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == v1alpha1.ReasonPending && ok(c.Message)
	})
	if wl.Status.Admission != nil {
		t.Fatalf("%s/%s is pending but holds %+v", ns, name, wl.Status.Admission)
	}
	return condition(wl, v1alpha1.WorkloadQuotaReserved).Message
}

func finish(ctx context.Context, t *testing.T, ns, name string) {
	t.Helper()
	if _, err := s.client.ReportProgress(ctx, &admitterv1.ReportProgressRequest{
		Workload: &sluicev1.WorkloadRef{Namespace: ns, Name: name},
		Finish:   &admitterv1.Finish{Succeeded: true},
	}); err != nil {
		t.Fatalf("finish %s/%s: %v", ns, name, err)
	}
}

// TestCohortBorrowing: a ClusterQueue takes its cohort's unused quota
// beyond its own; the workload's admission records what was borrowed, the
// QuotaReserved message says from where, the borrower's status shows it
// borrowed and the lender's that it lent. When the lender wants its quota
// back it waits (nothing is preempted) and gets it once the borrower
// gives it back.
func TestCohortBorrowing(t *testing.T) {
	ctx := testContext(t)
	cohort := unique("org") // no Cohort object: the name alone groups the queues
	st, cqs := newMembers(ctx, t,
		member{cohort: cohort, cpu: "2", waitActive: true},
		member{cohort: cohort, cpu: "1", waitActive: true},
	)
	lender, borrower := cqs[0], cqs[1]

	submit(ctx, t, st.ns, "big", "2", inQueue(borrower))
	wl := waitWorkload(ctx, t, st.ns, "big", "admitted", admitted)
	if wl.Status.Admission.ClusterQueue != borrower || len(wl.Status.Admission.PodSetAssignments) != 1 {
		t.Fatalf("admission = %+v, want one pod set in %s", wl.Status.Admission, borrower)
	}
	psa := wl.Status.Admission.PodSetAssignments[0]
	if psa.Flavors[corev1.ResourceCPU] != st.flavor {
		t.Fatalf("flavors = %v, want cpu in %s", psa.Flavors, st.flavor)
	}
	if got := psa.Borrowed[corev1.ResourceCPU]; len(psa.Borrowed) != 1 || got.Cmp(resource.MustParse("1")) != 0 {
		t.Fatalf("borrowed = %v, want 1 cpu", psa.Borrowed)
	}
	want := fmt.Sprintf("Quota reserved in ClusterQueue %s, borrowing 1 cpu in flavor %s from Cohort %s", borrower, st.flavor, cohort)
	if msg := condition(wl, v1alpha1.WorkloadQuotaReserved).Message; msg != want {
		t.Fatalf("QuotaReserved message = %q, want %q", msg, want)
	}

	waitClusterQueue(ctx, t, borrower, "borrowing 1 cpu", func(cq *v1alpha1.ClusterQueue) bool {
		return usageIs(cq.Status.FlavorsReservation, st.flavor, corev1.ResourceCPU, "2", "1", "0") && cq.Status.AdmittedWorkloads == 1
	})
	waitClusterQueue(ctx, t, lender, "lending 1 cpu", func(cq *v1alpha1.ClusterQueue) bool {
		return usageIs(cq.Status.FlavorsReservation, st.flavor, corev1.ResourceCPU, "0", "0", "1")
	})

	// The lender's own workload needs all of its nominal quota: 1 of it
	// is held by the borrower, so it waits and is told so.
	submit(ctx, t, st.ns, "own", "2", inQueue(lender))
	msg := pendingWith(ctx, t, st.ns, "own", func(m string) bool { return strings.Contains(m, "insufficient quota") })
	for _, part := range []string{"1 more needed", "available with borrowing", "lent while it was unused"} {
		if !strings.Contains(msg, part) {
			t.Fatalf("the lender's waiting message %q does not say %q", msg, part)
		}
	}

	// The borrower finishes: the lender gets its quota back, borrowing
	// nothing.
	finish(ctx, t, st.ns, "big")
	own := waitWorkload(ctx, t, st.ns, "own", "admitted", admitted)
	if msg := condition(own, v1alpha1.WorkloadQuotaReserved).Message; msg != "Quota reserved in ClusterQueue "+lender {
		t.Fatalf("QuotaReserved message = %q, want no borrowing", msg)
	}
	if b := own.Status.Admission.PodSetAssignments[0].Borrowed; len(b) != 0 {
		t.Fatalf("within its nominal quota the lender recorded borrowed %v", b)
	}
	waitClusterQueue(ctx, t, lender, "using its own quota", func(cq *v1alpha1.ClusterQueue) bool {
		return usageIs(cq.Status.FlavorsReservation, st.flavor, corev1.ResourceCPU, "2", "0", "0")
	})
	waitClusterQueue(ctx, t, borrower, "holding nothing", func(cq *v1alpha1.ClusterQueue) bool {
		return usageIs(cq.Status.FlavorsReservation, st.flavor, corev1.ResourceCPU, "0", "0", "0")
	})
}

// TestCohortPoolAndStatus: a Cohort's own pool lends to the queues of a
// child Cohort; each Cohort's status reports what the ClusterQueues below
// it hold and what its subtree borrows from its parent, and is Active.
func TestCohortPoolAndStatus(t *testing.T) {
	ctx := testContext(t)
	root, child := unique("org"), unique("dept")
	st, cqs := newMembers(ctx, t, member{cohort: child, cpu: "1"})
	newCohort(ctx, t, root, "", st.flavor, "4")
	newCohort(ctx, t, child, root, "", "")
	cq := cqs[0]
	for _, name := range []string{root, child} {
		waitCohort(ctx, t, name, "Active", func(co *v1alpha1.Cohort) bool {
			return meta.IsStatusConditionTrue(co.Status.Conditions, v1alpha1.ClusterQueueActive)
		})
	}
	waitClusterQueue(ctx, t, cq, "Active", func(cq *v1alpha1.ClusterQueue) bool {
		return meta.IsStatusConditionTrue(cq.Status.Conditions, v1alpha1.ClusterQueueActive)
	})

	submit(ctx, t, st.ns, "w", "3", inQueue(cq))
	wl := waitWorkload(ctx, t, st.ns, "w", "admitted", admitted)
	if got := wl.Status.Admission.PodSetAssignments[0].Borrowed[corev1.ResourceCPU]; got.Cmp(resource.MustParse("2")) != 0 {
		t.Fatalf("borrowed = %v, want 2 cpu", wl.Status.Admission.PodSetAssignments[0].Borrowed)
	}
	want := fmt.Sprintf("Quota reserved in ClusterQueue %s, borrowing 2 cpu in flavor %s from Cohort %s", cq, st.flavor, child)
	if msg := condition(wl, v1alpha1.WorkloadQuotaReserved).Message; msg != want {
		t.Fatalf("QuotaReserved message = %q, want %q", msg, want)
	}

	// The child Cohort has 1 (its queue's) and its queues hold 3: it
	// borrows 2 from the root's pool. The root has no parent to borrow
	// from.
	waitCohort(ctx, t, child, "total 3, borrowed 2", func(co *v1alpha1.Cohort) bool {
		return usageIs(co.Status.FlavorsReservation, st.flavor, corev1.ResourceCPU, "3", "2", "0")
	})
	rootCo := waitCohort(ctx, t, root, "total 3", func(co *v1alpha1.Cohort) bool {
		return usageIs(co.Status.FlavorsReservation, st.flavor, corev1.ResourceCPU, "3", "0", "0")
	})
	if c := activeCondition(rootCo.Status.Conditions); c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != rootCo.Generation {
		t.Fatalf("root Active = %+v, want True for generation %d", c, rootCo.Generation)
	}
	waitClusterQueue(ctx, t, cq, "borrowing 2", func(cq *v1alpha1.ClusterQueue) bool {
		return usageIs(cq.Status.FlavorsReservation, st.flavor, corev1.ResourceCPU, "3", "2", "0")
	})

	// Releasing the quota brings the figures back to zero.
	finish(ctx, t, st.ns, "w")
	waitCohort(ctx, t, child, "empty", func(co *v1alpha1.Cohort) bool {
		return usageIs(co.Status.FlavorsReservation, st.flavor, corev1.ResourceCPU, "0", "0", "0")
	})
	waitCohort(ctx, t, root, "empty", func(co *v1alpha1.Cohort) bool {
		return usageIs(co.Status.FlavorsReservation, st.flavor, corev1.ResourceCPU, "0", "0", "0")
	})
}

// TestCohortLoop: Cohorts whose parents loop are inactive, and so is every
// ClusterQueue below them; a workload waits, saying why, until the loop is
// broken.
func TestCohortLoop(t *testing.T) {
	ctx := testContext(t)
	x, y := unique("loop-x"), unique("loop-y")
	st, cqs := newMembers(ctx, t, member{cohort: x, cpu: "2"})
	newCohort(ctx, t, x, y, "", "")
	newCohort(ctx, t, y, x, "", "")
	cq := cqs[0]

	inCycle := func(conds []metav1.Condition) (bool, *metav1.Condition) {
		c := activeCondition(conds)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == v1alpha1.ReasonCohortCycle, c
	}
	for _, name := range []string{x, y} {
		co := waitCohort(ctx, t, name, "Active=False for the loop", func(co *v1alpha1.Cohort) bool {
			ok, _ := inCycle(co.Status.Conditions)
			return ok
		})
		if c := activeCondition(co.Status.Conditions); !strings.Contains(c.Message, x) || !strings.Contains(c.Message, y) {
			t.Fatalf("Cohort %s Active message %q does not name both Cohorts of the loop", name, c.Message)
		}
	}
	waitClusterQueue(ctx, t, cq, "Active=False for the loop", func(cq *v1alpha1.ClusterQueue) bool {
		ok, _ := inCycle(cq.Status.Conditions)
		return ok
	})

	submit(ctx, t, st.ns, "stuck", "1", inQueue(cq))
	msg := pendingWith(ctx, t, st.ns, "stuck", func(m string) bool { return strings.Contains(m, "form a loop") })
	if !strings.Contains(msg, "ClusterQueue "+cq+" is inactive") {
		t.Fatalf("waiting message %q does not say the queue is inactive", msg)
	}

	// Break the loop: y becomes a root.
	var co v1alpha1.Cohort
	if err := s.k8s.Get(ctx, clientKey(y), &co); err != nil {
		t.Fatal(err)
	}
	before := co.DeepCopy()
	co.Spec.ParentName = ""
	if err := s.k8s.Patch(ctx, &co, client.MergeFrom(before)); err != nil {
		t.Fatalf("clear %s's parent: %v", y, err)
	}
	waitWorkload(ctx, t, st.ns, "stuck", "admitted", admitted)
	waitClusterQueue(ctx, t, cq, "Active", func(cq *v1alpha1.ClusterQueue) bool {
		return meta.IsStatusConditionTrue(cq.Status.Conditions, v1alpha1.ClusterQueueActive)
	})
	for _, name := range []string{x, y} {
		waitCohort(ctx, t, name, "Active", func(co *v1alpha1.Cohort) bool {
			return meta.IsStatusConditionTrue(co.Status.Conditions, v1alpha1.ClusterQueueActive)
		})
	}
}

// TestLendingLimitAboveQuota: a ClusterQueue cannot lend more than it has;
// the schema cannot compare quantities, so the admitter makes the queue
// inactive, naming the field, until it is fixed.
func TestLendingLimitAboveQuota(t *testing.T) {
	ctx := testContext(t)
	st, cqs := newMembers(ctx, t, member{
		cohort: unique("org"), cpu: "2", lending: "2",
		coveredExtra: []corev1.ResourceName{corev1.ResourceMemory},
		extra:        []v1alpha1.ResourceQuota{limitedQuota(corev1.ResourceMemory, "1Gi", "", "2Gi")},
	})
	name := cqs[0]
	cq := waitClusterQueue(ctx, t, name, "inactive for its lendingLimit", func(cq *v1alpha1.ClusterQueue) bool {
		c := activeCondition(cq.Status.Conditions)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == "LendingLimitAboveQuota"
	})
	msg := activeCondition(cq.Status.Conditions).Message
	for _, part := range []string{"spec.resourceGroups[0].flavors[0].resources[1].lendingLimit", "2Gi", "nominalQuota 1Gi"} {
		if !strings.Contains(msg, part) {
			t.Fatalf("Active message %q does not contain %q", msg, part)
		}
	}
	if strings.Contains(msg, "resources[0]") {
		t.Fatalf("Active message %q blames cpu, whose lendingLimit equals its quota", msg)
	}

	submit(ctx, t, st.ns, "w", "1", inQueue(name))
	pendingWith(ctx, t, st.ns, "w", func(m string) bool { return strings.Contains(m, "is inactive") && strings.Contains(m, "lendingLimit") })

	// Lending all of it is allowed: the queue becomes active and admits.
	before := cq.DeepCopy()
	cq.Spec.ResourceGroups[0].Flavors[0].Resources[1].LendingLimit = ptr.To(resource.MustParse("1Gi"))
	if err := s.k8s.Patch(ctx, cq, client.MergeFrom(before)); err != nil {
		t.Fatalf("lower the lendingLimit: %v", err)
	}
	waitWorkload(ctx, t, st.ns, "w", "admitted", admitted)
	waitClusterQueue(ctx, t, name, "Active", func(cq *v1alpha1.ClusterQueue) bool {
		return meta.IsStatusConditionTrue(cq.Status.Conditions, v1alpha1.ClusterQueueActive)
	})
}

// TestCohortShortfall: a workload that does not fit in a cohort is told
// what borrowing leaves available and what must be given back, or that it
// can never fit and why; it is admitted once the quota is given back.
func TestCohortShortfall(t *testing.T) {
	ctx := testContext(t)
	cohort := unique("org")
	st, cqs := newMembers(ctx, t,
		member{cohort: cohort, cpu: "4", waitActive: true},
		member{cohort: cohort, cpu: "4", waitActive: true},
	)
	a, b := cqs[0], cqs[1]
	submit(ctx, t, st.ns, "a1", "1", inQueue(a))
	waitWorkload(ctx, t, st.ns, "a1", "admitted", admitted)
	submit(ctx, t, st.ns, "b1", "6", inQueue(b))
	waitWorkload(ctx, t, st.ns, "b1", "admitted", admitted)

	// a holds 1 and b 6 of the cohort's 8: 1 is left, 2 of a's quota
	// are lent.
	submit(ctx, t, st.ns, "a2", "3", inQueue(a))
	want := fmt.Sprintf("couldn't assign flavors to pod set main: insufficient quota for cpu in flavor %[1]s, 2 more needed: "+
		"1 available with borrowing, as Cohort %[2]s's pool has 7 of its 8 in use; it fits once 2 more of Cohort %[2]s's quota is given back "+
		"(others hold 2 of the queue's nominal quota, lent while it was unused)", st.flavor, cohort)
	if msg := pendingWith(ctx, t, st.ns, "a2", func(m string) bool { return strings.Contains(m, "insufficient quota") }); msg != want {
		t.Fatalf("waiting message:\n got %s\nwant %s", msg, want)
	}

	// b gives its quota back: a2 fits, in a's own quota.
	finish(ctx, t, st.ns, "b1")
	a2 := waitWorkload(ctx, t, st.ns, "a2", "admitted", admitted)
	if b := a2.Status.Admission.PodSetAssignments[0].Borrowed; len(b) != 0 {
		t.Fatalf("a2 recorded borrowed %v within a's nominal quota", b)
	}

	// More than the whole cohort has never fits.
	submit(ctx, t, st.ns, "a3", "9", inQueue(a))
	want = fmt.Sprintf("couldn't assign flavors to pod set main: insufficient quota for cpu in flavor %s, 5 more needed: "+
		"ClusterQueue %s could take at most 8 even with nothing else in use, as Cohort %s's pool holds 8 in all", st.flavor, a, cohort)
	if msg := pendingWith(ctx, t, st.ns, "a3", func(m string) bool { return strings.Contains(m, "insufficient quota") }); msg != want {
		t.Fatalf("waiting message:\n got %s\nwant %s", msg, want)
	}
}

// TestCohortGrowthWakesWaitingWorkloads: waiting workloads are tried
// again as their cohort grows: when another ClusterQueue joins it and when
// a Cohort object gives it a pool.
func TestCohortGrowthWakesWaitingWorkloads(t *testing.T) {
	ctx := testContext(t)
	cohort := unique("org")
	st, cqs := newMembers(ctx, t, member{cohort: cohort, cpu: "1", waitActive: true})
	a := cqs[0]
	submit(ctx, t, st.ns, "w1", "2", inQueue(a))
	want := fmt.Sprintf("couldn't assign flavors to pod set main: insufficient quota for cpu in flavor %s, 1 more needed: "+
		"ClusterQueue %s could take at most 1 even with nothing else in use, as Cohort %s's pool holds 1 in all", st.flavor, a, cohort)
	if msg := pendingWith(ctx, t, st.ns, "w1", func(m string) bool { return strings.Contains(m, "insufficient quota") }); msg != want {
		t.Fatalf("waiting message:\n got %s\nwant %s", msg, want)
	}

	// Another queue joins the cohort, lending its 1: w1 fits.
	create(ctx, t, &v1alpha1.ClusterQueue{
		ObjectMeta: metav1.ObjectMeta{Name: unique("cq")},
		Spec: v1alpha1.ClusterQueueSpec{CohortName: cohort, ResourceGroups: []v1alpha1.ResourceGroup{{
			CoveredResources: []corev1.ResourceName{corev1.ResourceCPU},
			Flavors:          []v1alpha1.FlavorQuotas{{Name: st.flavor, Resources: []v1alpha1.ResourceQuota{limitedQuota(corev1.ResourceCPU, "1", "", "")}}},
		}}},
	})
	w1 := waitWorkload(ctx, t, st.ns, "w1", "admitted after a queue joined", admitted)
	if got := w1.Status.Admission.PodSetAssignments[0].Borrowed[corev1.ResourceCPU]; got.Cmp(resource.MustParse("1")) != 0 {
		t.Fatalf("w1 borrowed %v, want 1 cpu", w1.Status.Admission.PodSetAssignments[0].Borrowed)
	}

	// The cohort is full: w2 waits for quota to be given back.
	submit(ctx, t, st.ns, "w2", "1", inQueue(a))
	want = fmt.Sprintf("couldn't assign flavors to pod set main: insufficient quota for cpu in flavor %s, 1 more needed: "+
		"0 available with borrowing, as Cohort %[2]s's pool has 2 of its 2 in use; it fits once 1 more of Cohort %[2]s's quota is given back",
		st.flavor, cohort)
	if msg := pendingWith(ctx, t, st.ns, "w2", func(m string) bool { return strings.Contains(m, "insufficient quota") }); msg != want {
		t.Fatalf("waiting message:\n got %s\nwant %s", msg, want)
	}

	// The Cohort object adds a pool of 1: w2 fits, borrowing it.
	newCohort(ctx, t, cohort, "", st.flavor, "1")
	w2 := waitWorkload(ctx, t, st.ns, "w2", "admitted after the Cohort added a pool", admitted)
	if got := w2.Status.Admission.PodSetAssignments[0].Borrowed[corev1.ResourceCPU]; got.Cmp(resource.MustParse("1")) != 0 {
		t.Fatalf("w2 borrowed %v, want 1 cpu", w2.Status.Admission.PodSetAssignments[0].Borrowed)
	}
	waitCohort(ctx, t, cohort, "total 3", func(co *v1alpha1.Cohort) bool {
		return usageIs(co.Status.FlavorsReservation, st.flavor, corev1.ResourceCPU, "3", "0", "0")
	})
	waitClusterQueue(ctx, t, a, "borrowing 2", func(cq *v1alpha1.ClusterQueue) bool {
		return usageIs(cq.Status.FlavorsReservation, st.flavor, corev1.ResourceCPU, "3", "2", "0")
	})
}

// TestCohortUsageSurvivesRestart: a new admitter counts what the reserved
// workloads borrowed; it does not hand the same quota out twice.
func TestCohortUsageSurvivesRestart(t *testing.T) {
	ctx := testContext(t)
	cohort := unique("org")
	st, cqs := newMembers(ctx, t,
		member{cohort: cohort, cpu: "1", waitActive: true},
		member{cohort: cohort, cpu: "1", waitActive: true},
	)
	a, b := cqs[0], cqs[1]
	submit(ctx, t, st.ns, "w1", "2", inQueue(a))
	waitWorkload(ctx, t, st.ns, "w1", "admitted", admitted)

	restartAdmitter(t)
	submit(ctx, t, st.ns, "w2", "1", inQueue(b))
	want := fmt.Sprintf("couldn't assign flavors to pod set main: insufficient quota for cpu in flavor %s, 1 more needed: "+
		"0 available with borrowing, as Cohort %[2]s's pool has 2 of its 2 in use; it fits once 1 more of Cohort %[2]s's quota is given back "+
		"(others hold 1 of the queue's nominal quota, lent while it was unused)", st.flavor, cohort)
	if msg := pendingWith(ctx, t, st.ns, "w2", func(m string) bool { return strings.Contains(m, "insufficient quota") }); msg != want {
		t.Fatalf("waiting message:\n got %s\nwant %s", msg, want)
	}
	waitClusterQueue(ctx, t, b, "lending 1", func(cq *v1alpha1.ClusterQueue) bool {
		return usageIs(cq.Status.FlavorsReservation, st.flavor, corev1.ResourceCPU, "0", "0", "1")
	})
	finish(ctx, t, st.ns, "w1")
	waitWorkload(ctx, t, st.ns, "w2", "admitted once w1 finished", admitted)
}

// TestCohortHeadsOfOneCycle: heads of two ClusterQueues of one cohort that
// each fit alone but not together are tried in the same cycle (both wait
// below a loop of Cohorts until it is broken): the one that stays within
// its nominal quota goes first although the borrower queued earlier, and
// the cohort is never over-committed.
func TestCohortHeadsOfOneCycle(t *testing.T) {
	ctx := testContext(t)
	x, y := unique("loop-x"), unique("loop-y")
	newCohort(ctx, t, x, y, "", "")
	newCohort(ctx, t, y, x, "", "")
	st, cqs := newMembers(ctx, t, member{cohort: x, cpu: "1"}, member{cohort: x, cpu: "1"})
	a, b := cqs[0], cqs[1]
	submit(ctx, t, st.ns, "borrower", "2", inQueue(a))
	pendingWith(ctx, t, st.ns, "borrower", func(m string) bool { return strings.Contains(m, "form a loop") })
	submit(ctx, t, st.ns, "modest", "1", inQueue(b))
	pendingWith(ctx, t, st.ns, "modest", func(m string) bool { return strings.Contains(m, "form a loop") })

	var co v1alpha1.Cohort
	if err := s.k8s.Get(ctx, clientKey(y), &co); err != nil {
		t.Fatal(err)
	}
	before := co.DeepCopy()
	co.Spec.ParentName = ""
	if err := s.k8s.Patch(ctx, &co, client.MergeFrom(before)); err != nil {
		t.Fatalf("clear %s's parent: %v", y, err)
	}
	waitWorkload(ctx, t, st.ns, "modest", "admitted", admitted)
	waitCohort(ctx, t, x, "total 1", func(co *v1alpha1.Cohort) bool {
		return usageIs(co.Status.FlavorsReservation, st.flavor, corev1.ResourceCPU, "1", "", "")
	})
	if wl := getWorkload(ctx, t, st.ns, "borrower"); wl.Status.Admission != nil {
		t.Fatalf("both heads reserved in a cohort of 2 cpu: borrower holds %+v", wl.Status.Admission)
	}
	finish(ctx, t, st.ns, "modest")
	wl := waitWorkload(ctx, t, st.ns, "borrower", "admitted once modest finished", admitted)
	if got := wl.Status.Admission.PodSetAssignments[0].Borrowed[corev1.ResourceCPU]; got.Cmp(resource.MustParse("1")) != 0 {
		t.Fatalf("borrowed %v, want 1 cpu", wl.Status.Admission.PodSetAssignments[0].Borrowed)
	}
}

// TestLendingLimitKeepsQuota: a lender with a lendingLimit lends no more
// than it, and the rest of its quota stays its own while others borrow.
func TestLendingLimitKeepsQuota(t *testing.T) {
	ctx := testContext(t)
	cohort := unique("org")
	st, cqs := newMembers(ctx, t,
		member{cohort: cohort, cpu: "4", lending: "1", waitActive: true},
		member{cohort: cohort, cpu: "0", waitActive: true},
	)
	lender, borrower := cqs[0], cqs[1]

	submit(ctx, t, st.ns, "too-big", "2", inQueue(borrower))
	want := fmt.Sprintf("couldn't assign flavors to pod set main: insufficient quota for cpu in flavor %s, 1 more needed: "+
		"ClusterQueue %s could take at most 1 even with nothing else in use, as Cohort %s's pool holds 1 in all", st.flavor, borrower, cohort)
	if msg := pendingWith(ctx, t, st.ns, "too-big", func(m string) bool { return strings.Contains(m, "insufficient quota") }); msg != want {
		t.Fatalf("waiting message:\n got %s\nwant %s", msg, want)
	}
	submit(ctx, t, st.ns, "fits", "1", inQueue(borrower))
	waitWorkload(ctx, t, st.ns, "fits", "admitted", admitted)
	waitClusterQueue(ctx, t, lender, "lending 1", func(cq *v1alpha1.ClusterQueue) bool {
		return usageIs(cq.Status.FlavorsReservation, st.flavor, corev1.ResourceCPU, "0", "0", "1")
	})

	// The 3 it keeps are the lender's, however much is borrowed.
	submit(ctx, t, st.ns, "kept", "3", inQueue(lender))
	kept := waitWorkload(ctx, t, st.ns, "kept", "admitted", admitted)
	if b := kept.Status.Admission.PodSetAssignments[0].Borrowed; len(b) != 0 {
		t.Fatalf("the lender recorded borrowed %v within its own quota", b)
	}
	submit(ctx, t, st.ns, "lent-out", "1", inQueue(lender))
	pendingWith(ctx, t, st.ns, "lent-out", func(m string) bool {
		return strings.Contains(m, "insufficient quota") && strings.Contains(m, "lent while it was unused")
	})
}
