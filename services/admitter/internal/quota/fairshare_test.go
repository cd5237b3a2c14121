package quota

import (
	"math"
	"math/rand/v2"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

// shareOf reads one node's share off a Tree: a ClusterQueue (with extra
// usage) or, with cohort set, a Cohort.
type shareOf struct {
	node   string
	cohort bool
	extra  map[FR]int64
}

func (s shareOf) of(t *Tree) Share {
	if s.cohort {
		return t.CohortShare(s.node)
	}
	return t.ClusterQueueShare(s.node, s.extra)
}

func TestShare(t *testing.T) {
	gpuFR := FR{Flavor: "default", Resource: "example.com/gpu"}
	spotCPU := FR{Flavor: "spot", Resource: corev1.ResourceCPU}
	for _, tc := range []struct {
		name  string
		build func(*Tree)
		of    shareOf
		// want is Weighted; ratio the unweighted Ratio (-1: not checked).
		want      int64
		ratio     float64
		resource  corev1.ResourceName
		borrowing bool
	}{
		{
			// The reference's example: 5 over of 100 lendable.
			name: "5 of 100 lendable",
			build: func(t *Tree) {
				t.SetClusterQueue("a", "org", cpuOnly(50))
				t.SetClusterQueue("b", "org", cpuOnly(50))
				t.AddUsage("a", cpuAmount(55))
			},
			of: shareOf{node: "a"}, want: 50, ratio: 50, resource: corev1.ResourceCPU, borrowing: true,
		},
		{
			name: "flat cohort: the lender borrows nothing",
			build: func(t *Tree) {
				t.SetClusterQueue("a", "org", cpuOnly(10))
				t.SetClusterQueue("b", "org", cpuOnly(10))
				t.AddUsage("a", cpuAmount(15))
				t.AddUsage("b", cpuAmount(5))
			},
			of: shareOf{node: "b"}, want: 0, ratio: 0,
		},
		{
			name: "flat cohort: the borrower, 5 of 20",
			build: func(t *Tree) {
				t.SetClusterQueue("a", "org", cpuOnly(10))
				t.SetClusterQueue("b", "org", cpuOnly(10))
				t.AddUsage("a", cpuAmount(15))
			},
			of: shareOf{node: "a"}, want: 250, ratio: 250, resource: corev1.ResourceCPU, borrowing: true,
		},
		{
			name: "exactly at nominal quota is no borrowing",
			build: func(t *Tree) {
				t.SetClusterQueue("a", "org", cpuOnly(10))
				t.SetClusterQueue("b", "org", cpuOnly(10))
				t.AddUsage("a", cpuAmount(10))
			},
			of: shareOf{node: "a"}, want: 0, ratio: 0,
		},
		{
			name: "weight 1 of a pair",
			build: func(t *Tree) {
				t.SetClusterQueue("a", "org", cpuOnly(4))
				t.SetClusterQueue("b", "org", cpuOnly(4))
				t.SetCohort("org", "", cpuOnly(12))
				t.SetClusterQueueWeight("b", 3)
				t.AddUsage("a", cpuAmount(10))
				t.AddUsage("b", cpuAmount(10))
			},
			of: shareOf{node: "a"}, want: 300, ratio: 300, resource: corev1.ResourceCPU, borrowing: true,
		},
		{
			name: "weight 3 of the same pair",
			build: func(t *Tree) {
				t.SetClusterQueue("a", "org", cpuOnly(4))
				t.SetClusterQueue("b", "org", cpuOnly(4))
				t.SetCohort("org", "", cpuOnly(12))
				t.SetClusterQueueWeight("b", 3)
				t.AddUsage("a", cpuAmount(10))
				t.AddUsage("b", cpuAmount(10))
			},
			of: shareOf{node: "b"}, want: 100, ratio: 300, resource: corev1.ResourceCPU, borrowing: true,
		},
		{
			name: "weight 3 rounds up",
			build: func(t *Tree) {
				t.SetClusterQueue("a", "org", cpuOnly(10))
				t.SetClusterQueue("b", "org", cpuOnly(10))
				t.SetClusterQueueWeight("a", 3)
				t.AddUsage("a", cpuAmount(15))
			},
			of: shareOf{node: "a"}, want: 84, ratio: 250, resource: corev1.ResourceCPU, borrowing: true, // 250/3 = 83.3
		},
		{
			name: "weight 0 while borrowing is infinite",
			build: func(t *Tree) {
				t.SetClusterQueue("a", "org", cpuOnly(10))
				t.SetClusterQueue("b", "org", cpuOnly(10))
				t.SetClusterQueueWeight("a", 0)
				t.AddUsage("a", cpuAmount(11))
			},
			of: shareOf{node: "a"}, want: math.MaxInt64, ratio: 50, resource: corev1.ResourceCPU, borrowing: true,
		},
		{
			name: "weight 0 without borrowing is 0",
			build: func(t *Tree) {
				t.SetClusterQueue("a", "org", cpuOnly(10))
				t.SetClusterQueue("b", "org", cpuOnly(10))
				t.SetClusterQueueWeight("a", 0)
				t.AddUsage("a", cpuAmount(10))
			},
			of: shareOf{node: "a"}, want: 0, ratio: 0,
		},
		{
			name: "a tiny weight saturates",
			build: func(t *Tree) {
				t.SetClusterQueue("a", "org", cpuOnly(1))
				t.SetClusterQueueWeight("a", 1e-9)
				t.AddUsage("a", cpuAmount(1e10))
			},
			of: shareOf{node: "a"}, want: math.MaxInt64, ratio: -1, resource: corev1.ResourceCPU, borrowing: true,
		},
		{
			name: "a pending workload's usage is counted",
			build: func(t *Tree) {
				t.SetClusterQueue("a", "org", cpuOnly(10))
				t.SetClusterQueue("b", "org", cpuOnly(10))
				t.AddUsage("a", cpuAmount(8))
			},
			of: shareOf{node: "a", extra: cpuAmount(4)}, want: 100, ratio: 100, resource: corev1.ResourceCPU, borrowing: true,
		},
		{
			name: "a queue without cohort has no share",
			build: func(t *Tree) {
				t.SetClusterQueue("a", "", cpuOnly(10))
				t.AddUsage("a", cpuAmount(10))
			},
			of: shareOf{node: "a", extra: cpuAmount(5)}, want: 0, ratio: 0,
		},
		{
			name: "nested: a queue is measured against its cohort",
			build: func(t *Tree) {
				t.SetCohort("team", "org", nil)
				t.SetClusterQueue("a", "team", cpuOnly(10))
				t.SetClusterQueue("b", "team", cpuOnly(10))
				t.SetClusterQueue("d", "org", cpuOnly(20))
				t.AddUsage("a", cpuAmount(25))
			},
			// team could hand a child the whole root pool, 40.
			of: shareOf{node: "a"}, want: 375, ratio: 375, resource: corev1.ResourceCPU, borrowing: true,
		},
		{
			name: "nested: the sub-cohort borrows from the root",
			build: func(t *Tree) {
				t.SetCohort("team", "org", nil)
				t.SetClusterQueue("a", "team", cpuOnly(10))
				t.SetClusterQueue("b", "team", cpuOnly(10))
				t.SetClusterQueue("d", "org", cpuOnly(20))
				t.AddUsage("a", cpuAmount(25))
			},
			of: shareOf{node: "team", cohort: true}, want: 125, ratio: 125, resource: corev1.ResourceCPU, borrowing: true,
		},
		{
			name: "nested: the root has no share",
			build: func(t *Tree) {
				t.SetCohort("team", "org", nil)
				t.SetClusterQueue("a", "team", cpuOnly(10))
				t.SetClusterQueue("d", "org", cpuOnly(20))
				t.AddUsage("a", cpuAmount(25))
			},
			of: shareOf{node: "org", cohort: true}, want: 0, ratio: 0,
		},
		{
			name: "nested: a sub-cohort's weight",
			build: func(t *Tree) {
				t.SetCohort("team", "org", nil)
				t.SetCohortWeight("team", 0.5)
				t.SetClusterQueue("a", "team", cpuOnly(10))
				t.SetClusterQueue("d", "org", cpuOnly(30))
				t.AddUsage("a", cpuAmount(14))
			},
			of: shareOf{node: "team", cohort: true}, want: 200, ratio: 100, resource: corev1.ResourceCPU, borrowing: true,
		},
		{
			name: "a lendingLimit shrinks what the cohort lends",
			build: func(t *Tree) {
				t.SetClusterQueue("a", "org", cpuQuota(10, nil, limit(4)))
				t.SetClusterQueue("b", "org", cpuOnly(10))
				t.AddUsage("b", cpuAmount(14))
			},
			// The pool is a's 4 and b's 10: 4 of 14.
			of: shareOf{node: "b"}, want: 286, ratio: 4000.0 / 14, resource: corev1.ResourceCPU, borrowing: true,
		},
		{
			name: "what a sub-cohort's lendingLimit keeps counts for its own queues",
			build: func(t *Tree) {
				t.SetCohort("team", "org", cpuQuota(0, nil, limit(4)))
				t.SetClusterQueue("a", "team", cpuOnly(10))
				t.SetClusterQueue("d", "org", cpuOnly(10))
				t.AddUsage("a", cpuAmount(15))
			},
			// team keeps 6 and could take the root's 14: 5 of 20.
			of: shareOf{node: "a"}, want: 250, ratio: 250, resource: corev1.ResourceCPU, borrowing: true,
		},
		{
			name: "a sub-cohort's borrowingLimit caps what its queues are measured against",
			build: func(t *Tree) {
				t.SetCohort("team", "org", cpuQuota(0, limit(2), nil))
				t.SetClusterQueue("a", "team", cpuOnly(10))
				t.SetClusterQueue("d", "org", cpuOnly(10))
				t.AddUsage("a", cpuAmount(11))
			},
			// team may hold at most its 10 and 2 more: 1 of 12.
			of: shareOf{node: "a"}, want: 84, ratio: 1000.0 / 12, resource: corev1.ResourceCPU, borrowing: true,
		},
		{
			name: "flavors of one resource are summed",
			build: func(t *Tree) {
				q := map[FR]Quota{cpuFR: {Nominal: 5}, spotCPU: {Nominal: 5}}
				t.SetClusterQueue("a", "org", q)
				t.SetClusterQueue("b", "org", q)
				t.AddUsage("a", map[FR]int64{cpuFR: 7, spotCPU: 8})
			},
			// 2 + 3 over, of 10 + 10.
			of: shareOf{node: "a"}, want: 250, ratio: 250, resource: corev1.ResourceCPU, borrowing: true,
		},
		{
			name: "the dominant resource counts",
			build: func(t *Tree) {
				q := map[FR]Quota{cpuFR: {Nominal: 10}, memFR: {Nominal: 100}}
				t.SetClusterQueue("a", "org", q)
				t.SetClusterQueue("b", "org", q)
				t.AddUsage("a", map[FR]int64{cpuFR: 11, memFR: 160})
			},
			// cpu 1 of 20 = 50, memory 60 of 200 = 300.
			of: shareOf{node: "a"}, want: 300, ratio: 300, resource: corev1.ResourceMemory, borrowing: true,
		},
		{
			name: "borrowing only what nobody lends has ratio 0",
			build: func(t *Tree) {
				t.SetClusterQueue("a", "org", map[FR]Quota{cpuFR: {Nominal: 10}, gpuFR: {Nominal: 2}})
				t.SetClusterQueue("b", "org", cpuOnly(10))
				t.AddUsage("a", map[FR]int64{gpuFR: 2})
				// The gpu quota goes, the workloads holding it stay.
				t.SetClusterQueue("a", "org", map[FR]Quota{cpuFR: {Nominal: 10}, gpuFR: {Nominal: 0}})
			},
			of: shareOf{node: "a"}, want: 0, ratio: 0, borrowing: true,
		},
		{
			name: "weight 0 borrowing what nobody lends is infinite",
			build: func(t *Tree) {
				t.SetClusterQueue("a", "org", map[FR]Quota{cpuFR: {Nominal: 10}, gpuFR: {Nominal: 2}})
				t.SetClusterQueue("b", "org", cpuOnly(10))
				t.AddUsage("a", map[FR]int64{gpuFR: 2})
				t.SetClusterQueue("a", "org", map[FR]Quota{cpuFR: {Nominal: 10}, gpuFR: {Nominal: 0}})
				t.SetClusterQueueWeight("a", 0)
			},
			of: shareOf{node: "a"}, want: math.MaxInt64, ratio: 0, borrowing: true,
		},
		{
			name: "below a loop of Cohorts there is no share",
			build: func(t *Tree) {
				t.SetCohort("p", "q", nil)
				t.SetCohort("q", "p", nil)
				t.SetClusterQueue("a", "p", cpuOnly(10))
				t.SetClusterQueue("b", "p", cpuOnly(10))
				t.AddUsage("a", cpuAmount(15))
			},
			of: shareOf{node: "a"}, want: 0, ratio: 0,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tree := NewTree()
			tc.build(tree)
			got := tc.of.of(tree)
			if w := got.Weighted(); w != tc.want {
				t.Errorf("Weighted() = %d, want %d (share %+v)", w, tc.want, got)
			}
			if tc.ratio >= 0 && math.Abs(got.Ratio-tc.ratio) > 1e-9 {
				t.Errorf("Ratio = %v, want %v", got.Ratio, tc.ratio)
			}
			if got.Resource != tc.resource {
				t.Errorf("Resource = %q, want %q", got.Resource, tc.resource)
			}
			if got.Borrowing != tc.borrowing {
				t.Errorf("Borrowing = %v, want %v", got.Borrowing, tc.borrowing)
			}
		})
	}
}

// TestWeightsOutliveRebuilds: weights stay with their nodes across
// structural changes, an implicit Cohort has the default, and a deleted
// Cohort loses its weight with its spec.
func TestWeightsOutliveRebuilds(t *testing.T) {
	tree := NewTree()
	tree.SetCohort("org", "", nil)
	tree.SetCohort("team", "org", nil)
	tree.SetCohortWeight("team", 2)
	tree.SetClusterQueue("a", "team", cpuOnly(10))
	tree.SetClusterQueueWeight("a", 4)
	tree.SetClusterQueue("d", "org", cpuOnly(10))
	tree.SetClusterQueue("e", "org", cpuOnly(10)) // a rebuild
	tree.AddUsage("a", cpuAmount(12))

	weights := func() (float64, float64) {
		return tree.ClusterQueueShare("a", nil).Weight, tree.CohortShare("team").Weight
	}
	if a, team := weights(); a != 4 || team != 2 {
		t.Fatalf("weights after rebuilds: a %v, team %v; want 4, 2", a, team)
	}
	tree.SetCohortWeight("team", -1)
	if _, team := weights(); team != DefaultWeight {
		t.Fatalf("a negative weight: team %v, want the default", team)
	}
	tree.SetCohortWeight("team", 2)
	tree.DeleteCohort("team") // a lives on under an implicit team
	if a, team := weights(); a != 4 || team != DefaultWeight {
		t.Fatalf("after deleting team: a %v, team %v; want 4, the default", a, team)
	}
	tree.SetCohort("team", "org", nil)
	if _, team := weights(); team != DefaultWeight {
		t.Fatalf("team set again without a weight: %v, want the default", team)
	}
	tree.SetClusterQueueWeight("unknown", 3) // ignored
	if tree.HasClusterQueue("unknown") {
		t.Fatal("setting a weight made a ClusterQueue")
	}
}

func TestCompareShares(t *testing.T) {
	finite := func(ratio, weight float64) Share {
		return Share{Ratio: ratio, Weight: weight, Borrowing: ratio > 0}
	}
	infinite := func(ratio float64) Share { return Share{Ratio: ratio, Borrowing: true} }
	for _, tc := range []struct {
		name string
		a, b Share
		want int
	}{
		{"weighted values compare", finite(300, 3), finite(150, 1), -1},
		{"equal weighted values", finite(300, 3), finite(100, 1), 0},
		{"none borrow", finite(0, 1), finite(0, 0), 0},
		{"infinite above finite", infinite(10), finite(1e9, 1e-9), 1},
		{"finite below infinite", finite(1e9, 1e-9), infinite(10), -1},
		{"infinite by unweighted ratio", infinite(10), infinite(20), -1},
		{"infinite and equal", infinite(0), infinite(0), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := CompareShares(tc.a, tc.b); got != tc.want {
				t.Fatalf("CompareShares(%+v, %+v) = %d, want %d", tc.a, tc.b, got, tc.want)
			}
		})
	}
}

func TestWeightOf(t *testing.T) {
	q := func(s string) *resource.Quantity { v := resource.MustParse(s); return &v }
	for _, tc := range []struct {
		name string
		fs   *v1alpha1.FairSharing
		want float64
	}{
		{"no fairSharing", nil, 1},
		{"no weight", &v1alpha1.FairSharing{}, 1},
		{"zero", &v1alpha1.FairSharing{Weight: q("0")}, 0},
		{"a tenth", &v1alpha1.FairSharing{Weight: q("0.1")}, 0.1},
		{"milli", &v1alpha1.FairSharing{Weight: q("1500m")}, 1.5},
		{"nano", &v1alpha1.FairSharing{Weight: q("1n")}, 1e-9},
		{"three", &v1alpha1.FairSharing{Weight: q("3")}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := WeightOf(tc.fs); got != tc.want {
				t.Fatalf("WeightOf = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestShareRandomOperations: over the fuzz target's random operations,
// every node's unweighted share equals one computed from scratch by the
// refTree, so what rebuild keeps per Cohort (childLendable) is never
// stale after a structural change.
func TestShareRandomOperations(t *testing.T) {
	rng := rand.New(rand.NewPCG(26, 1))
	for range 20 {
		data := make([]byte, 1200)
		for i := range data {
			data[i] = byte(rng.UintN(256))
		}
		h := &harness{tb: t, tree: NewTree(), ref: newRefTree()}
		in := &opReader{data: data}
		for n := 0; n < maxFuzzOps && in.more(); n++ {
			h.step(in)
			for _, q := range fuzzQueues {
				h.expectRatio(refID{name: q}, h.tree.ClusterQueueShare(q, nil))
			}
			for _, c := range fuzzCohorts {
				h.expectRatio(refID{cohort: true, name: c}, h.tree.CohortShare(c))
			}
		}
	}
}

func (h *harness) expectRatio(id refID, got Share) {
	h.tb.Helper()
	if want := h.ref.shareRatio(id); math.Abs(got.Ratio-want) > 1e-9 {
		h.fatalf("share of %s: ratio %v, want %v (%+v)", id, got.Ratio, want, got)
	}
}

// shareRatio is the unweighted share of id from the definitions: per
// resource, usage beyond subtree quota over the FRs the node counts, per
// 1000 of the parent's potential available over the FRs the root counts.
func (r *refTree) shareRatio(id refID) float64 {
	if !r.exists(id) {
		return 0
	}
	if (id.cohort && r.cohortCycle(id.name) != nil) || (!id.cohort && r.cqCycle(id.name) != nil) {
		return 0
	}
	parent, ok := r.parent(id)
	if !ok {
		return 0
	}
	root := parent
	for p, ok := r.parent(root); ok; p, ok = r.parent(root) {
		root = p
	}
	over, lendable := map[corev1.ResourceName]int64{}, map[corev1.ResourceName]int64{}
	for _, fr := range fuzzFRs {
		if r.counts(id, fr) {
			over[fr.Resource] += max(0, r.usageOf(id, fr)-r.subtree(id, fr))
		}
		if r.counts(root, fr) {
			lendable[fr.Resource] += max(0, r.potential(parent, fr))
		}
	}
	var ratio float64
	for res, o := range over {
		if lendable[res] > 0 {
			ratio = max(ratio, float64(o)*1000/float64(lendable[res]))
		}
	}
	return ratio
}

// counts reports whether fr is in id's subtree quota: the node or one of
// the nodes below it declares a quota (maybe 0) for it.
func (r *refTree) counts(id refID, fr FR) bool {
	if !id.cohort {
		_, ok := r.cqs[id.name].quotas[fr]
		return ok
	}
	if _, ok := r.cohorts[id.name].quotas[fr]; ok {
		return true
	}
	for _, c := range r.children(id.name) {
		if r.counts(c, fr) {
			return true
		}
	}
	return false
}
