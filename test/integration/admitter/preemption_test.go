package admitter

import (
	"strings"
	"testing"

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
