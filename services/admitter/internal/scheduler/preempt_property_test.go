package scheduler

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/services/admitter/internal/quota"
)

var cpuFR = quota.FR{Flavor: "f", Resource: corev1.ResourceCPU}

// TestPreemptionRandomOperations drives a Scheduler whose queues preempt
// (within the queue by lower priority, and reclaiming lent quota in their
// cohort) with random workloads, cycles, evictions that take a while to
// complete, and finishes, and checks that:
//
//   - a workload handed out to be evicted is not handed out again while
//     that eviction is in flight;
//   - a victim of a queue's own preemption has a lower priority than some
//     workload waiting in that queue, and a victim elsewhere belongs to a
//     queue that holds more than its nominal quota;
//   - a queue outside a cohort never holds more than its nominal quota,
//     victims included (they keep their quota until they stop);
//   - once every eviction completed and cycles settled, no waiting
//     workload of a queue outside a cohort has a lower-priority workload
//     admitted in its queue that it could replace: no preemption was
//     missed.
func TestPreemptionRandomOperations(t *testing.T) {
	seeds := []uint64{1, 2, 3, 4, 5, 6, 7, 8}
	seeds = append(seeds, uint64(time.Now().UnixNano()))
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { runPreemptions(t, seed, 400) })
		// Under fair sharing the victims elsewhere are chosen by share,
		// and the same rules hold.
		t.Run(fmt.Sprintf("fairSharing/seed=%d", seed), func(t *testing.T) { runPreemptions(t, seed, 400, fairSharingOn) })
	}
}

func runPreemptions(t *testing.T, seed uint64, steps int, opts ...Option) {
	rng := rand.New(rand.NewPCG(seed, seed))
	f := newFairFixture(t, opts...)
	lower := withPreemption(v1alpha1.ClusterQueuePreemption{
		WithinClusterQueue: v1alpha1.PreemptionLowerPriority, ReclaimWithinCohort: v1alpha1.PreemptionAny,
	})
	// solo stands alone; a and b share cohort org.
	f.clusterQueue("solo", "4", lower)
	f.clusterQueue("a", "2", inCohort("org"), lower)
	f.clusterQueue("b", "2", inCohort("org"), lower)
	nominal := map[string]int64{"solo": 4000}

	type state struct {
		wl       *v1alpha1.Workload
		cq       string
		evicting bool // handed out to be evicted, not released yet
	}
	all := map[string]*state{}
	n, preempted := 0, 0
	release := func(st *state) {
		released := f.released(st.wl)
		st.wl, st.evicting = released, false
		f.s.Observe(released)
	}
	for step := 0; step < steps; step++ {
		switch op := rng.IntN(10); {
		case op < 4:
			n++
			queue := []string{"solo", "a", "b"}[rng.IntN(3)]
			name := fmt.Sprintf("w%d", n)
			wl := f.workload(name, "lq-"+queue, fmt.Sprint(1+rng.IntN(2)), n, int32(rng.IntN(4)))
			all[name] = &state{wl: wl, cq: queue}
			f.s.Observe(wl)
		case op < 7:
			plan := f.cycle()
			for _, ev := range plan.Evictions {
				st := all[ev.Workload.Name]
				if st.evicting {
					t.Fatalf("seed %d step %d: %s handed out again while its eviction is in flight", seed, step, ev.Workload.Name)
				}
				if ev.Reason != v1alpha1.ReasonPreempted {
					t.Fatalf("seed %d step %d: eviction of %s for %s", seed, step, ev.Workload.Name, ev.Reason)
				}
				var by, byCQ string
				var byPriority int32
				if _, err := fmt.Sscanf(ev.Message, "preempted by ns/%s (priority %d) of ClusterQueue %s", &by, &byPriority, &byCQ); err != nil {
					t.Fatalf("seed %d step %d: message %q does not name the preemptor: %v", seed, step, ev.Message, err)
				}
				byCQ = strings.TrimSuffix(byCQ, ":")
				switch {
				case st.cq == byCQ && *st.wl.Spec.Priority >= byPriority:
					t.Fatalf("seed %d step %d: %s (priority %d) preempted for %s of priority %d", seed, step, st.wl.Name, *st.wl.Spec.Priority, by, byPriority)
				case st.cq != byCQ && f.s.tree.Borrowed(st.cq, cpuFR) == 0:
					t.Fatalf("seed %d step %d: %s of %s preempted for %s of %s, although %s borrows nothing", seed, step, st.wl.Name, st.cq, by, byCQ, st.cq)
				}
				st.evicting = true
				preempted++
				st.wl = f.next(st.wl, func(wl *v1alpha1.Workload) {
					meta.SetStatusCondition(&wl.Status.Conditions, metav1.Condition{Type: v1alpha1.WorkloadEvicted, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonPreempted})
				})
				f.s.Observe(st.wl)
			}
			for _, r := range plan.Reservations {
				st := all[r.Workload.Name]
				st.wl = f.written(r, true)
				f.s.Observe(st.wl)
			}
		case op < 9:
			// An evicted workload's pods stop.
			for _, st := range all {
				if st.evicting && rng.IntN(2) == 0 {
					release(st)
				}
			}
		default:
			// An admitted workload finishes.
			for _, st := range all {
				if st.wl.Status.Admission != nil && !st.evicting && rng.IntN(4) == 0 {
					release(st)
					break
				}
			}
		}
		for cq, limit := range nominal {
			if got := f.s.tree.Usage(cq, cpuFR); got > limit {
				t.Fatalf("seed %d step %d: ClusterQueue %s holds %dm of cpu, its quota is %dm", seed, step, cq, got, limit)
			}
		}
	}

	if preempted == 0 {
		t.Fatalf("seed %d: nothing was preempted in %d steps", seed, steps)
	}

	// settleCycle runs a cycle, writes its reservations back and marks
	// its victims evicting.
	settleCycle := func() Plan {
		plan := f.cycle()
		for _, r := range plan.Reservations {
			st := all[r.Workload.Name]
			st.wl = f.written(r, true)
			f.s.Observe(st.wl)
		}
		for _, ev := range plan.Evictions {
			all[ev.Workload.Name].evicting = true
		}
		return plan
	}
	// Settle: every eviction completes; cycles run until nothing changes.
	for range 50 {
		for _, st := range all {
			if st.evicting {
				release(st)
			}
		}
		plan := settleCycle()
		if len(plan.Reservations) == 0 && len(plan.Evictions) == 0 && !plan.More {
			break
		}
	}
	for _, p := range all {
		if p.cq != "solo" || p.wl.Status.Admission != nil || p.evicting || meta.IsStatusConditionTrue(p.wl.Status.Conditions, v1alpha1.WorkloadFinished) {
			continue
		}
		pPrio := *p.wl.Spec.Priority
		pCPU := p.wl.Spec.PodSets[0].Template.Requests.Cpu().MilliValue()
		var replaceable int64
		for _, v := range all {
			if v.cq == "solo" && v.wl.Status.Admission != nil && *v.wl.Spec.Priority < pPrio {
				replaceable += v.wl.Spec.PodSets[0].Template.Requests.Cpu().MilliValue()
			}
		}
		free := nominal["solo"] - f.s.tree.Usage("solo", cpuFR)
		if free+replaceable >= pCPU {
			t.Fatalf("seed %d: %s (priority %d, %dm) waits in solo although %dm is free and %dm is held by lower priorities",
				seed, p.wl.Name, pPrio, pCPU, free, replaceable)
		}
	}

	// Drain: every admitted workload finishes, round after round; every
	// waiting one fits an empty queue, so each is admitted in the end.
	finished := func(st *state) bool {
		return meta.IsStatusConditionTrue(st.wl.Status.Conditions, v1alpha1.WorkloadFinished)
	}
	for range 4 * len(all) {
		done := true
		for _, st := range all {
			if !finished(st) && (st.evicting || st.wl.Status.Admission != nil) {
				release(st)
			}
			done = done && finished(st)
		}
		if done {
			return
		}
		settleCycle()
	}
	for name, st := range all {
		if !finished(st) {
			t.Fatalf("seed %d: %s of %s never admitted while the queues drained", seed, name, st.cq)
		}
	}
}
