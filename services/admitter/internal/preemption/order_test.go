package preemption

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// randomWorkloads are n workloads with unique keys whose priorities,
// reservation times and evictions often tie, so that every step of
// Compare's order is reached.
func randomWorkloads(rng *rand.Rand, n int) []*Workload {
	out := make([]*Workload, n)
	for i := range out {
		out[i] = &Workload{
			Key:        fmt.Sprintf("w-%02d-%d", rng.IntN(100), i),
			Priority:   int32(rng.IntN(3)),
			ReservedAt: epoch.Add(time.Duration(rng.IntN(3)) * time.Minute),
			Evicting:   rng.IntN(4) == 0,
		}
	}
	return out
}

// randomCandidates are candidates of workloads in the order given, each
// with a variant picked at random from variants.
func randomCandidates(rng *rand.Rand, workloads []*Workload, variants []variant) []candidate {
	out := make([]candidate, len(workloads))
	for i, w := range workloads {
		out[i] = candidate{w: w, variant: variants[rng.IntN(len(variants))]}
	}
	return out
}

// TestTryOrderIsTheSort: candidates put in the order to try them, from
// workloads in Compare order (the linear partition, or nothing when they
// are all of one group) or in any order (the sort), come out exactly as
// sorting them by compareCandidates does.
func TestTryOrderIsTheSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(26, 1))
	every := []variant{sameQueue, reclaim, reclaimWithoutBorrowing, reclaimWhileBorrowing}
	cases := []struct {
		name     string
		sorted   bool
		variants []variant
	}{
		{name: "in Compare order", sorted: true, variants: every},
		{name: "in Compare order, of one group", sorted: true, variants: []variant{sameQueue}},
		{name: "in Compare order, of two variants of one group", sorted: true, variants: []variant{reclaimWithoutBorrowing, reclaimWhileBorrowing}},
		{name: "in any order", variants: every},
	}
	for trial := range 4000 {
		tc := cases[trial%len(cases)]
		workloads := randomWorkloads(rng, rng.IntN(40))
		if tc.sorted {
			slices.SortFunc(workloads, Compare)
		}
		candidates := randomCandidates(rng, workloads, tc.variants)
		want := slices.Clone(candidates)
		slices.SortFunc(want, compareCandidates)
		if got := inTryOrder(slices.Clone(candidates)); !slices.Equal(got, want) {
			t.Fatalf("trial %d (%s): got %v, want %v", trial, tc.name, keys(got), keys(want))
		}
	}
}

// TestCompareIsCandidateOrderWithinAGroup: compareCandidates weighs the
// group right after eviction, and otherwise is Compare.
func TestCompareIsCandidateOrderWithinAGroup(t *testing.T) {
	rng := rand.New(rand.NewPCG(26, 2))
	workloads := randomWorkloads(rng, 60)
	for _, a := range workloads {
		for _, b := range workloads {
			v := variant(rng.IntN(4))
			if got, want := compareCandidates(candidate{w: a, variant: v}, candidate{w: b, variant: v}), Compare(a, b); got != want {
				t.Fatalf("compareCandidates(%s, %s) in one group = %d, Compare = %d", a.Key, b.Key, got, want)
			}
		}
	}
}

func TestCompare(t *testing.T) {
	at := func(minute int) time.Time { return epoch.Add(time.Duration(minute) * time.Minute) }
	// In Compare order.
	ordered := []*Workload{
		{Key: "evicting", Priority: 9, ReservedAt: at(0), Evicting: true},
		{Key: "low", Priority: 0, ReservedAt: at(0)},
		{Key: "newer", Priority: 1, ReservedAt: at(2)},
		{Key: "a", Priority: 1, ReservedAt: at(1)},
		{Key: "b", Priority: 1, ReservedAt: at(1)},
	}
	shuffled := slices.Clone(ordered)
	rand.New(rand.NewPCG(26, 3)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	slices.SortFunc(shuffled, Compare)
	if !slices.Equal(shuffled, ordered) {
		t.Errorf("sorted by Compare: %v, want %v", workloadKeys(shuffled), workloadKeys(ordered))
	}
}

// TestAnyOrderOfAdmitted: Targets and Blocked answer the same whether
// admitted comes in Compare order or shuffled, over random trees of two
// levels of cohorts, workloads and policies.
func TestAnyOrderOfAdmitted(t *testing.T) {
	rng := rand.New(rand.NewPCG(26, 4))
	cohorts := map[string]cohort{"org": {}, "left": {parent: "org", nominal: 1}, "right": {parent: "org"}}
	names := []string{"a", "b", "c", "d"}
	parents := []string{"left", "left", "right", "org"}
	withins := []WithinClusterQueue{WithinNever, WithinLowerPriority, WithinLowerOrNewerEqualPriority}
	reclaims := []ReclaimWithinCohort{ReclaimNever, ReclaimLowerPriority, ReclaimAny}
	for trial := range 1500 {
		queues := map[string]queue{}
		for i, name := range names {
			queues[name] = queue{cohort: parents[i], nominal: int64(rng.IntN(4))}
		}
		var admitted []held
		for i := range rng.IntN(12) {
			admitted = append(admitted, held{
				name: fmt.Sprintf("w%d", i), cq: names[rng.IntN(len(names))], priority: int32(rng.IntN(3)),
				cores: int64(1 + rng.IntN(2)), minute: rng.IntN(3), evicting: rng.IntN(5) == 0,
			})
		}
		tree, shuffled := buildNested(cohorts, queues, admitted)
		sorted := slices.Clone(shuffled)
		slices.SortFunc(sorted, Compare)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		policy := Policy{
			WithinClusterQueue:  withins[rng.IntN(len(withins))],
			ReclaimWithinCohort: reclaims[rng.IntN(len(reclaims))],
			BorrowWithinCohort:  BorrowWithinCohort{LowerPriority: rng.IntN(2) == 0},
		}
		pending := &Workload{Key: "pending", ClusterQueue: names[rng.IntN(len(names))], Priority: int32(rng.IntN(3)),
			QueuedAt: epoch.Add(time.Duration(rng.IntN(3)) * time.Minute), Usage: cores(int64(1 + rng.IntN(3)))}

		fromSorted, fromShuffled := victims(Targets(tree, pending, policy, sorted)), victims(Targets(tree, pending, policy, shuffled))
		if !slices.Equal(fromSorted, fromShuffled) {
			t.Fatalf("trial %d: Targets from admitted in Compare order %v, shuffled %v", trial, fromSorted, fromShuffled)
		}
		if a, b := Blocked(tree, pending, policy, sorted), Blocked(tree, pending, policy, shuffled); a != b {
			t.Fatalf("trial %d: Blocked from admitted in Compare order %q, shuffled %q", trial, a, b)
		}
	}
}

func keys(candidates []candidate) []string {
	out := make([]string, len(candidates))
	for i, c := range candidates {
		out[i] = fmt.Sprintf("%s/%d", c.w.Key, c.variant)
	}
	return out
}

func workloadKeys(workloads []*Workload) []string {
	out := make([]string, len(workloads))
	for i, w := range workloads {
		out[i] = w.Key
	}
	return out
}
