package preemption

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/services/admitter/internal/quota"
)

var cpu = quota.FR{Flavor: "default", Resource: corev1.ResourceCPU}

// queue is a ClusterQueue of a test: its cohort ("" for none), its
// nominal cpu and, when set, its lendingLimit, in cores.
type queue struct {
	cohort  string
	nominal int64
	lending *int64
}

// cohort is an explicit Cohort of a test: its parent ("" for none) and
// its own nominal cpu, in cores.
type cohort struct {
	parent  string
	nominal int64
}

// held is an admitted workload of a test: its queue, priority, cores,
// the minute its quota was reserved and whether it is being evicted.
type held struct {
	name, cq string
	priority int32
	cores    int64
	minute   int
	evicting bool
}

var epoch = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

func cores(n int64) map[quota.FR]int64 { return map[quota.FR]int64{cpu: n * 1000} }

// build makes the tree of queues with every held workload's usage in it.
func build(queues map[string]queue, admitted []held) (*quota.Tree, []*Workload) {
	return buildNested(nil, queues, admitted)
}

// buildNested is build with explicit Cohorts.
func buildNested(cohorts map[string]cohort, queues map[string]queue, admitted []held) (*quota.Tree, []*Workload) {
	tree := quota.NewTree()
	for name, c := range cohorts {
		tree.SetCohort(name, c.parent, map[quota.FR]quota.Quota{cpu: {Nominal: c.nominal * 1000}})
	}
	for name, q := range queues {
		var lending *int64
		if q.lending != nil {
			lending = ptr.To(*q.lending * 1000)
		}
		tree.SetClusterQueue(name, q.cohort, map[quota.FR]quota.Quota{cpu: {Nominal: q.nominal * 1000, LendingLimit: lending}})
	}
	var out []*Workload
	for _, h := range admitted {
		w := &Workload{
			Key: h.name, ClusterQueue: h.cq, Priority: h.priority, Usage: cores(h.cores),
			ReservedAt: epoch.Add(time.Duration(h.minute) * time.Minute),
			QueuedAt:   epoch.Add(time.Duration(h.minute-1) * time.Minute),
			Evicting:   h.evicting,
		}
		tree.AddUsage(h.cq, w.Usage)
		out = append(out, w)
	}
	return tree, out
}

func TestTargets(t *testing.T) {
	lower := Policy{WithinClusterQueue: WithinLowerPriority}
	solo := map[string]queue{"a": {nominal: 4}}
	// Two teams sharing a cohort of 4 cores.
	pair := map[string]queue{"a": {cohort: "org", nominal: 2}, "b": {cohort: "org", nominal: 2}}
	// Three, so that one can borrow what another does not use.
	trio := map[string]queue{"a": {cohort: "org", nominal: 2}, "b": {cohort: "org", nominal: 2}, "c": {cohort: "org", nominal: 2}}
	tests := []struct {
		name     string
		queues   map[string]queue
		admitted []held
		policy   Policy
		// pending is in queue "a", queued at minute 5 unless queuedAt.
		priority int32
		cores    int64
		queuedAt int
		want     []string // victim:reason
	}{
		{
			name:     "the most recently reserved of the lowest priority goes",
			queues:   solo,
			admitted: []held{{name: "old", cq: "a", cores: 2, minute: 1}, {name: "new", cq: "a", cores: 2, minute: 2}},
			policy:   lower, priority: 10, cores: 2,
			want: []string{"new:InClusterQueue"},
		},
		{
			name:     "lowest priority before most recent",
			queues:   solo,
			admitted: []held{{name: "low", cq: "a", priority: 1, cores: 2, minute: 1}, {name: "mid", cq: "a", priority: 5, cores: 2, minute: 2}},
			policy:   lower, priority: 10, cores: 2,
			want: []string{"low:InClusterQueue"},
		},
		{
			name:     "Never preempts nothing",
			queues:   solo,
			admitted: []held{{name: "w", cq: "a", cores: 4, minute: 1}},
			policy:   Policy{WithinClusterQueue: WithinNever}, priority: 10, cores: 2,
		},
		{
			name:     "equal priority is not lower",
			queues:   solo,
			admitted: []held{{name: "w", cq: "a", priority: 3, cores: 4, minute: 1}},
			policy:   lower, priority: 3, cores: 2,
		},
		{
			name:     "equal priority that queued later goes under LowerOrNewerEqualPriority",
			queues:   solo,
			admitted: []held{{name: "w", cq: "a", priority: 3, cores: 4, minute: 9}},
			policy:   Policy{WithinClusterQueue: WithinLowerOrNewerEqualPriority}, priority: 3, cores: 2,
			want: []string{"w:InClusterQueue"},
		},
		{
			name:     "equal priority that queued earlier stays under LowerOrNewerEqualPriority",
			queues:   solo,
			admitted: []held{{name: "w", cq: "a", priority: 3, cores: 4, minute: 1}},
			policy:   Policy{WithinClusterQueue: WithinLowerOrNewerEqualPriority}, priority: 3, cores: 2,
		},
		{
			name:     "no victims for a workload that would not fit anyway",
			queues:   solo,
			admitted: []held{{name: "w", cq: "a", cores: 4, minute: 1}},
			policy:   lower, priority: 10, cores: 6,
		},
		{
			name:     "no victims for a workload that fits",
			queues:   solo,
			admitted: []held{{name: "w", cq: "a", cores: 2, minute: 1}},
			policy:   lower, priority: 10, cores: 2,
		},
		{
			name:   "victims not needed in the end are put back",
			queues: solo,
			// small goes first (lowest priority) but freeing big alone is enough.
			admitted: []held{{name: "small", cq: "a", priority: 0, cores: 1, minute: 1}, {name: "big", cq: "a", priority: 1, cores: 3, minute: 2}},
			policy:   lower, priority: 10, cores: 3,
			want: []string{"big:InClusterQueue"},
		},
		{
			name:     "several victims when one is not enough",
			queues:   solo,
			admitted: []held{{name: "x", cq: "a", cores: 1, minute: 1}, {name: "y", cq: "a", cores: 1, minute: 2}, {name: "z", cq: "a", cores: 2, minute: 3}},
			policy:   lower, priority: 10, cores: 3,
			want: []string{"z:InClusterQueue", "y:InClusterQueue"},
		},
		{
			name:     "a workload being evicted already is taken first",
			queues:   solo,
			admitted: []held{{name: "going", cq: "a", priority: 5, cores: 2, minute: 1, evicting: true}, {name: "low", cq: "a", priority: 0, cores: 2, minute: 2}},
			policy:   lower, priority: 10, cores: 2,
			want: []string{"going:InClusterQueue"},
		},
		{
			name:     "quota lent is reclaimed from the borrower",
			queues:   pair,
			admitted: []held{{name: "b1", cq: "b", cores: 2, minute: 1}, {name: "b2", cq: "b", cores: 2, minute: 2}},
			policy:   Policy{ReclaimWithinCohort: ReclaimAny}, cores: 2,
			want: []string{"b2:InCohortReclamation"},
		},
		{
			name:     "reclaim LowerPriority spares the borrower's equal priority",
			queues:   pair,
			admitted: []held{{name: "b1", cq: "b", cores: 2, minute: 1}, {name: "b2", cq: "b", cores: 2, minute: 2}},
			policy:   Policy{ReclaimWithinCohort: ReclaimLowerPriority}, cores: 2,
		},
		{
			name:     "reclaim Never leaves the borrower alone",
			queues:   pair,
			admitted: []held{{name: "b1", cq: "b", cores: 2, minute: 1}, {name: "b2", cq: "b", cores: 2, minute: 2}},
			policy:   Policy{ReclaimWithinCohort: ReclaimNever, WithinClusterQueue: WithinLowerPriority}, priority: 10, cores: 2,
		},
		{
			name:   "only a queue beyond its nominal quota is reclaimed from",
			queues: trio,
			admitted: []held{{name: "b", cq: "b", cores: 2, minute: 3},
				{name: "c1", cq: "c", cores: 2, minute: 1}, {name: "c2", cq: "c", cores: 2, minute: 2}},
			policy: Policy{ReclaimWithinCohort: ReclaimAny}, cores: 2,
			want: []string{"c2:InCohortReclamation"},
		},
		{
			name:   "others' borrowed quota before the queue's own work",
			queues: map[string]queue{"a": {cohort: "org", nominal: 4}, "b": {cohort: "org", nominal: 0}},
			admitted: []held{{name: "own", cq: "a", cores: 2, minute: 2},
				{name: "borrower", cq: "b", cores: 2, minute: 1}},
			policy: Policy{WithinClusterQueue: WithinLowerPriority, ReclaimWithinCohort: ReclaimAny}, priority: 10, cores: 2,
			want: []string{"borrower:InCohortReclamation"},
		},
		{
			name:   "borrowWithinCohort preempts a lower-priority borrower to borrow in its place",
			queues: trio,
			admitted: []held{{name: "mine", cq: "a", priority: 10, cores: 2, minute: 1},
				{name: "borrower", cq: "b", cores: 4, minute: 2}},
			policy:   Policy{ReclaimWithinCohort: ReclaimLowerPriority, BorrowWithinCohort: BorrowWithinCohort{LowerPriority: true}},
			priority: 10, cores: 2,
			want: []string{"borrower:InCohortReclaimWhileBorrowing"},
		},
		{
			name:   "borrowWithinCohort at the threshold still preempts",
			queues: trio,
			admitted: []held{{name: "mine", cq: "a", priority: 10, cores: 2, minute: 1},
				{name: "borrower", cq: "b", priority: 3, cores: 4, minute: 2}},
			policy: Policy{ReclaimWithinCohort: ReclaimLowerPriority,
				BorrowWithinCohort: BorrowWithinCohort{LowerPriority: true, MaxPriorityThreshold: ptr.To[int32](3)}},
			priority: 10, cores: 2,
			want: []string{"borrower:InCohortReclaimWhileBorrowing"},
		},
		{
			name:   "borrowWithinCohort spares a borrower above the threshold",
			queues: trio,
			admitted: []held{{name: "mine", cq: "a", priority: 10, cores: 2, minute: 1},
				{name: "borrower", cq: "b", priority: 4, cores: 4, minute: 2}},
			policy: Policy{ReclaimWithinCohort: ReclaimLowerPriority,
				BorrowWithinCohort: BorrowWithinCohort{LowerPriority: true, MaxPriorityThreshold: ptr.To[int32](3)}},
			priority: 10, cores: 2,
		},
		{
			name:   "without borrowWithinCohort a queue at its nominal quota does not preempt to borrow",
			queues: trio,
			admitted: []held{{name: "mine", cq: "a", priority: 10, cores: 2, minute: 1},
				{name: "borrower", cq: "b", cores: 4, minute: 2}},
			policy:   Policy{ReclaimWithinCohort: ReclaimAny},
			priority: 10, cores: 2,
		},
		{
			name:   "victims of another cohort are not candidates",
			queues: map[string]queue{"a": {cohort: "org", nominal: 2}, "b": {cohort: "org", nominal: 2}, "x": {cohort: "other", nominal: 0}},
			admitted: []held{{name: "b1", cq: "b", cores: 2, minute: 1}, {name: "b2", cq: "b", cores: 2, minute: 2},
				{name: "x", cq: "x", cores: 0, minute: 1}},
			policy: Policy{ReclaimWithinCohort: ReclaimAny}, cores: 2,
			want: []string{"b2:InCohortReclamation"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tree, admitted := build(tt.queues, tt.admitted)
			before := map[string]int64{}
			for name := range tt.queues {
				before[name] = tree.Usage(name, cpu)
			}
			queuedAt := tt.queuedAt
			if queuedAt == 0 {
				queuedAt = 5
			}
			pending := &Workload{Key: "pending", ClusterQueue: "a", Priority: tt.priority, Usage: cores(tt.cores),
				QueuedAt: epoch.Add(time.Duration(queuedAt) * time.Minute)}

			var got []string
			for _, target := range Targets(tree, pending, tt.policy, admitted) {
				got = append(got, target.Workload.Key+":"+string(target.Reason))
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("victims %v, want %v", got, tt.want)
			}
			for name, usage := range before {
				if after := tree.Usage(name, cpu); after != usage {
					t.Errorf("queue %s uses %d after the choice, %d before: the tree was not restored", name, after, usage)
				}
			}
		})
	}
}

// TestTargetsMakeRoom: whatever the victims, the pending workload fits
// once they are gone, and no victim could be spared.
func TestTargetsMakeRoom(t *testing.T) {
	queues := map[string]queue{"a": {cohort: "org", nominal: 6}, "b": {cohort: "org", nominal: 2}}
	var admitted []held
	for i := range 6 {
		admitted = append(admitted, held{name: "a" + strings.Repeat("x", i), cq: "a", priority: int32(i % 3), cores: int64(1 + i%2), minute: i})
	}
	admitted = append(admitted, held{name: "b", cq: "b", cores: 3, minute: 7})
	tree, workloads := build(queues, admitted)
	pending := &Workload{Key: "pending", ClusterQueue: "a", Priority: 5, Usage: cores(4), QueuedAt: epoch}
	policy := Policy{WithinClusterQueue: WithinLowerPriority, ReclaimWithinCohort: ReclaimAny}
	targets := Targets(tree, pending, policy, workloads)
	if len(targets) == 0 {
		t.Fatal("no victims, want some")
	}
	for _, target := range targets {
		tree.RemoveUsage(target.Workload.ClusterQueue, target.Workload.Usage)
	}
	if !tree.Fits("a", pending.Usage) {
		t.Fatalf("the pending workload does not fit once its victims %v are gone", targets)
	}
	for i, target := range targets[:len(targets)-1] {
		tree.AddUsage(target.Workload.ClusterQueue, target.Workload.Usage)
		if tree.Fits("a", pending.Usage) {
			t.Errorf("victim %d (%s) was not needed", i, target.Workload.Key)
		}
		tree.RemoveUsage(target.Workload.ClusterQueue, target.Workload.Usage)
	}
}

// TestDecidingAgainPicksTheSameVictims: victims keep their quota until
// their pods stop; asked again meanwhile, with them marked as being
// evicted, the choice names the same victims and no more.
func TestDecidingAgainPicksTheSameVictims(t *testing.T) {
	queues := map[string]queue{"a": {cohort: "org", nominal: 4}, "b": {cohort: "org", nominal: 0}}
	tree, workloads := build(queues, []held{
		{name: "a1", cq: "a", priority: 1, cores: 1, minute: 1},
		{name: "a2", cq: "a", priority: 0, cores: 1, minute: 2},
		{name: "a3", cq: "a", priority: 0, cores: 2, minute: 3},
		{name: "b1", cq: "b", priority: 0, cores: 1, minute: 4},
	})
	pending := &Workload{Key: "pending", ClusterQueue: "a", Priority: 5, Usage: cores(3), QueuedAt: epoch}
	policy := Policy{WithinClusterQueue: WithinLowerPriority, ReclaimWithinCohort: ReclaimAny}
	keys := func(targets []Target) []string {
		var out []string
		for _, target := range targets {
			out = append(out, target.Workload.Key)
		}
		slices.Sort(out)
		return out
	}
	first := Targets(tree, pending, policy, workloads)
	if len(first) == 0 {
		t.Fatal("no victims, want some")
	}
	for _, target := range first {
		target.Workload.Evicting = true
	}
	again := Targets(tree, pending, policy, workloads)
	if !slices.Equal(keys(first), keys(again)) {
		t.Fatalf("victims %v, then %v while the first are being evicted", keys(first), keys(again))
	}
}

// victims names the targets as victim:reason.
func victims(targets []Target) []string {
	var out []string
	for _, target := range targets {
		out = append(out, target.Workload.Key+":"+string(target.Reason))
	}
	return out
}

// usages is what each queue holds, to check that a choice restores tree.
func usages(tree *quota.Tree, queues map[string]queue) map[string]int64 {
	out := map[string]int64{}
	for name := range queues {
		out[name] = tree.Usage(name, cpu)
	}
	return out
}

func TestTargetsInNestedCohorts(t *testing.T) {
	// R has the sub-cohorts P and Q; the pending workload is in queue a of P.
	nested := map[string]cohort{"R": {}, "P": {parent: "R"}, "Q": {parent: "R"}}
	reclaimAny := Policy{ReclaimWithinCohort: ReclaimAny}
	tests := []struct {
		name     string
		cohorts  map[string]cohort
		queues   map[string]queue
		admitted []held
		policy   Policy
		priority int32
		cores    int64
		want     []string
	}{
		{
			// b holds a's 2 within P; Q borrows d's 2 within itself,
			// though its c was reserved last.
			name:    "a sub-cohort that borrows within itself is not touched by a reclaim from a sibling cohort",
			cohorts: nested,
			queues:  map[string]queue{"a": {cohort: "P", nominal: 2}, "b": {cohort: "P", nominal: 2}, "c": {cohort: "Q", nominal: 2}, "d": {cohort: "Q", nominal: 2}},
			admitted: []held{{name: "b1", cq: "b", cores: 2, minute: 1}, {name: "b2", cq: "b", cores: 2, minute: 2},
				{name: "c1", cq: "c", cores: 2, minute: 3}, {name: "c2", cq: "c", cores: 2, minute: 4}},
			policy: reclaimAny, cores: 2,
			want: []string{"b2:InCohortReclamation"},
		},
		{
			name:    "a sub-cohort over its subtree quota gives up its borrowing queue's workloads",
			cohorts: nested,
			queues:  map[string]queue{"a": {cohort: "P", nominal: 2}, "b": {cohort: "P", nominal: 2}, "c": {cohort: "Q", nominal: 2}, "d": {cohort: "Q", nominal: 2}},
			admitted: []held{{name: "b1", cq: "b", cores: 2, minute: 1},
				{name: "c1", cq: "c", cores: 2, minute: 2}, {name: "c2", cq: "c", cores: 2, minute: 3}, {name: "c3", cq: "c", cores: 2, minute: 4}},
			policy: reclaimAny, cores: 2,
			want: []string{"c3:InCohortReclamation"},
		},
		{
			// a goes beyond its nominal 1, but P's 4 hold a's 3: what Q
			// took of P's quota is reclaimed without borrowWithinCohort.
			name:     "advantage gained at a higher ancestor",
			cohorts:  nested,
			queues:   map[string]queue{"a": {cohort: "P", nominal: 1}, "b": {cohort: "P", nominal: 3}, "c": {cohort: "Q", nominal: 2}, "d": {cohort: "Q", nominal: 2}},
			admitted: []held{{name: "a1", cq: "a", cores: 1, minute: 1}, {name: "c1", cq: "c", cores: 2, minute: 2}, {name: "c2", cq: "c", cores: 2, minute: 3}, {name: "c3", cq: "c", cores: 2, minute: 4}},
			policy:   reclaimAny, cores: 2,
			want: []string{"c3:InCohortReclamation"},
		},
		{
			// b holds a's 1 within P, and P is full: a, beyond its
			// nominal, has no better claim than b.
			name:    "without advantage, a sibling is not reclaimed from for a workload that would borrow",
			cohorts: nested,
			queues:  map[string]queue{"a": {cohort: "P", nominal: 1}, "b": {cohort: "P", nominal: 3}, "c": {cohort: "Q", nominal: 2}, "d": {cohort: "Q", nominal: 2}},
			admitted: []held{{name: "b1", cq: "b", cores: 2, minute: 1}, {name: "b2", cq: "b", cores: 2, minute: 2},
				{name: "c1", cq: "c", cores: 2, minute: 3}, {name: "c2", cq: "c", cores: 2, minute: 4}},
			policy: reclaimAny, priority: 10, cores: 2,
		},
		{
			name:    "without advantage, borrowWithinCohort preempts a sibling to borrow",
			cohorts: nested,
			queues:  map[string]queue{"a": {cohort: "P", nominal: 1}, "b": {cohort: "P", nominal: 3}, "c": {cohort: "Q", nominal: 2}, "d": {cohort: "Q", nominal: 2}},
			admitted: []held{{name: "b1", cq: "b", cores: 2, minute: 1}, {name: "b2", cq: "b", cores: 2, minute: 2},
				{name: "c1", cq: "c", cores: 2, minute: 3}, {name: "c2", cq: "c", cores: 2, minute: 4}},
			policy:   Policy{ReclaimWithinCohort: ReclaimLowerPriority, BorrowWithinCohort: BorrowWithinCohort{LowerPriority: true}},
			priority: 10, cores: 2,
			want: []string{"b2:InCohortReclaimWhileBorrowing"},
		},
		{
			// d2 brings Q back within its quota: c, still beyond its
			// nominal, holds only Q's own quota then, and S's e gives
			// the rest.
			name:    "a queue is skipped once a cohort between it and the common ancestor is back within quota",
			cohorts: map[string]cohort{"R": {}, "P": {parent: "R"}, "Q": {parent: "R"}, "S": {parent: "R"}},
			queues: map[string]queue{"a": {cohort: "P", nominal: 4}, "c": {cohort: "Q", nominal: 2}, "d": {cohort: "Q", nominal: 2},
				"e": {cohort: "S", nominal: 2}},
			admitted: []held{{name: "e1", cq: "e", cores: 2, minute: 1}, {name: "e2", cq: "e", cores: 2, minute: 2},
				{name: "c1", cq: "c", cores: 1, minute: 5}, {name: "c2", cq: "c", cores: 2, minute: 6},
				{name: "d1", cq: "d", cores: 1, minute: 7}, {name: "d2", cq: "d", cores: 2, minute: 8}},
			policy: reclaimAny, cores: 4,
			want: []string{"d2:InCohortReclamation", "e2:InCohortReclamation"},
		},
		{
			// a keeps its 2 local (lendingLimit 0), so 2 of the 4 are
			// left for P, whose pool (b's 2) holds them: advantage above P.
			name:     "a lending limit keeps part of the request local",
			cohorts:  nested,
			queues:   map[string]queue{"a": {cohort: "P", nominal: 2, lending: ptr.To[int64](0)}, "b": {cohort: "P", nominal: 2}, "c": {cohort: "Q", nominal: 2}, "d": {cohort: "Q", nominal: 2}},
			admitted: []held{{name: "c1", cq: "c", cores: 2, minute: 1}, {name: "c2", cq: "c", cores: 2, minute: 2}, {name: "c3", cq: "c", cores: 2, minute: 3}},
			policy:   reclaimAny, cores: 4,
			want: []string{"c3:InCohortReclamation"},
		},
		{
			// c keeps its 4 to itself (lendingLimit 0), so Q's pool is
			// d's 2: Q holds 6 of its queues' 6 nominal, yet d's third
			// core came from outside Q, and goes back.
			name:    "quota a lending limit keeps local is not the sub-cohort's to share",
			cohorts: nested,
			queues: map[string]queue{"a": {cohort: "P", nominal: 2}, "c": {cohort: "Q", nominal: 4, lending: ptr.To[int64](0)},
				"d": {cohort: "Q", nominal: 2}},
			admitted: []held{{name: "c1", cq: "c", cores: 3, minute: 1},
				{name: "d1", cq: "d", cores: 1, minute: 2}, {name: "d2", cq: "d", cores: 2, minute: 3}},
			policy: reclaimAny, cores: 2,
			want: []string{"d2:InCohortReclamation"},
		},
		{
			// b borrows within P at priority 0, c took P's quota at 5.
			name:    "candidates found with the advantage come before other queues' lower priorities",
			cohorts: map[string]cohort{"R": {}, "P": {parent: "R", nominal: 4}, "Q": {parent: "R"}},
			queues:  map[string]queue{"a": {cohort: "P", nominal: 1}, "b": {cohort: "P", nominal: 3}, "c": {cohort: "Q", nominal: 2}, "d": {cohort: "Q", nominal: 2}},
			admitted: []held{{name: "b1", cq: "b", cores: 4, minute: 9},
				{name: "c1", cq: "c", priority: 5, cores: 2, minute: 1}, {name: "c2", cq: "c", priority: 5, cores: 2, minute: 2},
				{name: "c3", cq: "c", priority: 5, cores: 2, minute: 3}, {name: "c4", cq: "c", priority: 5, cores: 2, minute: 4}},
			policy:   Policy{ReclaimWithinCohort: ReclaimLowerPriority, BorrowWithinCohort: BorrowWithinCohort{LowerPriority: true}},
			priority: 10, cores: 2,
			want: []string{"c4:InCohortReclamation"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tree, admitted := buildNested(tt.cohorts, tt.queues, tt.admitted)
			before := usages(tree, tt.queues)
			pending := &Workload{Key: "pending", ClusterQueue: "a", Priority: tt.priority, Usage: cores(tt.cores), QueuedAt: epoch}
			if got := victims(Targets(tree, pending, tt.policy, admitted)); !slices.Equal(got, tt.want) {
				t.Errorf("victims %v, want %v", got, tt.want)
			}
			if after := usages(tree, tt.queues); !maps.Equal(before, after) {
				t.Errorf("usage %v after the choice, %v before: the tree was not restored", after, before)
			}
		})
	}
}

func TestBlocked(t *testing.T) {
	lower := Policy{WithinClusterQueue: WithinLowerPriority}
	solo := map[string]queue{"a": {nominal: 4}}
	pair := map[string]queue{"a": {cohort: "org", nominal: 2}, "b": {cohort: "org", nominal: 2}}
	trio := map[string]queue{"a": {cohort: "org", nominal: 2}, "b": {cohort: "org", nominal: 2}, "c": {cohort: "org", nominal: 2}}
	nested := map[string]cohort{"R": {}, "P": {parent: "R"}, "Q": {parent: "R"}}
	siblings := map[string]queue{"a": {cohort: "P", nominal: 1}, "b": {cohort: "P", nominal: 3}, "c": {cohort: "Q", nominal: 2}, "d": {cohort: "Q", nominal: 2}}
	tests := []struct {
		name     string
		cohorts  map[string]cohort
		queues   map[string]queue
		admitted []held
		policy   Policy
		priority int32
		cores    int64
		want     string
	}{
		{
			name:     "nothing to say when it fits",
			queues:   solo,
			admitted: []held{{name: "w", cq: "a", cores: 2, minute: 1}},
			policy:   lower, priority: 10, cores: 2,
		},
		{
			name:     "nothing to say when there are victims",
			queues:   solo,
			admitted: []held{{name: "w", cq: "a", cores: 4, minute: 1}},
			policy:   lower, priority: 10, cores: 2,
		},
		{
			name:     "equal priority in the same queue",
			queues:   solo,
			admitted: []held{{name: "w", cq: "a", priority: 3, cores: 4, minute: 1}},
			policy:   lower, priority: 3, cores: 2,
			want: "1 workload(s) of the same ClusterQueue hold the quota but have equal or higher priority (withinClusterQueue LowerPriority)",
		},
		{
			name:     "equal priority queued earlier in the same queue",
			queues:   solo,
			admitted: []held{{name: "w", cq: "a", priority: 3, cores: 4, minute: 1}},
			policy:   Policy{WithinClusterQueue: WithinLowerOrNewerEqualPriority}, priority: 3, cores: 2,
			want: "1 workload(s) of the same ClusterQueue hold the quota but have higher priority, or equal priority and queued no later (withinClusterQueue LowerOrNewerEqualPriority)",
		},
		{
			name:     "withinClusterQueue Never",
			queues:   pair,
			admitted: []held{{name: "a1", cq: "a", cores: 2, minute: 1}, {name: "b1", cq: "b", cores: 2, minute: 2}},
			policy:   Policy{ReclaimWithinCohort: ReclaimAny}, priority: 10, cores: 2,
			want: "1 workload(s) of the same ClusterQueue hold the quota, and withinClusterQueue is Never",
		},
		{
			name:     "reclaimWithinCohort LowerPriority spares equal priority",
			queues:   pair,
			admitted: []held{{name: "b1", cq: "b", cores: 2, minute: 1}, {name: "b2", cq: "b", cores: 2, minute: 2}},
			policy:   Policy{ReclaimWithinCohort: ReclaimLowerPriority}, cores: 2,
			want: "1 workload(s) of ClusterQueue b hold the quota but have equal or higher priority (reclaimWithinCohort LowerPriority)",
		},
		{
			name:     "reclaimWithinCohort Never",
			queues:   pair,
			admitted: []held{{name: "b1", cq: "b", cores: 2, minute: 1}, {name: "b2", cq: "b", cores: 2, minute: 2}},
			policy:   lower, priority: 10, cores: 2,
			want: "1 workload(s) of ClusterQueue b hold the quota, and reclaimWithinCohort is Never",
		},
		{
			name:   "maxPriorityThreshold protects the borrower",
			queues: trio,
			admitted: []held{{name: "mine", cq: "a", priority: 10, cores: 2, minute: 1},
				{name: "borrower", cq: "b", priority: 4, cores: 4, minute: 2}},
			policy: Policy{ReclaimWithinCohort: ReclaimLowerPriority,
				BorrowWithinCohort: BorrowWithinCohort{LowerPriority: true, MaxPriorityThreshold: ptr.To[int32](3)}},
			priority: 10, cores: 2,
			want: "1 workload(s) of ClusterQueue b hold the quota but have priority above borrowWithinCohort's maxPriorityThreshold 3",
		},
		{
			name:   "borrowWithinCohort spares equal priority",
			queues: trio,
			admitted: []held{{name: "mine", cq: "a", priority: 10, cores: 2, minute: 1},
				{name: "borrower", cq: "b", priority: 10, cores: 4, minute: 2}},
			policy:   Policy{ReclaimWithinCohort: ReclaimAny, BorrowWithinCohort: BorrowWithinCohort{LowerPriority: true}},
			priority: 10, cores: 2,
			want: "1 workload(s) of ClusterQueue b hold the quota but have equal or higher priority, and the workload would borrow in their place (borrowWithinCohort LowerPriority)",
		},
		{
			name:    "without borrowWithinCohort a sibling is not preempted to borrow",
			cohorts: nested,
			queues:  siblings,
			admitted: []held{{name: "b1", cq: "b", cores: 2, minute: 1}, {name: "b2", cq: "b", cores: 2, minute: 2},
				{name: "c1", cq: "c", cores: 2, minute: 3}, {name: "c2", cq: "c", cores: 2, minute: 4}},
			policy: Policy{ReclaimWithinCohort: ReclaimAny}, priority: 10, cores: 2,
			want: "1 workload(s) of ClusterQueue b hold the quota but the workload would borrow in their place and borrowWithinCohort is Never",
		},
		{
			name:    "without borrowWithinCohort, equal priority is named too",
			cohorts: nested,
			queues:  siblings,
			admitted: []held{{name: "b1", cq: "b", priority: 10, cores: 2, minute: 1}, {name: "b2", cq: "b", priority: 10, cores: 2, minute: 2},
				{name: "c1", cq: "c", cores: 2, minute: 3}, {name: "c2", cq: "c", cores: 2, minute: 4}},
			policy: Policy{ReclaimWithinCohort: ReclaimAny}, priority: 10, cores: 2,
			want: "1 workload(s) of ClusterQueue b hold the quota but have equal or higher priority, and the workload would borrow in their place (borrowWithinCohort Never; LowerPriority would not allow it either)",
		},
		{
			name:   "one line per queue and rule",
			queues: map[string]queue{"a": {cohort: "org", nominal: 3}, "b": {cohort: "org", nominal: 1}},
			admitted: []held{{name: "a1", cq: "a", priority: 5, cores: 1, minute: 1}, {name: "a2", cq: "a", priority: 5, cores: 1, minute: 2},
				{name: "b1", cq: "b", priority: 5, cores: 2, minute: 3}},
			policy: Policy{WithinClusterQueue: WithinLowerPriority, ReclaimWithinCohort: ReclaimLowerPriority}, priority: 5, cores: 4,
			want: "1 workload(s) of ClusterQueue b hold the quota but have equal or higher priority (reclaimWithinCohort LowerPriority); " +
				"2 workload(s) of the same ClusterQueue hold the quota but have equal or higher priority (withinClusterQueue LowerPriority)",
		},
		{
			name:     "it would not fit with every candidate gone",
			queues:   solo,
			admitted: []held{{name: "w", cq: "a", cores: 4, minute: 1}},
			policy:   lower, priority: 10, cores: 6,
			want: "it would still not fit with every candidate gone (1 workload(s) it may preempt)",
		},
		{
			// Q borrows within itself: nothing preemption could reach
			// holds a's quota.
			name:     "nothing to say when no workload is in reach",
			cohorts:  nested,
			queues:   map[string]queue{"a": {cohort: "P", nominal: 2}, "c": {cohort: "Q", nominal: 2}, "d": {cohort: "Q", nominal: 2}},
			admitted: []held{{name: "c1", cq: "c", cores: 4, minute: 1}},
			policy:   Policy{ReclaimWithinCohort: ReclaimAny}, cores: 4,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tree, admitted := buildNested(tt.cohorts, tt.queues, tt.admitted)
			before := usages(tree, tt.queues)
			pending := &Workload{Key: "pending", ClusterQueue: "a", Priority: tt.priority, Usage: cores(tt.cores),
				QueuedAt: epoch.Add(5 * time.Minute)}
			if got := Blocked(tree, pending, tt.policy, admitted); got != tt.want {
				t.Errorf("Blocked = %q, want %q", got, tt.want)
			}
			if after := usages(tree, tt.queues); !maps.Equal(before, after) {
				t.Errorf("usage %v after Blocked, %v before: the tree was not restored", after, before)
			}
		})
	}
}
