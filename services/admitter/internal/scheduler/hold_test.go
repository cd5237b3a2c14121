package scheduler

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

// TestFreeQuotaIsHeldForAPreemptor: a workload that preempted counts on
// the quota free now as well as its victim's. A workload behind it that
// would fit in that free quota waits, in its queue and in another queue
// of the cohort, and no one is preempted twice: once the victim stops,
// the preemptor takes its place and what it counted on.
func TestFreeQuotaIsHeldForAPreemptor(t *testing.T) {
	f := newFixture(t)
	lower := withPreemption(v1alpha1.ClusterQueuePreemption{WithinClusterQueue: v1alpha1.PreemptionLowerPriority})
	f.clusterQueue("cq", "3", lower, inCohort("co"), cpuLimits("0", ""))
	f.clusterQueue("other", "0", inCohort("co"))
	f.s.Observe(f.workload("low-1", "lq-cq", "1", 0, 0))
	f.s.Observe(f.workload("low-2", "lq-cq", "1", 1, 0))
	_, _, written := f.runCycle()
	if len(written) != 2 {
		t.Fatalf("admitted %v, want low-1 and low-2", slices.Sorted(maps.Keys(written)))
	}

	// 1 cpu is free; urgent needs 2, so it preempts one low workload.
	f.s.Observe(f.workload("urgent", "lq-cq", "2", 2, 10))
	plan := f.cycle()
	victims := drained(plan.Evictions)
	if len(victims) != 1 || len(plan.Reservations) != 0 {
		t.Fatalf("evicted %v and reserved %v, want one low workload evicted", victims, names(plan.Reservations))
	}
	var victim string
	for name := range victims {
		victim = name
	}

	// Workloads that would fit in the free cpu, behind urgent in its
	// queue and in the cohort, wait; nothing more is evicted.
	f.s.Observe(f.workload("small", "lq-cq", "1", 3, 0))
	f.s.Observe(f.workload("borrower", "lq-other", "1", 3, 0))
	for range 2 {
		plan := f.cycle()
		if len(plan.Reservations) != 0 || len(plan.Evictions) != 0 {
			t.Fatalf("while urgent waits for %s: reserved %v, evicted %v", victim, names(plan.Reservations), drained(plan.Evictions))
		}
	}

	f.s.Observe(f.released(written[victim]))
	reserved, _, _ := f.runCycle()
	if got := names(reserved); !slices.Equal(got, []string{"urgent"}) {
		t.Fatalf("once %s stopped, reserved %v, want urgent alone", victim, got)
	}
}

// TestHeldQuotaIsFreeAgainWhenThePreemptorGoes: the hold lasts while the
// preemptor waits; once it is deleted, the quota it counted on is
// anyone's.
func TestHeldQuotaIsFreeAgainWhenThePreemptorGoes(t *testing.T) {
	f := newFixture(t)
	f.clusterQueue("cq", "3", withPreemption(v1alpha1.ClusterQueuePreemption{WithinClusterQueue: v1alpha1.PreemptionLowerPriority}))
	f.s.Observe(f.workload("low-1", "lq-cq", "1", 0, 0))
	f.s.Observe(f.workload("low-2", "lq-cq", "1", 1, 0))
	f.runCycle()
	urgent := f.workload("urgent", "lq-cq", "2", 2, 10)
	f.s.Observe(urgent)
	if plan := f.cycle(); len(plan.Evictions) != 1 {
		t.Fatalf("evicted %v, want one low workload", drained(plan.Evictions))
	}
	f.s.Observe(f.workload("small", "lq-cq", "1", 3, 0))
	if plan := f.cycle(); len(plan.Reservations) != 0 {
		t.Fatalf("reserved %v while urgent waits", names(plan.Reservations))
	}

	f.s.Forget(types.NamespacedName{Namespace: urgent.Namespace, Name: urgent.Name}, urgent.UID)
	reserved, _, _ := f.runCycle()
	if got := names(reserved); !slices.Equal(got, []string{"small"}) {
		t.Fatalf("once urgent is gone, reserved %v, want small", got)
	}
}

// TestFreeQuotaIsHeldForOnePreemptor: two preemptors that count on the
// same free cpu do not hold it twice. It is held for the first in line,
// which takes it once its victim stopped, while the second still waits.
func TestFreeQuotaIsHeldForOnePreemptor(t *testing.T) {
	f := newFixture(t)
	f.clusterQueue("cq", "4", withPreemption(v1alpha1.ClusterQueuePreemption{WithinClusterQueue: v1alpha1.PreemptionLowerPriority}))
	for i, name := range []string{"low-1", "low-2", "low-3"} {
		f.s.Observe(f.workload(name, "lq-cq", "1", i, 0))
	}
	_, _, written := f.runCycle()

	// 1 cpu is free; each preemptor needs 2, so each preempts one.
	f.s.Observe(f.workload("first", "lq-cq", "2", 3, 10))
	f.s.Observe(f.workload("second", "lq-cq", "2", 4, 10))
	plan := f.cycle()
	if len(plan.Evictions) != 2 {
		t.Fatalf("evicted %v, want one victim for each preemptor", drained(plan.Evictions))
	}
	claims := messages(plan.Waiting)
	var firstVictim string
	for _, ev := range plan.Evictions {
		if strings.HasSuffix(claims["first"], "ns/"+ev.Workload.Name) {
			firstVictim = ev.Workload.Name
		}
	}
	if firstVictim == "" {
		t.Fatalf("no victim named in first's message %q", claims["first"])
	}

	f.s.Observe(f.released(written[firstVictim]))
	reserved, _, _ := f.runCycle()
	if got := names(reserved); !slices.Equal(got, []string{"first"}) {
		t.Fatalf("once %s stopped, reserved %v, want first alone", firstVictim, got)
	}
}
