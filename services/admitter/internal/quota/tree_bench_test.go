package quota

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// BenchmarkTreeAdmit times one admission's quota work in a cohort tree:
// a fit check of a two-resource request, then taking the usage and giving
// it back. 50 ClusterQueues share quota in 5 cohorts, which hang off
// chains of depth-1 further cohorts: the cost follows the depth, not the
// number of queues.
func BenchmarkTreeAdmit(b *testing.B) {
	memFR := FR{Flavor: "default", Resource: corev1.ResourceMemory}
	request := map[FR]int64{cpuFR: 500, memFR: 1 << 30}
	for _, depth := range []int{1, 3, 6} {
		b.Run(fmt.Sprintf("depth-%d", depth), func(b *testing.B) {
			t := benchTree(depth, memFR)
			names := make([]string, 50)
			for i := range names {
				names[i] = fmt.Sprintf("cq-%d", i)
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				cq := names[i%len(names)]
				if !t.Fits(cq, request) {
					b.Fatalf("%s: the request does not fit an idle tree", cq)
				}
				t.AddUsage(cq, request)
				t.RemoveUsage(cq, request)
			}
		})
	}
}

// benchTree builds 50 ClusterQueues in 5 cohorts, each cohort at the end
// of a chain of depth cohorts up to one root; every queue lends half its
// quota and may borrow as much again.
func benchTree(depth int, memFR FR) *Tree {
	t := NewTree()
	quotas := map[FR]Quota{
		cpuFR: {Nominal: 10_000, BorrowingLimit: limit(10_000), LendingLimit: limit(5_000)},
		memFR: {Nominal: 64 << 30, BorrowingLimit: limit(64 << 30), LendingLimit: limit(32 << 30)},
	}
	for c := range 5 {
		parent := "root"
		for d := depth - 1; d >= 1; d-- {
			name := fmt.Sprintf("co-%d-%d", c, d)
			t.SetCohort(name, parent, map[FR]Quota{cpuFR: {Nominal: 1_000}})
			parent = name
		}
		team := fmt.Sprintf("team-%d", c)
		t.SetCohort(team, parent, nil)
		for q := range 10 {
			t.SetClusterQueue(fmt.Sprintf("cq-%d", c*10+q), team, quotas)
		}
	}
	return t
}
