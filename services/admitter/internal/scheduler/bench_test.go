package scheduler

import (
	"fmt"
	"runtime"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
// difference. BenchmarkCycleCohorts/fairSharing is the cohorts' cycle with
// fair sharing on, which admits each tree's heads by share (fairOrder):
// the cost of that order is its difference to BenchmarkCycleCohorts.
//
//	go test -run '^$' -bench 'Cycle.*Cohorts' -benchmem ./services/admitter/internal/scheduler/
func BenchmarkCycleCohorts(b *testing.B) {
	for _, pending := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("pending=%d", pending), func(b *testing.B) { benchmarkFreedCycle(b, pending, true) })
	}
	for _, pending := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("fairSharing/pending=%d", pending), func(b *testing.B) { benchmarkFreedCycle(b, pending, true, fairSharingOn) })
	}
}

func BenchmarkCycleNoCohorts(b *testing.B) {
	for _, pending := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("pending=%d", pending), func(b *testing.B) { benchmarkFreedCycle(b, pending, false) })
	}
}

func benchmarkFreedCycle(b *testing.B, pending int, cohorts bool, opts ...Option) {
	const queues, perCohort = 50, 10
	f := newFairFixture(b, opts...)
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

// BenchmarkPreemptionCycle measures preemption in one full ClusterQueue
// (withinClusterQueue LowerPriority) holding admitted low-priority
// workloads of 1 cpu. Each iteration a batch of high-priority workloads
// arrives and one cycle has each preempt one low-priority workload; then
// the victims stop one by one, each followed by the cycle in which a
// waiting preemptor takes the quota freed (and the others, tried again,
// keep waiting for their victims). Those cycles are what is timed, as the
// admitter runs them in `make bench`'s preemption run. Outside the timer
// the high-priority workloads then finish and as many low-priority ones
// take their places, so every iteration starts from the same state.
// ns/preempted and allocs/preempted are per victim, over the timed cycles.
//
//	go test -run '^$' -bench PreemptionCycle -benchmem ./services/admitter/internal/scheduler/
func BenchmarkPreemptionCycle(b *testing.B) {
	const batch = 50
	for _, admitted := range []int{100, 1000, 5000} {
		b.Run(fmt.Sprintf("admitted=%d", admitted), func(b *testing.B) { benchmarkPreemption(b, admitted, batch) })
	}
}

func benchmarkPreemption(b *testing.B, admitted, batch int) {
	f := newFixture(b)
	f.clusterQueue("cq", fmt.Sprint(admitted), withPreemption(v1alpha1.ClusterQueuePreemption{WithinClusterQueue: v1alpha1.PreemptionLowerPriority}))
	// live is the latest version of every workload that holds quota.
	live := map[string]*v1alpha1.Workload{}
	seq := 0
	add := func(prefix string, priority int32) {
		seq++
		f.s.Observe(f.workload(fmt.Sprintf("%s-%07d", prefix, seq), "lq-cq", "1", seq, priority))
	}
	admit := func(plan Plan) {
		for _, r := range plan.Reservations {
			wl := f.written(r, true)
			f.s.Observe(wl)
			live[wl.Name] = wl
		}
	}
	settle := func() {
		for plan := f.cycle(); ; plan = f.cycle() {
			admit(plan)
			if !plan.More {
				return
			}
		}
	}
	for range admitted {
		add("low", 0)
	}
	settle()
	if len(live) != admitted {
		b.Fatalf("admitted %d low-priority workloads, want %d", len(live), admitted)
	}

	var m allocMeter
	tried := 0
	b.ReportAllocs()
	b.ResetTimer()
	b.StopTimer()
	for range b.N {
		for range batch {
			add("high", 10)
		}
		plan := m.timed(b, f.cycle)
		tried += plan.Tried
		if len(plan.Evictions) != batch || len(plan.Reservations) != 0 {
			b.Fatalf("the preempting cycle evicted %d and reserved %d, want %d evicted", len(plan.Evictions), len(plan.Reservations), batch)
		}
		var victims []string
		for _, ev := range plan.Evictions {
			name := ev.Workload.Name
			victims = append(victims, name)
			live[name] = f.next(live[name], func(wl *v1alpha1.Workload) {
				meta.SetStatusCondition(&wl.Status.Conditions, metav1.Condition{Type: v1alpha1.WorkloadEvicted, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonPreempted})
			})
			f.s.Observe(live[name])
		}
		var highs []string
		for _, name := range victims {
			f.s.Observe(f.released(live[name]))
			delete(live, name)
			plan := m.timed(b, f.cycle)
			tried += plan.Tried
			if len(plan.Reservations) != 1 || len(plan.Evictions) != 0 {
				b.Fatalf("once %s stopped, the cycle reserved %v and evicted %d, want one reserved", name, names(plan.Reservations), len(plan.Evictions))
			}
			admit(plan)
			highs = append(highs, plan.Reservations[0].Workload.Name)
		}
		for _, name := range highs {
			f.s.Observe(f.next(live[name], finished))
			delete(live, name)
			add("low", 0)
		}
		settle()
	}
	preempted := float64(b.N * batch)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/preempted, "ns/preempted")
	b.ReportMetric(float64(m.mallocs)/preempted, "allocs/preempted")
	b.ReportMetric(float64(tried)/preempted, "heads/preempted")
}

// allocMeter counts the allocations of the timed parts of a benchmark.
type allocMeter struct{ mallocs uint64 }

// timed runs cycle with b's timer running, and counts its allocations.
func (m *allocMeter) timed(b *testing.B, cycle func() Plan) Plan {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	before := ms.Mallocs
	b.StartTimer()
	plan := cycle()
	b.StopTimer()
	runtime.ReadMemStats(&ms)
	m.mallocs += ms.Mallocs - before
	return plan
}

// BenchmarkFairPreemptionCycle measures preemption by share: ten queues
// of weight 1 and nominal quota 0 hold a Cohort's whole pool in admitted
// workloads of 1 cpu, and a newcomer queue's batch of heads arrives. The
// timed cycle has each head choose, by share, a victim in the queue of
// the highest share, counting the victims its queue's heads before it
// claimed. Each iteration starts from a fresh tree, outside the timer.
//
//	go test -run '^$' -bench FairPreemptionCycle -benchmem ./services/admitter/internal/scheduler/
func BenchmarkFairPreemptionCycle(b *testing.B) {
	for _, admitted := range []int{100, 1000, 5000} {
		b.Run(fmt.Sprintf("admitted=%d", admitted), func(b *testing.B) { benchmarkFairPreemption(b, admitted) })
	}
}

func benchmarkFairPreemption(b *testing.B, admitted int) {
	const queues = 10
	// The newcomer's share of 11 queues is admitted/11: the batch stays
	// below it, so every head preempts.
	batch := min(50, admitted/(queues+1))
	reclaim := withPreemption(v1alpha1.ClusterQueuePreemption{ReclaimWithinCohort: v1alpha1.PreemptionAny})
	var m allocMeter
	b.ReportAllocs()
	b.ResetTimer()
	b.StopTimer()
	for range b.N {
		f := newFairFixture(b, fairSharingOn)
		f.cohortQueues(nil, []cohortDef{{name: "org", cpu: fmt.Sprint(admitted)}})
		for q := range queues {
			name := fmt.Sprintf("q%d", q)
			f.clusterQueue(name, "0", inCohort("org"), reclaim)
			for i := range admitted / queues {
				f.s.Observe(f.workload(fmt.Sprintf("%s-%05d", name, i), "lq-"+name, "1", i, 0))
			}
		}
		if reserved, _, _ := f.runCycle(); len(reserved) != admitted {
			b.Fatalf("admitted %d, want %d", len(reserved), admitted)
		}
		f.clusterQueue("new", "0", inCohort("org"), reclaim)
		for i := range batch {
			f.s.Observe(f.workload(fmt.Sprintf("new-%05d", i), "lq-new", "1", admitted+i, 0))
		}
		if plan := m.timed(b, f.cycle); len(plan.Evictions) != batch {
			b.Fatalf("the preempting cycle evicted %d, want %d", len(plan.Evictions), batch)
		}
	}
	preempted := float64(b.N * batch)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/preempted, "ns/preempted")
	b.ReportMetric(float64(m.mallocs)/preempted, "allocs/preempted")
}
