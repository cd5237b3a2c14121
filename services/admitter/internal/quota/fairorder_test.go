package quota

import (
	"math/rand/v2"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestPathShares(t *testing.T) {
	memFR := FR{Flavor: "default", Resource: corev1.ResourceMemory}
	cpuAndMemory := func(cpu, memory int64) map[FR]Quota {
		return map[FR]Quota{cpuFR: {Nominal: cpu}, memFR: {Nominal: memory}}
	}
	for _, tc := range []struct {
		name    string
		build   func(*Tree)
		cq      string
		request map[FR]int64
		// want lists, per node from the queue up, its name, Weighted share
		// and Borrows.
		want []wantPathShare
	}{
		{
			name: "flat cohort: the queue alone, 5 over of 20",
			build: func(t *Tree) {
				t.SetClusterQueue("a", "org", cpuOnly(10))
				t.SetClusterQueue("b", "org", cpuOnly(10))
				t.AddUsage("a", cpuAmount(5))
			},
			cq: "a", request: cpuAmount(10),
			want: []wantPathShare{{"a", 250, true}},
		},
		{
			name: "flat cohort: within quota",
			build: func(t *Tree) {
				t.SetClusterQueue("a", "org", cpuOnly(10))
				t.SetClusterQueue("b", "org", cpuOnly(10))
			},
			cq: "a", request: cpuAmount(10),
			want: []wantPathShare{{"a", 0, false}},
		},
		{
			// q keeps 6 of its 10 (lendingLimit 4): of a request of 12,
			// 6 reach dept, whose pool is the 4 q lends: dept borrows 2 of
			// what org could lend it, 10.
			name: "nested: a lendingLimit keeps part of the request below the cohort",
			build: func(t *Tree) {
				t.SetCohort("org", "", cpuOnly(6))
				t.SetCohort("dept", "org", nil)
				t.SetClusterQueue("q", "dept", cpuQuota(10, nil, limit(4)))
			},
			cq: "q", request: cpuAmount(12),
			want: []wantPathShare{{"q", 200, true}, {"dept", 200, true}},
		},
		{
			name: "nested: what stays local does not reach the cohort",
			build: func(t *Tree) {
				t.SetCohort("org", "", cpuOnly(6))
				t.SetCohort("dept", "org", nil)
				t.SetClusterQueue("q", "dept", cpuQuota(10, nil, limit(4)))
			},
			cq: "q", request: cpuAmount(8),
			want: []wantPathShare{{"q", 0, false}, {"dept", 0, false}},
		},
		{
			// a borrows 8 of the 10 memory the pool could lend it, and asks
			// for cpu within its quota: it has a share, but does not borrow
			// what it asks for.
			name: "borrowing only what the request does not ask for",
			build: func(t *Tree) {
				t.SetClusterQueue("a", "org", cpuAndMemory(4, 0))
				t.SetClusterQueue("lender", "org", cpuAndMemory(4, 10))
				t.AddUsage("a", map[FR]int64{memFR: 8})
			},
			cq: "a", request: cpuAmount(2),
			want: []wantPathShare{{"a", 800, false}},
		},
		{
			name:  "a queue without cohort has no path",
			build: func(t *Tree) { t.SetClusterQueue("a", "", cpuOnly(10)) },
			cq:    "a", request: cpuAmount(20),
		},
		{
			name:  "an unknown queue has no path",
			build: func(t *Tree) {},
			cq:    "a", request: cpuAmount(20),
		},
		{
			name: "a queue below a loop of cohorts has no path",
			build: func(t *Tree) {
				t.SetCohort("x", "y", cpuOnly(5))
				t.SetCohort("y", "x", cpuOnly(5))
				t.SetClusterQueue("a", "x", cpuOnly(1))
			},
			cq: "a", request: cpuAmount(2),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tree := NewTree()
			tc.build(tree)
			dst := []PathShare{{Node: "kept"}}
			got := tree.PathShares(tc.cq, tc.request, dst)
			if len(got) == 0 || got[0].Node != "kept" {
				t.Fatalf("dst's own element is gone: %+v", got)
			}
			var gotWant []wantPathShare
			for _, ps := range got[1:] {
				gotWant = append(gotWant, wantPathShare{ps.Node, ps.Share.Weighted(), ps.Borrows})
			}
			if !slices.Equal(gotWant, tc.want) {
				t.Fatalf("PathShares = %v, want %v", gotWant, tc.want)
			}
		})
	}
}

type wantPathShare struct {
	node     string
	weighted int64
	borrows  bool
}

// TestPathSharesRandomOperations: over the fuzz target's random
// operations, PathShares with a random request equals what the Tree
// reports once the request is added to the queue's usage (and taken off
// again): ClusterQueueShare and CohortShare along the path, and borrowing
// read off the usages and subtree quotas.
func TestPathSharesRandomOperations(t *testing.T) {
	rng := rand.New(rand.NewPCG(26, 2))
	paths := 0
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
				request := map[FR]int64{}
				for _, fr := range fuzzFRs {
					request[fr] = int64(rng.IntN(12))
				}
				got := h.tree.PathShares(q, request, nil)
				if want := pathSharesByAdding(h.tree, q, request); !slices.Equal(got, want) {
					h.fatalf("PathShares(%s, %v) =\n  %+v\nwant\n  %+v", q, request, got, want)
				}
				paths += len(got)
			}
		}
	}
	if paths < 1000 {
		t.Fatalf("checked %d path entries, want at least 1000", paths)
	}
}

// pathSharesByAdding is PathShares read off tree with request added to
// cq's usage for the time of the reading.
func pathSharesByAdding(tree *Tree, cq string, request map[FR]int64) []PathShare {
	if !tree.HasClusterQueue(cq) || tree.ClusterQueueCohort(cq) == "" || tree.Cycle(cq) != nil {
		return nil
	}
	tree.AddUsage(cq, request)
	defer tree.RemoveUsage(cq, request)
	borrows := func(over func(FR) bool) bool {
		for fr, v := range request {
			if v > 0 && over(fr) {
				return true
			}
		}
		return false
	}
	out := []PathShare{{
		Node:    cq,
		Share:   tree.ClusterQueueShare(cq, nil),
		Borrows: borrows(func(fr FR) bool { return tree.Usage(cq, fr) > tree.Nominal(cq, fr) }),
	}}
	for c := tree.ClusterQueueCohort(cq); tree.CohortParent(c) != ""; c = tree.CohortParent(c) {
		out = append(out, PathShare{
			Node:    c,
			Share:   tree.CohortShare(c),
			Borrows: borrows(func(fr FR) bool { return tree.CohortUsage(c, fr) > tree.CohortSubtreeQuota(c, fr) }),
		})
	}
	return out
}
