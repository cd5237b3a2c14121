package scheduler

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/sluice-dev/sluice/services/admitter/internal/preemption"
)

// TestVictimPoolKeepsCompareOrder: candidates put back one by one in any
// order, random claims (a victim marked Evicting once claimed, as
// tryPreemption does) and claims lapsing keep the free candidates in
// preemption.Compare order, and each preemptor is handed the free ones and
// its own merged in that order, none lost or twice.
func TestVictimPoolKeepsCompareOrder(t *testing.T) {
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for seed := uint64(1); seed <= 50; seed++ {
		rng := rand.New(rand.NewPCG(seed, 26))
		s := New()
		pool := &victimPool{claimed: map[*entry][]*preemption.Workload{}, slots: map[*preemption.Workload]slot{}}
		var all []*preemption.Workload
		for i := range 60 {
			w := &preemption.Workload{
				Key:        fmt.Sprintf("ns/w-%02d-%d", rng.IntN(100), i),
				Priority:   int32(rng.IntN(3)),
				ReservedAt: epoch.Add(time.Duration(rng.IntN(3)) * time.Minute),
				Evicting:   rng.IntN(5) == 0,
			}
			all = append(all, w)
			pool.putBack(w, &entry{key: types.NamespacedName{Namespace: "ns", Name: w.Key}})
		}
		preemptors := make([]*entry, 4)
		for i := range preemptors {
			preemptors[i] = &entry{key: types.NamespacedName{Namespace: "ns", Name: fmt.Sprintf("p-%d", i)}, where: parked}
		}
		checkPoolOrder(t, seed, pool, preemptors, all)
		for step := range 300 {
			p := preemptors[rng.IntN(len(preemptors))]
			if rng.IntN(4) == 0 {
				p.where = reserved // stops waiting: its claims lapse
				s.releaseLapsedClaims(pool)
				p.where = parked
			} else if candidates := pool.candidatesFor(p); len(candidates) > 0 {
				w := candidates[rng.IntN(len(candidates))]
				pool.claim(p, w)
				w.Evicting = w.Evicting || rng.IntN(2) == 0
			}
			if checkPoolOrder(t, seed, pool, preemptors, all); t.Failed() {
				t.Fatalf("seed %d: after step %d", seed, step)
			}
		}
	}
}

// checkPoolOrder checks that pool's free candidates are in Compare order,
// that each preemptor is handed them and its own in that order, and that
// every one of all is either free or claimed once.
func checkPoolOrder(t *testing.T, seed uint64, pool *victimPool, preemptors []*entry, all []*preemption.Workload) {
	t.Helper()
	if !slices.IsSortedFunc(pool.free, preemption.Compare) {
		t.Errorf("seed %d: free not in Compare order: %v", seed, keysOf(pool.free))
	}
	held := slices.Clone(pool.free)
	for _, w := range pool.free {
		if !pool.slots[w].free {
			t.Errorf("seed %d: %s is in free but its slot says claimed", seed, w.Key)
		}
	}
	for _, p := range preemptors {
		want := slices.Concat(pool.free, pool.claimed[p])
		slices.SortFunc(want, preemption.Compare)
		if got := pool.candidatesFor(p); !slices.Equal(got, want) {
			t.Errorf("seed %d: candidates of %s: %v, want %v", seed, p.key.Name, keysOf(got), keysOf(want))
		}
		held = append(held, pool.claimed[p]...)
	}
	slices.SortFunc(held, preemption.Compare)
	want := slices.Clone(all)
	slices.SortFunc(want, preemption.Compare)
	if !slices.Equal(held, want) {
		t.Errorf("seed %d: free and claimed hold %v, want each of %v once", seed, keysOf(held), keysOf(want))
	}
}

func keysOf(workloads []*preemption.Workload) []string {
	out := make([]string, len(workloads))
	for i, w := range workloads {
		out[i] = w.Key
	}
	return out
}
