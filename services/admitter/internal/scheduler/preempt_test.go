package scheduler

import (
	"maps"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

func withPreemption(p v1alpha1.ClusterQueuePreemption) func(*v1alpha1.ClusterQueue) {
	return func(cq *v1alpha1.ClusterQueue) { cq.Spec.Preemption = &p }
}

// released is the version of wl once its evicted pods stopped: it holds
// no quota.
func (f *fixture) released(wl *v1alpha1.Workload) *v1alpha1.Workload {
	return f.next(wl, func(wl *v1alpha1.Workload) {
		wl.Status.Admission = nil
		meta.SetStatusCondition(&wl.Status.Conditions, metav1.Condition{Type: v1alpha1.WorkloadQuotaReserved, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonPending})
		meta.SetStatusCondition(&wl.Status.Conditions, metav1.Condition{Type: v1alpha1.WorkloadAdmitted, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonPreempted})
		finished(wl)
	})
}

// TestPreemptionWithinClusterQueue: a workload of higher priority has a
// lower-priority one of its queue evicted, waits for it to stop, and takes
// its quota then; deciding again meanwhile evicts nothing more.
func TestPreemptionWithinClusterQueue(t *testing.T) {
	f := newFixture(t)
	f.clusterQueue("cq", "2", withPreemption(v1alpha1.ClusterQueuePreemption{WithinClusterQueue: v1alpha1.PreemptionLowerPriority}))
	f.s.Observe(f.workload("low", "lq-cq", "1", 0, 0))
	group := f.workload("group", "lq-cq", "1", 1, 1)
	group.Labels = map[string]string{v1alpha1.PodGroupLabel: "group"}
	f.s.Observe(group)
	_, _, written := f.runCycle()

	f.s.Observe(f.workload("urgent", "lq-cq", "1", 2, 10))
	plan := f.cycle()
	if len(plan.Reservations) != 0 {
		t.Fatalf("reserved %v with the queue full", names(plan.Reservations))
	}
	if got := drained(plan.Evictions); !maps.Equal(got, map[string]string{"low": v1alpha1.ReasonPreempted}) {
		t.Fatalf("evicted %v, want the lowest priority, low", got)
	}
	msg := plan.Evictions[0].Message
	for _, want := range []string{
		"preempted by ns/urgent (priority 10) of ClusterQueue cq: it has a lower priority in the same ClusterQueue (withinClusterQueue LowerPriority)",
		"the pod is deleted and does not run again",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("victim's message %q lacks %q", msg, want)
		}
	}
	if got := messages(plan.Waiting)["urgent"]; got != "waiting for 1 preempted workload(s) to stop, which frees its quota: ns/low" {
		t.Errorf("preemptor's message %q", got)
	}

	// Decided again before the victim stops: nothing more is evicted for
	// urgent. A second urgent workload cannot count on urgent's victim:
	// it has the next one evicted.
	if plan := f.cycle(); len(plan.Evictions) != 0 {
		t.Fatalf("deciding again evicted %v", drained(plan.Evictions))
	}
	f.s.Observe(f.workload("urgent-too", "lq-cq", "1", 3, 10))
	if plan := f.cycle(); !maps.Equal(drained(plan.Evictions), map[string]string{"group": v1alpha1.ReasonPreempted}) || len(plan.Reservations) != 0 {
		t.Fatalf("for a second urgent workload: evicted %v, reserved %v; want group evicted", drained(plan.Evictions), names(plan.Reservations))
	}
	// A failed eviction is handed out again by its preemptor.
	f.s.RetryEviction(written["low"])
	if plan := f.cycle(); !maps.Equal(drained(plan.Evictions), map[string]string{"low": v1alpha1.ReasonPreempted}) {
		t.Fatalf("after a failed eviction: evicted %v, want low again", drained(plan.Evictions))
	}
	// The victim changed before its eviction was written (the write found
	// a newer version): the newer version is handed out.
	changed := f.next(written["low"], func(wl *v1alpha1.Workload) { wl.Annotations = map[string]string{"note": "changed"} })
	f.s.Observe(changed)
	f.s.RetryEviction(written["low"])
	if plan := f.cycle(); len(plan.Evictions) != 1 || plan.Evictions[0].Workload.ResourceVersion != changed.ResourceVersion {
		t.Fatalf("after the victim changed: evictions %+v, want its newer version", plan.Evictions)
	}
	written["low"] = changed
	evicting := f.next(written["low"], func(wl *v1alpha1.Workload) {
		meta.SetStatusCondition(&wl.Status.Conditions, metav1.Condition{Type: v1alpha1.WorkloadEvicted, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonPreempted})
	})
	f.s.Observe(evicting)
	if plan := f.cycle(); len(plan.Evictions) != 0 {
		t.Fatalf("once the victim is being evicted: evicted %v", drained(plan.Evictions))
	}

	f.s.Observe(f.released(evicting))
	reserved, _, _ := f.runCycle()
	if got := names(reserved); len(got) != 1 || got[0] != "urgent" {
		t.Fatalf("once the victim stopped, reserved %v, want urgent alone", got)
	}
}

// TestPreemptionOfAGroupSaysItWaitsForItsPods: a preempted group is told
// that its pods are deleted and that it queues again once they are back.
func TestPreemptionOfAGroupSaysItWaitsForItsPods(t *testing.T) {
	f := newFixture(t)
	f.clusterQueue("cq", "1", withPreemption(v1alpha1.ClusterQueuePreemption{WithinClusterQueue: v1alpha1.PreemptionLowerPriority}))
	group := f.workload("group", "lq-cq", "1", 0, 0)
	group.Labels = map[string]string{v1alpha1.PodGroupLabel: "group"}
	f.s.Observe(group)
	f.runCycle()
	f.s.Observe(f.workload("urgent", "lq-cq", "1", 1, 10))
	plan := f.cycle()
	if len(plan.Evictions) != 1 || !strings.HasSuffix(plan.Evictions[0].Message, "the group's pods are deleted; it queues again once they are all created again") {
		t.Fatalf("evictions %+v, want the group with what becomes of its pods", plan.Evictions)
	}
}

// TestNoPreemptionWithoutAPolicy: a queue without a preemption policy, or
// with one that spares equal priorities, evicts nothing; where a policy is
// what spares the workload in the way, the waiting message says so.
func TestNoPreemptionWithoutAPolicy(t *testing.T) {
	for name, tc := range map[string]struct {
		mutate func(*v1alpha1.ClusterQueue)
		// because is what the message says after the shortfall, if anything.
		because string
	}{
		"no policy": {mutate: func(*v1alpha1.ClusterQueue) {}},
		"all Never": {mutate: withPreemption(v1alpha1.ClusterQueuePreemption{})},
		"lower only": {
			mutate:  withPreemption(v1alpha1.ClusterQueuePreemption{WithinClusterQueue: v1alpha1.PreemptionLowerPriority}),
			because: "; preemption cannot help: 1 workload(s) of the same ClusterQueue hold the quota but have equal or higher priority (withinClusterQueue LowerPriority)",
		},
		"reclaim Any": {
			mutate:  withPreemption(v1alpha1.ClusterQueuePreemption{ReclaimWithinCohort: v1alpha1.PreemptionAny}),
			because: "; preemption cannot help: 1 workload(s) of the same ClusterQueue hold the quota, and withinClusterQueue is Never",
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			f.clusterQueue("cq", "1", tc.mutate)
			f.s.Observe(f.workload("running", "lq-cq", "1", 0, 5))
			f.runCycle()
			f.s.Observe(f.workload("same", "lq-cq", "1", 1, 5))
			plan := f.cycle()
			if len(plan.Evictions) != 0 {
				t.Fatalf("evicted %v", drained(plan.Evictions))
			}
			got := messages(plan.Waiting)["same"]
			if !strings.Contains(got, "insufficient quota") {
				t.Fatalf("waiting message %q, want the shortfall", got)
			}
			if tc.because == "" && strings.Contains(got, "preemption") || !strings.HasSuffix(got, tc.because) {
				t.Errorf("waiting message %q, want it to end with %q", got, tc.because)
			}
		})
	}
}

// TestPreemptionBlockedByThreshold: the only workload whose quota a
// borrowing workload could take is above borrowWithinCohort's threshold;
// nothing is evicted and the waiting message names the threshold.
func TestPreemptionBlockedByThreshold(t *testing.T) {
	f := newFixture(t)
	threshold := int32(10)
	f.clusterQueue("a", "1", inCohort("org"), withPreemption(v1alpha1.ClusterQueuePreemption{
		ReclaimWithinCohort: v1alpha1.PreemptionLowerPriority,
		BorrowWithinCohort:  &v1alpha1.BorrowWithinCohort{Policy: v1alpha1.PreemptionLowerPriority, MaxPriorityThreshold: &threshold},
	}))
	f.clusterQueue("b", "1", inCohort("org"))
	f.s.Observe(f.workload("b-borrowing", "lq-b", "2", 0, 50))
	f.runCycle()
	f.s.Observe(f.workload("a-big", "lq-a", "2", 1, 100))
	plan := f.cycle()
	if len(plan.Evictions) != 0 {
		t.Fatalf("evicted %v above the threshold", drained(plan.Evictions))
	}
	want := "; preemption cannot help: 1 workload(s) of ClusterQueue b hold the quota but have priority above borrowWithinCohort's maxPriorityThreshold 10"
	if got := messages(plan.Waiting)["a-big"]; !strings.Contains(got, "insufficient quota") || !strings.HasSuffix(got, want) {
		t.Errorf("waiting message %q, want the shortfall ending with %q", got, want)
	}
}

// TestReclaimWithinCohort: a queue takes back the quota it lent from the
// queue that borrowed it; a workload of the borrower within its own
// nominal quota is left alone.
func TestReclaimWithinCohort(t *testing.T) {
	f := newFixture(t)
	f.clusterQueue("a", "2", inCohort("org"), withPreemption(v1alpha1.ClusterQueuePreemption{ReclaimWithinCohort: v1alpha1.PreemptionAny}))
	f.clusterQueue("b", "2", inCohort("org"))
	f.s.Observe(f.workload("b-own", "lq-b", "2", 0, 0))
	f.runCycle()
	f.s.Observe(f.workload("b-borrowed", "lq-b", "2", 1, 0))
	f.runCycle()
	f.s.Observe(f.workload("a", "lq-a", "2", 2, 0))
	plan := f.cycle()
	if got := drained(plan.Evictions); !maps.Equal(got, map[string]string{"b-borrowed": v1alpha1.ReasonPreempted}) {
		t.Fatalf("evicted %v, want b-borrowed", got)
	}
	if msg := plan.Evictions[0].Message; !strings.Contains(msg, "its ClusterQueue borrowed quota of the cohort, which a reclaims (reclaimWithinCohort Any)") {
		t.Errorf("message %q does not say a reclaims what it lent", msg)
	}
}

// TestPreemptorsDoNotShareVictims: two workloads that could each use the
// same victim's quota: the first claims it, the second may not count on
// it and waits for quota; once the victim stopped, both fit.
func TestPreemptorsDoNotShareVictims(t *testing.T) {
	f := newFixture(t)
	f.clusterQueue("cq", "2", withPreemption(v1alpha1.ClusterQueuePreemption{WithinClusterQueue: v1alpha1.PreemptionLowerPriority}))
	f.s.Observe(f.workload("low", "lq-cq", "2", 0, 0))
	_, _, written := f.runCycle()
	f.s.Observe(f.workload("first", "lq-cq", "1", 1, 10))
	f.s.Observe(f.workload("second", "lq-cq", "1", 2, 10))
	plan := f.cycle()
	if got := drained(plan.Evictions); !maps.Equal(got, map[string]string{"low": v1alpha1.ReasonPreempted}) {
		t.Fatalf("evicted %v, want low once", got)
	}
	waiting := messages(plan.Waiting)
	if !strings.HasPrefix(waiting["first"], "waiting for 1 preempted workload(s) to stop") ||
		!strings.Contains(waiting["second"], "insufficient quota") {
		t.Fatalf("waiting messages %v", waiting)
	}
	// A third, asking later, does not count on the claimed victim either.
	f.s.Observe(f.workload("third", "lq-cq", "1", 3, 10))
	if plan := f.cycle(); len(plan.Evictions) != 0 {
		t.Fatalf("a later preemptor evicted %v", drained(plan.Evictions))
	}
	f.s.Observe(f.released(written["low"]))
	reserved, _, _ := f.runCycle()
	if got := names(reserved); len(got) != 2 || got[0] != "first" || got[1] != "second" {
		t.Fatalf("once the victim stopped, reserved %v, want first and second", got)
	}
}
