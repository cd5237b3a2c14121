package admitter

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

// TestPreemptionWithinTheQueue: a workload of higher priority has the
// admitted one of lower priority evicted (reason Preempted, naming it and
// the policy); the victim keeps its quota until its pods stop, and the
// preemptor, told what it waits for, is admitted then.
func TestPreemptionWithinTheQueue(t *testing.T) {
	ctx := testContext(t)
	st := newSetup(ctx, t, queueOptions{cpu: "1", preemption: &v1alpha1.ClusterQueuePreemption{WithinClusterQueue: v1alpha1.PreemptionLowerPriority}})
	w := watchDecisions(t, "")
	submit(ctx, t, st.ns, "low", "1")
	low := waitWorkload(ctx, t, st.ns, "low", "admitted", func(wl *v1alpha1.Workload) bool { return isTrue(wl, v1alpha1.WorkloadAdmitted) })
	reservation := low.Status.Admission.ReservationID

	submit(ctx, t, st.ns, "urgent", "1", withPriority(10))
	evicting := waitWorkload(ctx, t, st.ns, "low", "preempted", func(wl *v1alpha1.Workload) bool { return isTrue(wl, v1alpha1.WorkloadEvicted) })
	c := condition(evicting, v1alpha1.WorkloadEvicted)
	if c.Reason != v1alpha1.ReasonPreempted ||
		!strings.Contains(c.Message, "preempted by "+st.ns+"/urgent (priority 10) of ClusterQueue "+st.cq+": it has a lower priority in the same ClusterQueue (withinClusterQueue LowerPriority)") {
		t.Fatalf("Evicted = %+v, want reason Preempted naming the preemptor and the policy", c)
	}
	if evicting.Status.Admission == nil || !isTrue(evicting, v1alpha1.WorkloadQuotaReserved) {
		t.Fatal("the victim gave its quota back before its pods stopped")
	}
	if d := w.wait(ctx, t, st.ns, "low", admitterv1.Decision_ACTION_EVICT); d.GetReservationId() != reservation {
		t.Fatalf("EVICT decision for reservation %q, want %q", d.GetReservationId(), reservation)
	}
	waitWorkload(ctx, t, st.ns, "urgent", "waiting for its victim", func(wl *v1alpha1.Workload) bool {
		c := condition(wl, v1alpha1.WorkloadQuotaReserved)
		return c != nil && c.Reason == v1alpha1.ReasonPending &&
			c.Message == "waiting for 1 preempted workload(s) to stop, which frees its quota: "+st.ns+"/low"
	})

	reportStopped(ctx, t, st.ns, "low", reservation)
	waitWorkload(ctx, t, st.ns, "urgent", "admitted", func(wl *v1alpha1.Workload) bool { return isTrue(wl, v1alpha1.WorkloadAdmitted) })
	if n := w.count(st.ns, "low", admitterv1.Decision_ACTION_EVICT); n < 1 {
		t.Fatalf("%d EVICT decisions for the victim", n)
	}
}

// newPreemptingMember adds to st a ClusterQueue of cohort with cpu in
// st's flavor and preemption policy p, and a LocalQueue of the same name;
// it returns the name once the admitter reports the queue Active.
func newPreemptingMember(ctx context.Context, t *testing.T, st cohortSetup, cohort, cpu string, p *v1alpha1.ClusterQueuePreemption) string {
	t.Helper()
	name := unique("cq")
	create(ctx, t, &v1alpha1.ClusterQueue{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.ClusterQueueSpec{
			CohortName: cohort,
			Preemption: p,
			ResourceGroups: []v1alpha1.ResourceGroup{{
				CoveredResources: []corev1.ResourceName{corev1.ResourceCPU},
				Flavors: []v1alpha1.FlavorQuotas{{Name: st.flavor, Resources: []v1alpha1.ResourceQuota{
					{Name: corev1.ResourceCPU, NominalQuota: resource.MustParse(cpu)},
				}}},
			}},
		},
	})
	create(ctx, t, &v1alpha1.LocalQueue{
		ObjectMeta: metav1.ObjectMeta{Namespace: st.ns, Name: name},
		Spec:       v1alpha1.LocalQueueSpec{ClusterQueue: name},
	})
	waitClusterQueue(ctx, t, name, "Active", func(cq *v1alpha1.ClusterQueue) bool {
		return meta.IsStatusConditionTrue(cq.Status.Conditions, v1alpha1.ClusterQueueActive)
	})
	return name
}

// TestPreemptionInNestedCohorts: root Cohort R has the sub-cohorts P, Q
// and S, each of 2 cpu. S's queue sa takes 1 cpu beyond S's quota, what
// P's queue lender lent; Q's queue qa borrows qb's idle cpu within Q. When
// lender wants its quota back it reclaims from S: qa is beyond its nominal
// quota too, and its workload has the lower priority, but Q holds no more
// than its own quota, so that workload runs on. The victim is evicted with
// reason Preempted, naming the policy, and lender's workload (of the
// highest priority, so that the victim, queued again, does not take its
// quota back first) is admitted once the victim's pods stop.
func TestPreemptionInNestedCohorts(t *testing.T) {
	ctx := testContext(t)
	root, p, q, sub := unique("org"), unique("p"), unique("q"), unique("s")
	st, cqs := newMembers(ctx, t,
		member{cohort: q, cpu: "1"}, member{cohort: q, cpu: "1"},
		member{cohort: sub, cpu: "1"}, member{cohort: sub, cpu: "1"},
	)
	qa, sa := cqs[0], cqs[2]
	newCohort(ctx, t, root, "", "", "")
	for _, c := range []string{p, q, sub} {
		newCohort(ctx, t, c, root, "", "")
	}
	lender := newPreemptingMember(ctx, t, st, p, "2", &v1alpha1.ClusterQueuePreemption{ReclaimWithinCohort: v1alpha1.PreemptionAny})
	for _, name := range []string{root, p, q, sub} {
		waitCohort(ctx, t, name, "Active", func(co *v1alpha1.Cohort) bool {
			return meta.IsStatusConditionTrue(co.Status.Conditions, v1alpha1.ClusterQueueActive)
		})
	}
	for _, name := range cqs {
		waitClusterQueue(ctx, t, name, "Active", func(cq *v1alpha1.ClusterQueue) bool {
			return meta.IsStatusConditionTrue(cq.Status.Conditions, v1alpha1.ClusterQueueActive)
		})
	}
	w := watchDecisions(t, "")
	submit(ctx, t, st.ns, "s-big", "3", inQueue(sa), withPriority(5))
	sBig := waitWorkload(ctx, t, st.ns, "s-big", "admitted", admitted)
	// S holds 1 beyond its 2; Q, once qa borrowed qb's 1, none.
	waitCohort(ctx, t, sub, "borrowing 1", func(co *v1alpha1.Cohort) bool {
		return usageIs(co.Status.FlavorsReservation, st.flavor, corev1.ResourceCPU, "3", "1", "0")
	})
	submit(ctx, t, st.ns, "q-big", "2", inQueue(qa))
	waitWorkload(ctx, t, st.ns, "q-big", "admitted", admitted)
	waitCohort(ctx, t, q, "within its quota", func(co *v1alpha1.Cohort) bool {
		return usageIs(co.Status.FlavorsReservation, st.flavor, corev1.ResourceCPU, "2", "0", "0")
	})

	// R's 6 hold 5: lender has 1 of its 2 left.
	submit(ctx, t, st.ns, "own", "2", inQueue(lender), withPriority(10))
	evicting := waitWorkload(ctx, t, st.ns, "s-big", "preempted", func(wl *v1alpha1.Workload) bool { return isTrue(wl, v1alpha1.WorkloadEvicted) })
	c := condition(evicting, v1alpha1.WorkloadEvicted)
	if c.Reason != v1alpha1.ReasonPreempted ||
		!strings.Contains(c.Message, "preempted by "+st.ns+"/own (priority 10) of ClusterQueue "+lender+": its ClusterQueue borrowed quota of the cohort, which "+lender+" reclaims (reclaimWithinCohort Any)") {
		t.Fatalf("Evicted = %+v, want reason Preempted naming the preemptor and the policy", c)
	}
	waitWorkload(ctx, t, st.ns, "own", "waiting for its victim", func(wl *v1alpha1.Workload) bool {
		c := condition(wl, v1alpha1.WorkloadQuotaReserved)
		return c != nil && c.Reason == v1alpha1.ReasonPending &&
			c.Message == "waiting for 1 preempted workload(s) to stop, which frees its quota: "+st.ns+"/s-big"
	})

	reportStopped(ctx, t, st.ns, "s-big", sBig.Status.Admission.ReservationID)
	waitWorkload(ctx, t, st.ns, "own", "admitted", admitted)
	if wl := getWorkload(ctx, t, st.ns, "q-big"); !admitted(wl) || isTrue(wl, v1alpha1.WorkloadEvicted) {
		t.Fatalf("q-big: conditions %+v, want it admitted and not evicted", wl.Status.Conditions)
	}
	if n := w.count(st.ns, "q-big", admitterv1.Decision_ACTION_EVICT); n != 0 {
		t.Fatalf("%d EVICT decisions for q-big", n)
	}
}
