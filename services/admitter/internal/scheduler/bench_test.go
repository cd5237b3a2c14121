package scheduler

import (
	"fmt"
	"testing"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

// BenchmarkCycle measures one scheduling cycle in a busy steady state: 50
// full ClusterQueues, each with 10 admitted workloads and its share of
// the pending ones parked. Before each cycle one admitted workload per
// queue finishes and one new workload per queue arrives, so the cycle
// admits 50 heads and tries the 50 newcomers — whatever the number pending.
//
//	go test -run '^$' -bench Cycle -benchmem ./services/admitter/internal/scheduler/
func BenchmarkCycle(b *testing.B) {
	const queues, running = 50, 10
	for _, pending := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("pending=%d", pending), func(b *testing.B) {
			f := newFixture(b)
			admitted := make([][]*v1alpha1.Workload, queues)
			seq := 0
			add := func(q int) *v1alpha1.Workload {
				seq++
				wl := f.workload(fmt.Sprintf("w%07d", seq), fmt.Sprintf("lq-cq%02d", q), "1", seq, 0)
				f.s.Observe(wl)
				return wl
			}
			for q := range queues {
				f.clusterQueue(fmt.Sprintf("cq%02d", q), fmt.Sprint(running))
				for range running {
					add(q)
				}
			}
			f.settle(admitted)
			for i := range pending {
				add(i % queues)
			}
			f.settle(admitted)

			tried := 0
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				for q := range queues {
					oldest := admitted[q][0]
					admitted[q] = admitted[q][1:]
					f.s.Observe(f.next(oldest, finished))
					add(q)
				}
				b.StartTimer()
				plan := f.cycle()
				b.StopTimer()
				tried += plan.Tried
				f.record(plan, admitted)
				b.StartTimer()
			}
			b.ReportMetric(float64(tried)/float64(b.N), "heads/op")
		})
	}
}

// settle runs cycles until nothing is left to try, recording the
// reservations as written and admitted.
func (f *fixture) settle(admitted [][]*v1alpha1.Workload) {
	for {
		plan := f.cycle()
		f.record(plan, admitted)
		if !plan.More {
			return
		}
	}
}

// record writes back plan's reservations as admitted.
func (f *fixture) record(plan Plan, admitted [][]*v1alpha1.Workload) {
	for _, r := range plan.Reservations {
		wl := f.written(r, true)
		f.s.Observe(wl)
		var q int
		fmt.Sscanf(r.ClusterQueue.Name, "cq%02d", &q)
		admitted[q] = append(admitted[q], wl)
	}
}

// BenchmarkCycleCohorts measures one scheduling cycle right after quota
// was freed in 50 ClusterQueues sharing quota in 5 cohorts of 10. In each
// cohort, 7 queues have 4 cpu and hold 3, and 3 queues have none and
// borrow the 7 left (one of them within a borrowingLimit of 2), so every
// cohort is full; the pending workloads (1 cpu each) are spread over all
// 50 queues and parked. Before the cycle, one workload finishes in 5
// queues of each cohort: the cycle wakes every queue of the 5 trees, tries
// the heads of the 45 that may still take quota (the 5 at their
// borrowingLimit have none left) and admits 25 workloads; the other heads
// stay parked. Between iterations the reservations are unassumed, which
// frees the same quota again, so every iteration measures the same cycle
// (the benchmark fails if one does not).
//
// BenchmarkCycleNoCohorts is the same cycle with the same queues, quotas
// and workloads, but no cohorts (and no borrowingLimit): only the 25
// queues where quota was freed are woken. The cost of sharing is the
// difference.
//
//	go test -run '^$' -bench 'Cycle.*Cohorts' -benchmem ./services/admitter/internal/scheduler/
func BenchmarkCycleCohorts(b *testing.B) {
	for _, pending := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("pending=%d", pending), func(b *testing.B) { benchmarkFreedCycle(b, pending, true) })
	}
}

func BenchmarkCycleNoCohorts(b *testing.B) {
	for _, pending := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("pending=%d", pending), func(b *testing.B) { benchmarkFreedCycle(b, pending, false) })
	}
}

func benchmarkFreedCycle(b *testing.B, pending int, cohorts bool) {
	const queues, perCohort = 50, 10
	f := newFixture(b)
	seq := 0
	add := func(q int) {
		seq++
		f.s.Observe(f.workload(fmt.Sprintf("w%07d", seq), fmt.Sprintf("lq-cq%02d", q), "1", seq, 0))
	}
	// held is what each queue of a cohort holds once the cohort is full.
	held := [perCohort]int{3, 3, 3, 3, 3, 3, 3, 2, 3, 2}
	for q := range queues {
		member := q % perCohort
		var mutate []func(*v1alpha1.ClusterQueue)
		nominal := "4"
		if member >= 7 {
			nominal = "0"
		}
		if cohorts {
			mutate = append(mutate, inCohort(fmt.Sprintf("co%d", q/perCohort)))
			if member == 9 {
				mutate = append(mutate, cpuLimits("2", ""))
			}
		}
		f.clusterQueue(fmt.Sprintf("cq%02d", q), nominal, mutate...)
		for range held[member] {
			add(q)
		}
	}
	admitted := make([][]*v1alpha1.Workload, queues)
	f.settle(admitted)
	for i := range pending {
		add(i % queues)
	}
	f.settle(admitted)
	for q := range queues {
		if q%perCohort < 5 {
			f.s.Observe(f.next(admitted[q][0], finished))
			admitted[q] = admitted[q][1:]
		}
	}
	// One cycle and its undoing before the timer, so the first measured
	// cycle starts from the state every later one does.
	unassume := func(plan Plan) {
		for _, r := range plan.Reservations {
			f.s.Unassume(r.Workload)
		}
	}
	first := f.cycle()
	unassume(first)

	tried := 0
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		plan := f.cycle()
		b.StopTimer()
		if len(plan.Reservations) != len(first.Reservations) || plan.Tried != first.Tried || plan.More {
			b.Fatalf("cycle reserved %d and tried %d heads (more: %v); the first reserved %d and tried %d",
				len(plan.Reservations), plan.Tried, plan.More, len(first.Reservations), first.Tried)
		}
		tried += plan.Tried
		unassume(plan)
		b.StartTimer()
	}
	b.ReportMetric(float64(tried)/float64(b.N), "heads/op")
	b.ReportMetric(float64(len(first.Reservations)), "reserved/op")
}
