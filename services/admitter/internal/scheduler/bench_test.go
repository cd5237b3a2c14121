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
