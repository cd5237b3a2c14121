package scheduler

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

// TestEveryPreemptorGetsItsTurn: a full queue of low-priority workloads
// and as many high-priority ones arriving while victims stop in random
// order. A victim's quota may go to another preemptor than the one that
// claimed it; the one left out must be tried again and preempt anew, or it
// would wait for ever once the last victim stopped. In the end every
// high-priority workload is admitted, with exactly one victim each.
func TestEveryPreemptorGetsItsTurn(t *testing.T) {
	const n = 30
	for seed := uint64(1); seed <= 20; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, seed))
			f := newFixture(t)
			f.clusterQueue("cq", fmt.Sprint(n), withPreemption(v1alpha1.ClusterQueuePreemption{WithinClusterQueue: v1alpha1.PreemptionLowerPriority}))
			for i := range n {
				f.s.Observe(f.workload(fmt.Sprintf("low-%d", i), "lq-cq", "1", i, 0))
			}
			_, _, live := f.runCycle()
			if len(live) != n {
				t.Fatalf("admitted %d low-priority workloads, want %d", len(live), n)
			}
			arrived, admitted, evictions := 0, 0, 0
			var evicting []string
			for step := 0; admitted < n && step < 5000; step++ {
				switch r := rng.IntN(4); {
				case r == 0 && arrived < n:
					f.s.Observe(f.workload(fmt.Sprintf("high-%d", arrived), "lq-cq", "1", 100+arrived, 10))
					arrived++
				case r == 1 && len(evicting) > 0:
					j := rng.IntN(len(evicting))
					name := evicting[j]
					evicting = append(evicting[:j], evicting[j+1:]...)
					f.s.Observe(f.released(live[name]))
				default:
					plan := f.cycle()
					for _, ev := range plan.Evictions {
						evictions++
						evicted := f.next(live[ev.Workload.Name], func(wl *v1alpha1.Workload) {
							meta.SetStatusCondition(&wl.Status.Conditions, metav1.Condition{Type: v1alpha1.WorkloadEvicted, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonPreempted})
						})
						live[ev.Workload.Name] = evicted
						f.s.Observe(evicted)
						evicting = append(evicting, ev.Workload.Name)
					}
					for _, r := range plan.Reservations {
						wl := f.written(r, true)
						f.s.Observe(wl)
						live[wl.Name] = wl
						admitted++
					}
				}
			}
			if admitted != n || evictions != n {
				t.Fatalf("%d of %d high-priority workloads admitted after %d evictions (%d still stopping); waiting: %v",
					admitted, n, evictions, len(evicting), messages(f.cycle().Waiting))
			}
		})
	}
}
