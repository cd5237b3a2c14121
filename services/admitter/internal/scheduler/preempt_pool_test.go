package scheduler

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

// TestClaimLapsesWithinACycle: the candidate victims of a tree are
// gathered once a cycle; a preemptor admitted later in that cycle lets go
// of its victim, which a preemptor tried after it may then count on.
//
// In cohort org, a (2 cpu, withinClusterQueue LowerPriority) holds low-1
// and low-2; urgent-1 claimed low-1, which is being evicted. Then low-2
// finishes, and urgent-2 arrives in a, and big in b (no quota of its own,
// reclaimWithinCohort Any). In the next cycle's first round urgent-1 fits
// in low-2's place, and big, which fits nowhere, gathers the victims of
// org while urgent-1 still claims low-1. urgent-1 is admitted at the end
// of the round; in the second, urgent-2 needs a victim: low-1, on its way
// out already.
func TestClaimLapsesWithinACycle(t *testing.T) {
	f := newFixture(t)
	f.clusterQueue("a", "2", inCohort("org"), withPreemption(v1alpha1.ClusterQueuePreemption{WithinClusterQueue: v1alpha1.PreemptionLowerPriority}))
	f.clusterQueue("b", "0", inCohort("org"), withPreemption(v1alpha1.ClusterQueuePreemption{ReclaimWithinCohort: v1alpha1.PreemptionAny}))
	f.s.Observe(f.workload("low-1", "lq-a", "1", 0, 0))
	f.s.Observe(f.workload("low-2", "lq-a", "1", 1, 0))
	_, _, written := f.runCycle()

	f.s.Observe(f.workload("urgent-1", "lq-a", "1", 2, 10))
	if got := drained(f.cycle().Evictions); !maps.Equal(got, map[string]string{"low-1": v1alpha1.ReasonPreempted}) {
		t.Fatalf("for urgent-1: evicted %v, want low-1", got)
	}
	f.s.Observe(f.next(written["low-1"], func(wl *v1alpha1.Workload) {
		meta.SetStatusCondition(&wl.Status.Conditions, metav1.Condition{Type: v1alpha1.WorkloadEvicted, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonPreempted})
	}))

	f.s.Observe(f.next(written["low-2"], finished))
	f.s.Observe(f.workload("urgent-2", "lq-a", "1", 3, 10))
	f.s.Observe(f.workload("big", "lq-b", "2", 4, 0))
	plan := f.cycle()
	if got := names(plan.Reservations); !slices.Equal(got, []string{"urgent-1"}) {
		t.Fatalf("reserved %v, want urgent-1", got)
	}
	if len(plan.Evictions) != 0 {
		t.Fatalf("evicted %v, want nothing more: low-1 goes already", drained(plan.Evictions))
	}
	waiting := messages(plan.Waiting)
	if got := waiting["urgent-2"]; got != "waiting for 1 preempted workload(s) to stop, which frees its quota: ns/low-1" {
		t.Errorf("urgent-2 waits: %q, want it to wait for low-1", got)
	}
	if got := waiting["big"]; !strings.Contains(got, "insufficient quota") {
		t.Errorf("big waits: %q, want for quota", got)
	}
}
