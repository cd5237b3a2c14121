package preemption

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

// fairCase is a cohort tree for FairTargets: explicit Cohorts, queues,
// weights (1 unless set) and what the queues hold; the pending workload
// is in queue "p".
type fairCase struct {
	name     string
	cohorts  map[string]cohort
	queues   map[string]queue
	weights  map[string]float64
	admitted []held
	policy   Policy
	// strategies nil means DefaultStrategies.
	strategies []Strategy
	priority   int32
	cores      int64
	want       []string // victim:reason
	// blocked is what FairBlocked says ("" unless victims are none).
	blocked string
}

func (c fairCase) build() (*Workload, []*Workload, func() map[string]int64, func(*Workload) []Target, func(*Workload) string) {
	tree, workloads := buildNested(c.cohorts, c.queues, c.admitted)
	for q, w := range c.weights {
		tree.SetClusterQueueWeight(q, w)
	}
	strategies := c.strategies
	if strategies == nil {
		strategies = DefaultStrategies()
	}
	pending := &Workload{Key: "pending", ClusterQueue: "p", Priority: c.priority, Usage: cores(c.cores), QueuedAt: epoch}
	return pending, workloads,
		func() map[string]int64 { return usages(tree, c.queues) },
		func(p *Workload) []Target { return FairTargets(tree, p, c.policy, strategies, workloads) },
		func(p *Workload) string { return FairBlocked(tree, p, c.policy, strategies, workloads) }
}

func TestFairTargets(t *testing.T) {
	reclaimAny := Policy{ReclaimWithinCohort: ReclaimAny}
	final := []Strategy{LessThanOrEqualToFinalShare}
	initial := []Strategy{LessThanInitialShare}
	// A pool of 12 cores in Cohort org, lent to queues of no quota.
	pool12 := map[string]cohort{"org": {nominal: 12}}
	pq := map[string]queue{"p": {cohort: "org"}, "q": {cohort: "org"}}
	tests := []fairCase{
		{
			name:    "the queue of the higher share gives up its most recent workload",
			cohorts: pool12,
			queues:  map[string]queue{"p": {cohort: "org"}, "q": {cohort: "org"}, "r": {cohort: "org"}},
			// q holds 8 (share 667), r 4 (333); p asks for 4 (333).
			admitted: []held{{name: "q1", cq: "q", cores: 4, minute: 1}, {name: "q2", cq: "q", cores: 4, minute: 2}, {name: "r1", cq: "r", cores: 4, minute: 3}},
			policy:   reclaimAny, cores: 4,
			want: []string{"q2:InCohortFairSharing"},
		},
		{
			name:    "equal final shares are enough for LessThanOrEqualToFinalShare",
			cohorts: pool12, queues: pq,
			// q holds 12 in two; p with 6 and q without one are 500 each.
			admitted: []held{{name: "q1", cq: "q", cores: 6, minute: 1}, {name: "q2", cq: "q", cores: 6, minute: 2}},
			policy:   reclaimAny, strategies: final, cores: 6,
			want: []string{"q2:InCohortFairSharing"},
		},
		{
			name:    "LessThanOrEqualToFinalShare refuses to leave the victim's side below the preemptor's",
			cohorts: pool12, queues: pq,
			// p with 6 would be 500, q without its one workload 0.
			admitted: []held{{name: "q1", cq: "q", cores: 12, minute: 1}},
			policy:   reclaimAny, strategies: final, cores: 6,
			blocked: "no ClusterQueue holding what it lacks has a weighted share high enough to give it up under fair sharing (preemption strategies LessThanOrEqualToFinalShare)",
		},
		{
			name:    "LessThanInitialShare compares with the victim's side before",
			cohorts: pool12, queues: pq,
			admitted: []held{{name: "q1", cq: "q", cores: 12, minute: 1}},
			policy:   reclaimAny, strategies: initial, cores: 6,
			want: []string{"q1:InCohortFairSharing"},
		},
		{
			name:    "the second strategy takes what the first refused",
			cohorts: pool12, queues: pq,
			admitted: []held{{name: "q1", cq: "q", cores: 12, minute: 1}},
			policy:   reclaimAny, cores: 6,
			want: []string{"q1:InCohortFairSharing"},
		},
		{
			name:    "neither strategy preempts an even share",
			cohorts: pool12, queues: pq,
			// p holds 4 and asks for 4 more: 667, as q is now.
			admitted: []held{{name: "p1", cq: "p", cores: 4, minute: 1}, {name: "q1", cq: "q", cores: 4, minute: 2}, {name: "q2", cq: "q", cores: 4, minute: 3}},
			policy:   reclaimAny, cores: 4,
			blocked: "no ClusterQueue holding what it lacks has a weighted share high enough to give it up under fair sharing (preemption strategies LessThanOrEqualToFinalShare,LessThanInitialShare)",
		},
		{
			name:    "a weight of 2 halves the preemptor's share",
			cohorts: pool12, queues: pq, weights: map[string]float64{"p": 2},
			admitted: []held{{name: "p1", cq: "p", cores: 4, minute: 1}, {name: "q1", cq: "q", cores: 4, minute: 2}, {name: "q2", cq: "q", cores: 4, minute: 3}},
			policy:   reclaimAny, cores: 4,
			want: []string{"q2:InCohortFairSharing"},
		},
		{
			name:    "a weight of 3 on the victim's queue protects it",
			cohorts: pool12, queues: pq, weights: map[string]float64{"q": 3},
			admitted: []held{{name: "q1", cq: "q", cores: 6, minute: 1}, {name: "q2", cq: "q", cores: 6, minute: 2}},
			policy:   reclaimAny, cores: 6,
			blocked: "no ClusterQueue holding what it lacks has a weighted share high enough to give it up under fair sharing (preemption strategies LessThanOrEqualToFinalShare,LessThanInitialShare)",
		},
		{
			name: "within its nominal quota the queue reclaims whatever the shares",
			// p lends its 6 to q, whose weight makes its share tiny.
			queues:   map[string]queue{"p": {cohort: "org", nominal: 6}, "q": {cohort: "org"}},
			weights:  map[string]float64{"q": 1000},
			admitted: []held{{name: "q1", cq: "q", cores: 3, minute: 1}, {name: "q2", cq: "q", cores: 3, minute: 2}},
			policy:   reclaimAny, cores: 4,
			want: []string{"q2:InCohortReclamation", "q1:InCohortReclamation"},
		},
		{
			name:    "its own queue's lower priority first, by withinClusterQueue",
			cohorts: pool12, queues: pq,
			admitted: []held{{name: "p1", cq: "p", priority: 1, cores: 6, minute: 1}, {name: "q1", cq: "q", cores: 6, minute: 2}},
			policy:   Policy{WithinClusterQueue: WithinLowerPriority, ReclaimWithinCohort: ReclaimAny}, priority: 5, cores: 6,
			want: []string{"p1:InClusterQueue"},
		},
		{
			name:    "reclaimWithinCohort Never leaves the other queues alone",
			cohorts: pool12, queues: pq,
			admitted: []held{{name: "q1", cq: "q", cores: 6, minute: 1}, {name: "q2", cq: "q", cores: 6, minute: 2}},
			policy:   Policy{ReclaimWithinCohort: ReclaimNever}, cores: 6,
			blocked: "1 workload(s) of ClusterQueue q hold the quota, and reclaimWithinCohort is Never",
		},
		{
			name:    "reclaimWithinCohort LowerPriority protects equal priority",
			cohorts: pool12, queues: pq,
			admitted: []held{{name: "q1", cq: "q", priority: 5, cores: 6, minute: 1}, {name: "q2", cq: "q", priority: 5, cores: 6, minute: 2}},
			policy:   Policy{ReclaimWithinCohort: ReclaimLowerPriority}, priority: 5, cores: 6,
			blocked: "1 workload(s) of ClusterQueue q hold the quota but have equal or higher priority (reclaimWithinCohort LowerPriority)",
		},
		{
			name: "the search descends into the sub-cohort of the higher share",
			// org pools 30; x (x1, x2) holds 20 of it, y (y1) 10.
			cohorts: map[string]cohort{"org": {nominal: 30}, "x": {parent: "org"}, "y": {parent: "org"}},
			queues:  map[string]queue{"p": {cohort: "org"}, "x1": {cohort: "x"}, "x2": {cohort: "x"}, "y1": {cohort: "y"}},
			admitted: []held{
				{name: "x1a", cq: "x1", cores: 5, minute: 1}, {name: "x1b", cq: "x1", cores: 5, minute: 2},
				{name: "x2a", cq: "x2", cores: 5, minute: 3}, {name: "x2b", cq: "x2", cores: 5, minute: 4},
				{name: "y1a", cq: "y1", cores: 5, minute: 5}, {name: "y1b", cq: "y1", cores: 5, minute: 6},
			},
			policy: reclaimAny, cores: 5,
			want: []string{"x2b:InCohortFairSharing"},
		},
		{
			name:     "a queue without cohort preempts in itself only",
			queues:   map[string]queue{"p": {nominal: 4}},
			admitted: []held{{name: "p1", cq: "p", priority: 1, cores: 4, minute: 1}},
			policy:   Policy{WithinClusterQueue: WithinLowerPriority}, priority: 5, cores: 2,
			want: []string{"p1:InClusterQueue"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pending, _, usage, targets, blocked := tc.build()
			before := usage()
			got := victims(targets(pending))
			if !slices.Equal(got, tc.want) {
				t.Errorf("victims %v, want %v", got, tc.want)
			}
			if after := usage(); !maps.Equal(before, after) {
				t.Errorf("usage %v after the choice, want %v as before", after, before)
			}
			if why := blocked(pending); why != tc.blocked {
				t.Errorf("FairBlocked %q, want %q", why, tc.blocked)
			}
		})
	}
}

// TestFairPreemptionReachesTheWeightedSplit: queues of weights 1 and 3
// hold a pool of 40 at 10 and 30; a newcomer of weight 1 preempting one
// workload at a time ends at 8 of 40, with the others at 8 and 24: every
// weighted share 200, and one more admission would leave the newcomer
// above both.
func TestFairPreemptionReachesTheWeightedSplit(t *testing.T) {
	var admitted []held
	for i := range 40 {
		q := "b"
		if i%4 == 0 {
			q = "a"
		}
		admitted = append(admitted, held{name: fmt.Sprintf("%s%02d", q, i), cq: q, cores: 1, minute: i})
	}
	tc := fairCase{
		cohorts:  map[string]cohort{"org": {nominal: 40}},
		queues:   map[string]queue{"a": {cohort: "org"}, "b": {cohort: "org"}, "p": {cohort: "org"}},
		weights:  map[string]float64{"b": 3},
		admitted: admitted,
		policy:   Policy{ReclaimWithinCohort: ReclaimAny},
		cores:    1,
	}
	tree, workloads := buildNested(tc.cohorts, tc.queues, tc.admitted)
	for q, w := range tc.weights {
		tree.SetClusterQueueWeight(q, w)
	}
	for round := 0; ; round++ {
		if round > 40 {
			t.Fatal("preemption never settles")
		}
		pending := &Workload{Key: fmt.Sprintf("p%02d", round), ClusterQueue: "p", Usage: cores(1), QueuedAt: epoch, ReservedAt: epoch.Add(time.Hour)}
		if tree.Fits("p", pending.Usage) {
			t.Fatalf("round %d: fits without preemption", round)
		}
		targets := FairTargets(tree, pending, tc.policy, DefaultStrategies(), workloads)
		if len(targets) == 0 {
			break
		}
		if len(targets) != 1 || targets[0].Reason != InCohortFairSharing {
			t.Fatalf("round %d: victims %v, want one by fair sharing", round, victims(targets))
		}
		v := targets[0].Workload
		tree.RemoveUsage(v.ClusterQueue, v.Usage)
		workloads = slices.DeleteFunc(workloads, func(w *Workload) bool { return w == v })
		tree.AddUsage("p", pending.Usage)
		workloads = append(workloads, pending)
	}
	got := usages(tree, tc.queues)
	want := map[string]int64{"a": 8000, "b": 24000, "p": 8000}
	if !maps.Equal(got, want) {
		t.Fatalf("usage %v, want %v", got, want)
	}
	if why := FairBlocked(tree, &Workload{Key: "last", ClusterQueue: "p", Usage: cores(1), QueuedAt: epoch}, tc.policy, DefaultStrategies(), workloads); !strings.Contains(why, "weighted share") {
		t.Errorf("FairBlocked %q once settled, want the share clause", why)
	}
}
