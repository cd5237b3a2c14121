package scheduler

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// TestMixedSizesDrain drives one queue of 20 cpu in a cohort of its own,
// preempting by priority within it and reclaiming in the cohort, with
// workloads in the sizes and priorities of the scale shapes' classes (1,
// 5 and 20 cpu at priorities 50, 100 and 200), evictions that take a
// while and finishes; then lets every admitted workload finish, round
// after round, and checks that every workload is admitted in the end:
// no hold or set-aside group keeps one waiting while the queue empties.
func TestMixedSizesDrain(t *testing.T) {
	seeds := []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, uint64(time.Now().UnixNano())}
	for _, seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runMixedSizes(t, seed) })
	}
}

func runMixedSizes(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, seed))
	f := newFixture(t)
	f.clusterQueue("cq", "20", inCohort("co"), cpuLimits("100", ""), withPreemption(v1alpha1.ClusterQueuePreemption{
		WithinClusterQueue: v1alpha1.PreemptionLowerPriority, ReclaimWithinCohort: v1alpha1.PreemptionAny,
	}))
	classes := []struct {
		cpu      string
		priority int32
	}{{"1", 50}, {"5", 100}, {"20", 200}}
	all := map[string]*v1alpha1.Workload{}
	evicting := map[string]bool{}
	isFinished := func(wl *v1alpha1.Workload) bool {
		return meta.IsStatusConditionTrue(wl.Status.Conditions, v1alpha1.WorkloadFinished)
	}
	// A victim's quota is released once its pods stopped; a plain pod
	// preempted after it started is gone for good, and its workload
	// finishes when that is reported, a moment later.
	stopped := map[string]bool{}
	release := func(name string) {
		if !evicting[name] {
			all[name] = f.released(all[name])
			f.s.Observe(all[name])
			return
		}
		delete(evicting, name)
		if rng.IntN(2) == 0 {
			// Its pod is deleted, and its Workload with it.
			gone := f.next(all[name], finished)
			all[name] = gone
			f.s.Forget(types.NamespacedName{Namespace: gone.Namespace, Name: gone.Name}, gone.UID)
			return
		}
		stopped[name] = true
		all[name] = f.next(all[name], func(wl *v1alpha1.Workload) {
			wl.Status.Admission = nil
			meta.SetStatusCondition(&wl.Status.Conditions, metav1.Condition{Type: v1alpha1.WorkloadQuotaReserved, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonPending})
			meta.SetStatusCondition(&wl.Status.Conditions, metav1.Condition{Type: v1alpha1.WorkloadAdmitted, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonPreempted})
		})
		f.s.Observe(all[name])
	}
	finishStopped := func() {
		for name := range stopped {
			delete(stopped, name)
			all[name] = f.next(all[name], finished)
			f.s.Observe(all[name])
		}
	}
	var late []string
	cycle := func() {
		for _, name := range late {
			f.s.Observe(all[name])
		}
		late = nil
		plan := f.cycle()
		// Between cycles the quota tree counts the reservations alone.
		var held int64
		for _, wl := range all {
			if wl.Status.Admission != nil && !isFinished(wl) {
				held += wl.Spec.PodSets[0].Template.Requests.Cpu().MilliValue()
			}
		}
		for _, r := range plan.Reservations {
			held += r.Workload.Spec.PodSets[0].Template.Requests.Cpu().MilliValue()
		}
		if got := f.s.tree.Usage("cq", cpuFR); got != held {
			t.Fatalf("seed %d: the quota tree counts %dm of cpu in use after a cycle, the reservations %dm", seed, got, held)
		}
		for _, r := range plan.Reservations {
			all[r.Workload.Name] = f.written(r, true)
			if rng.IntN(3) == 0 {
				late = append(late, r.Workload.Name) // its write is seen later
				continue
			}
			f.s.Observe(all[r.Workload.Name])
		}
		for _, ev := range plan.Evictions {
			evicting[ev.Workload.Name] = true
			all[ev.Workload.Name] = f.next(all[ev.Workload.Name], func(wl *v1alpha1.Workload) {
				meta.SetStatusCondition(&wl.Status.Conditions, metav1.Condition{Type: v1alpha1.WorkloadEvicted, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonPreempted})
			})
			f.s.Observe(all[ev.Workload.Name])
		}
	}

	for step := range 300 {
		switch op := rng.IntN(10); {
		case op < 4:
			c := classes[rng.IntN(len(classes))]
			name := fmt.Sprintf("w%d", step)
			all[name] = f.workload(name, "lq-cq", c.cpu, step, c.priority)
			f.s.Observe(all[name])
		case op < 7:
			cycle()
		case op < 8:
			for name := range evicting {
				if rng.IntN(2) == 0 {
					release(name)
				}
			}
		case op < 9:
			finishStopped()
		default:
			for name, wl := range all {
				if wl.Status.Admission != nil && !evicting[name] && !isFinished(wl) && rng.IntN(3) == 0 {
					release(name)
				}
			}
		}
	}
	for range 4 * len(all) {
		finishStopped()
		done := true
		for name, wl := range all {
			if !isFinished(wl) && (evicting[name] || wl.Status.Admission != nil) {
				release(name)
			}
			done = done && (isFinished(all[name]) || stopped[name])
		}
		if done {
			return
		}
		cycle()
	}
	for name, wl := range all {
		if !isFinished(wl) && !stopped[name] {
			t.Errorf("seed %d: %s (%s cpu, priority %d) never admitted while the queue drained", seed, name,
				wl.Spec.PodSets[0].Template.Requests.Cpu(), *wl.Spec.Priority)
		}
	}
}

// TestHoldsLeaveNoQuotaBehind: a workload ahead of a waiting preemptor is
// tried with the preemptor's hold lifted, and its own search for victims
// lifts every hold; the quota tree never counts a hold twice, nor keeps
// one once the cycle is over.
func TestHoldsLeaveNoQuotaBehind(t *testing.T) {
	f := newFixture(t)
	f.clusterQueue("cq", "20", withPreemption(v1alpha1.ClusterQueuePreemption{WithinClusterQueue: v1alpha1.PreemptionLowerPriority}))
	f.s.Observe(f.workload("low", "lq-cq", "5", 0, 0))
	f.runCycle()
	f.s.Observe(f.workload("waiting", "lq-cq", "20", 1, 10))
	if plan := f.cycle(); !maps.Equal(drained(plan.Evictions), map[string]string{"low": v1alpha1.ReasonPreempted}) {
		t.Fatalf("evicted %v, want low", drained(plan.Evictions))
	}
	// Ahead of the preemptor, and nothing left it may preempt.
	f.s.Observe(f.workload("urgent", "lq-cq", "20", 2, 20))
	for range 3 {
		f.cycle()
		if got := f.s.tree.Usage("cq", cpuFR); got != 5000 {
			t.Fatalf("after a cycle the quota tree counts %dm of cpu in use; low alone holds 5000m", got)
		}
	}
}
