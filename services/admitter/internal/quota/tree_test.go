package quota

import (
	"math"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

var (
	cpuFR = FR{Flavor: "default", Resource: corev1.ResourceCPU}
	memFR = FR{Flavor: "default", Resource: corev1.ResourceMemory}
)

func limit(v int64) *int64 { return &v }

// cpuQuota is a single cpu quota with optional limits.
func cpuQuota(nominal int64, bl, ll *int64) map[FR]Quota {
	return map[FR]Quota{cpuFR: {Nominal: nominal, BorrowingLimit: bl, LendingLimit: ll}}
}

func cpuOnly(nominal int64) map[FR]Quota { return cpuQuota(nominal, nil, nil) }

func cpuAmount(v int64) map[FR]int64 { return map[FR]int64{cpuFR: v} }

// probe reads one figure off a Tree and says what it should be.
type probe struct {
	what string
	got  func(*Tree) any
	want any
}

func wantAvailable(cq string, want int64) probe {
	return probe{"Available(" + cq + ")", func(t *Tree) any { return t.Available(cq, cpuFR) }, want}
}

func wantPotential(cq string, want int64) probe {
	return probe{"PotentialAvailable(" + cq + ")", func(t *Tree) any { return t.PotentialAvailable(cq, cpuFR) }, want}
}

func wantUsage(cq string, want int64) probe {
	return probe{"Usage(" + cq + ")", func(t *Tree) any { return t.Usage(cq, cpuFR) }, want}
}

func wantBorrowed(cq string, want int64) probe {
	return probe{"Borrowed(" + cq + ")", func(t *Tree) any { return t.Borrowed(cq, cpuFR) }, want}
}

func wantLent(cq string, want int64) probe {
	return probe{"Lent(" + cq + ")", func(t *Tree) any { return t.Lent(cq, cpuFR) }, want}
}

func wantCohortUsage(cohort string, want int64) probe {
	return probe{"CohortUsage(" + cohort + ")", func(t *Tree) any { return t.CohortUsage(cohort, cpuFR) }, want}
}

func wantCohortQuota(cohort string, want int64) probe {
	return probe{"CohortSubtreeQuota(" + cohort + ")", func(t *Tree) any { return t.CohortSubtreeQuota(cohort, cpuFR) }, want}
}

func wantCohortLent(cohort string, want int64) probe {
	return probe{"CohortLent(" + cohort + ")", func(t *Tree) any { return t.CohortLent(cohort, cpuFR) }, want}
}

func wantFits(cq string, request map[FR]int64, want bool) probe {
	return probe{"Fits(" + cq + ")", func(t *Tree) any { return t.Fits(cq, request) }, want}
}

func wantBorrowing(cq string, request int64, want bool) probe {
	return probe{"Borrowing(" + cq + ")", func(t *Tree) any { return t.Borrowing(cq, cpuFR, request) }, want}
}

func wantCycle(cq string, names ...string) probe {
	return probe{"Cycle(" + cq + ")", func(t *Tree) any { return t.Cycle(cq) }, names}
}

// wantCohortExists looks inside the Tree: an implicit cohort without
// children has no figures that would tell it apart from a missing one.
func wantCohortExists(cohort string, want bool) probe {
	return probe{"cohort " + cohort + " exists", func(t *Tree) any { _, ok := t.cohorts[cohort]; return ok }, want}
}

type stage struct {
	do   func(t *Tree)
	want []probe
}

func TestTree(t *testing.T) {
	tests := []struct {
		name   string
		stages []stage
	}{
		{
			name: "lone queue has its nominal quota, whatever limits it carries",
			stages: []stage{{
				do: func(t *Tree) {
					t.SetClusterQueue("A", "", cpuQuota(10, limit(2), limit(3)))
					t.AddUsage("A", cpuAmount(4))
				},
				want: []probe{
					wantAvailable("A", 6), wantPotential("A", 10), wantUsage("A", 4),
					wantFits("A", cpuAmount(6), true), wantFits("A", cpuAmount(7), false),
					wantBorrowing("A", 7, false), wantBorrowed("A", 0), wantLent("A", 0),
				},
			}, {
				do:   func(t *Tree) { t.AddUsage("A", cpuAmount(6)) },
				want: []probe{wantAvailable("A", 0), wantFits("A", cpuAmount(1), false), wantFits("A", nil, true)},
			}, {
				do:   func(t *Tree) { t.RemoveUsage("A", cpuAmount(25)) },
				want: []probe{wantUsage("A", 0), wantAvailable("A", 10)},
			}},
		},
		{
			name: "two queues in a cohort borrow each other's idle quota",
			stages: []stage{{
				do: func(t *Tree) {
					t.SetClusterQueue("A", "R", cpuOnly(10))
					t.SetClusterQueue("B", "R", cpuOnly(6))
					t.AddUsage("A", cpuAmount(12))
				},
				want: []probe{
					wantCohortQuota("R", 16), wantCohortUsage("R", 12),
					wantAvailable("A", 4), wantAvailable("B", 4),
					wantPotential("A", 16), wantPotential("B", 16),
					wantBorrowed("A", 2), wantBorrowed("B", 0),
					wantBorrowing("A", 1, true), wantBorrowing("B", 4, false), wantBorrowing("B", 7, true),
					// B's 6 minus the 4 the pool has free: A must be using 2 of them.
					wantLent("B", 2), wantLent("A", 0),
					wantFits("B", cpuAmount(4), true), wantFits("B", cpuAmount(5), false),
				},
			}},
		},
		{
			name: "borrowing limit caps what a queue takes beyond its own quota",
			stages: []stage{{
				do: func(t *Tree) {
					t.SetClusterQueue("A", "R", cpuQuota(10, limit(3), nil))
					t.SetClusterQueue("B", "R", cpuOnly(10))
				},
				want: []probe{wantAvailable("A", 13), wantPotential("A", 13), wantAvailable("B", 20), wantPotential("B", 20)},
			}, {
				do:   func(t *Tree) { t.AddUsage("A", cpuAmount(12)) },
				want: []probe{wantAvailable("A", 1), wantAvailable("B", 8), wantBorrowed("A", 2), wantLent("B", 2)},
			}, {
				do:   func(t *Tree) { t.AddUsage("B", cpuAmount(8)) },
				want: []probe{wantAvailable("A", 0), wantAvailable("B", 0), wantCohortUsage("R", 20)},
			}},
		},
		{
			// A keeps 10 − 4 = 6 local; R's pool is A's 4 plus B's 10.
			name: "lending limit keeps quota local",
			stages: []stage{{
				do: func(t *Tree) {
					t.SetClusterQueue("A", "R", cpuQuota(10, nil, limit(4)))
					t.SetClusterQueue("B", "R", cpuOnly(10))
					t.AddUsage("A", cpuAmount(8))
				},
				want: []probe{
					wantCohortQuota("R", 14), wantCohortUsage("R", 2),
					// A: nothing local left, 12 free in R.
					wantAvailable("A", 12), wantAvailable("B", 12),
					// B never reaches A's local 6.
					wantPotential("A", 20), wantPotential("B", 14),
				},
			}, {
				do: func(t *Tree) { t.AddUsage("B", cpuAmount(12)) },
				want: []probe{
					wantCohortUsage("R", 14),
					wantAvailable("A", 0), wantAvailable("B", 0),
					wantLent("A", 2), wantLent("B", 0), wantBorrowed("B", 2),
				},
			}, {
				// A's cap from R is (10−6) − (8−6) + 1 = 3, but R has 0 free.
				do:   func(t *Tree) { t.SetClusterQueue("A", "R", cpuQuota(10, limit(1), limit(4))) },
				want: []probe{wantAvailable("A", 0), wantAvailable("B", 0), wantPotential("A", 11)},
			}, {
				do:   func(t *Tree) { t.RemoveUsage("B", cpuAmount(12)) },
				want: []probe{wantCohortUsage("R", 2), wantAvailable("A", 3), wantAvailable("B", 12), wantLent("A", 0)},
			}},
		},
		{
			// P: 6 own + A's 5 + B's 5 = 16, keeps 16 − 10 = 6 local and
			// may hold at most 10 + 2 in R. R: 4 own + P's 10 + C's 10 = 24.
			name: "nested cohort with its own shared pool and limits",
			stages: []stage{{
				do: func(t *Tree) {
					t.SetCohort("R", "", cpuOnly(4))
					t.SetCohort("P", "R", cpuQuota(6, limit(2), limit(10)))
					t.SetClusterQueue("A", "P", cpuOnly(5))
					t.SetClusterQueue("B", "P", cpuOnly(5))
					t.SetClusterQueue("C", "R", cpuOnly(10))
				},
				want: []probe{
					wantCohortQuota("P", 16), wantCohortQuota("R", 24),
					wantAvailable("A", 18), wantPotential("A", 18),
					wantAvailable("C", 24), wantPotential("C", 24),
				},
			}, {
				do: func(t *Tree) { t.AddUsage("A", cpuAmount(15)) },
				want: []probe{
					// P holds 15 − 6 = 9 in R, 3 short of its cap of 12.
					wantCohortUsage("P", 15), wantCohortUsage("R", 9),
					wantAvailable("A", 3), wantAvailable("B", 3), wantAvailable("C", 15),
					wantCohortLent("P", 0), wantBorrowed("A", 10),
				},
			}, {
				do: func(t *Tree) { t.AddUsage("C", cpuAmount(15)) },
				want: []probe{
					wantCohortUsage("R", 24), wantAvailable("A", 0), wantAvailable("C", 0),
					// C's 15: its own 10, R's 4 and 1 of P's lendable 10.
					wantCohortLent("P", 1), wantLent("C", 0), wantBorrowed("C", 5),
				},
			}},
		},
		{
			name: "potential available with borrowing limits",
			stages: []stage{{
				do: func(t *Tree) {
					t.SetClusterQueue("A", "R", cpuQuota(2, limit(3), nil))
					t.SetClusterQueue("B", "R", cpuQuota(10, limit(0), limit(4)))
					t.AddUsage("B", cpuAmount(10))
				},
				want: []probe{
					// R's pool: A's 2 + B's 4 = 6.
					wantCohortQuota("R", 6),
					wantPotential("A", 5), wantPotential("B", 10),
					wantAvailable("A", 2), wantAvailable("B", 0),
				},
			}},
		},
		{
			name: "queue joins and leaves a cohort with its usage",
			stages: []stage{{
				do: func(t *Tree) {
					t.SetClusterQueue("A", "", cpuOnly(10))
					t.SetClusterQueue("B", "R", cpuOnly(10))
					t.AddUsage("A", cpuAmount(8))
				},
				want: []probe{wantAvailable("A", 2), wantAvailable("B", 10), wantCohortUsage("R", 0)},
			}, {
				do: func(t *Tree) {
					t.SetClusterQueue("A", "R", cpuOnly(10))
					t.AddUsage("A", cpuAmount(4))
				},
				want: []probe{
					wantUsage("A", 12), wantCohortUsage("R", 12), wantCohortQuota("R", 20),
					wantAvailable("A", 8), wantAvailable("B", 8), wantBorrowed("A", 2),
				},
			}, {
				do: func(t *Tree) { t.SetClusterQueue("A", "", cpuOnly(10)) },
				want: []probe{
					wantUsage("A", 12), wantAvailable("A", 0), wantBorrowed("A", 0), wantBorrowing("A", 5, false),
					wantCohortUsage("R", 0), wantCohortQuota("R", 10), wantAvailable("B", 10),
				},
			}, {
				do:   func(t *Tree) { t.RemoveUsage("A", cpuAmount(12)) },
				want: []probe{wantAvailable("A", 10)},
			}},
		},
		{
			name: "quota shrunk below usage leaves the pool nothing, never less, and local quota local",
			stages: []stage{{
				do: func(t *Tree) {
					t.SetClusterQueue("A", "R", cpuOnly(10))
					t.SetClusterQueue("B", "R", cpuQuota(10, nil, limit(6)))
					t.AddUsage("A", cpuAmount(15))
					t.SetClusterQueue("A", "R", cpuOnly(2))
				},
				want: []probe{
					// R: 2 + 6 = 8 against 15 held. R's overuse (−7)
					// leaves the pool nothing, but B's 4 it does not lend
					// stay B's.
					wantCohortQuota("R", 8), wantCohortUsage("R", 15),
					wantAvailable("A", 0), wantAvailable("B", 4), wantPotential("A", 8),
					wantFits("A", cpuAmount(1), false), wantFits("A", cpuAmount(0), true),
				},
			}, {
				do:   func(t *Tree) { t.RemoveUsage("A", cpuAmount(10)) },
				want: []probe{wantCohortUsage("R", 5), wantAvailable("A", 3), wantAvailable("B", 7)},
			}},
		},
		{
			name: "implicit cohort exists while named and vanishes with its last child",
			stages: []stage{{
				do: func(t *Tree) {
					t.SetClusterQueue("A", "R", cpuOnly(10))
					t.SetClusterQueue("B", "R", cpuOnly(5))
				},
				want: []probe{wantCohortExists("R", true), wantCohortQuota("R", 15), wantAvailable("B", 15)},
			}, {
				do:   func(t *Tree) { t.DeleteClusterQueue("A") },
				want: []probe{wantCohortExists("R", true), wantCohortQuota("R", 5), wantAvailable("B", 5)},
			}, {
				do:   func(t *Tree) { t.DeleteClusterQueue("B") },
				want: []probe{wantCohortExists("R", false)},
			}, {
				// A cohort's parent exists implicitly too.
				do:   func(t *Tree) { t.SetCohort("P", "R", cpuOnly(3)) },
				want: []probe{wantCohortExists("R", true), wantCohortQuota("R", 3)},
			}, {
				do:   func(t *Tree) { t.SetCohort("P", "", cpuOnly(3)) },
				want: []probe{wantCohortExists("R", false), wantCohortExists("P", true)},
			}, {
				do:   func(t *Tree) { t.DeleteCohort("P") },
				want: []probe{wantCohortExists("P", false)},
			}},
		},
		{
			name: "deleting an explicit cohort with children keeps it implicit",
			stages: []stage{{
				do: func(t *Tree) {
					t.SetCohort("G", "", cpuOnly(0))
					t.SetCohort("R", "G", cpuOnly(6))
					t.SetClusterQueue("A", "R", cpuOnly(4))
					t.SetClusterQueue("C", "G", cpuOnly(0))
					t.AddUsage("A", cpuAmount(7))
				},
				want: []probe{wantCohortQuota("G", 10), wantAvailable("A", 3), wantAvailable("C", 3)},
			}, {
				// R loses its quota and its parent; A keeps its usage.
				do: func(t *Tree) { t.DeleteCohort("R") },
				want: []probe{
					wantCohortExists("R", true), wantCohortQuota("R", 4), wantCohortUsage("R", 7),
					wantCohortQuota("G", 0), wantCohortUsage("G", 0),
					wantAvailable("A", 0), wantAvailable("C", 0), wantUsage("A", 7),
				},
			}},
		},
		{
			name: "cycle of two cohorts gives nothing below it until repaired",
			stages: []stage{{
				do: func(t *Tree) {
					t.SetCohort("Y", "", cpuOnly(5))
					t.SetCohort("X", "Y", cpuOnly(5))
					t.SetCohort("Z", "X", nil)
					t.SetClusterQueue("A", "X", cpuOnly(10))
					t.SetClusterQueue("B", "Z", cpuOnly(3))
					t.SetClusterQueue("D", "W", cpuOnly(2))
					t.AddUsage("A", cpuAmount(4))
				},
				want: []probe{wantCohortQuota("Y", 23), wantAvailable("A", 19), wantAvailable("B", 19), wantCycle("A")},
			}, {
				do: func(t *Tree) { t.SetCohort("Y", "X", cpuOnly(5)) },
				want: []probe{
					wantCycle("A", "X", "Y"), wantCycle("B", "X", "Y"), wantCycle("D"),
					wantAvailable("A", 0), wantPotential("A", 0), wantAvailable("B", 0), wantPotential("B", 0),
					wantFits("A", nil, false), wantFits("B", cpuAmount(1), false),
					wantAvailable("D", 2),
					// The loop's members count as roots: X keeps Z and A, Y
					// only its own 5.
					wantCohortQuota("X", 18), wantCohortUsage("X", 4), wantCohortQuota("Y", 5),
					wantUsage("A", 4),
				},
			}, {
				do:   func(t *Tree) { t.SetCohort("Y", "", cpuOnly(5)) },
				want: []probe{wantCycle("A"), wantCycle("B"), wantAvailable("A", 19), wantPotential("B", 23)},
			}, {
				do:   func(t *Tree) { t.SetCohort("Z", "Z", nil) },
				want: []probe{wantCycle("B", "Z"), wantAvailable("B", 0), wantCycle("A"), wantAvailable("A", 16)},
			}},
		},
		{
			name: "each flavor-resource pair is counted on its own",
			stages: []stage{{
				do: func(t *Tree) {
					t.SetClusterQueue("A", "R", map[FR]Quota{cpuFR: {Nominal: 10}, memFR: {Nominal: 5}})
					t.SetClusterQueue("B", "R", map[FR]Quota{memFR: {Nominal: 5}})
					t.AddUsage("A", map[FR]int64{cpuFR: 4, memFR: 8})
				},
				want: []probe{
					wantAvailable("B", 6),
					wantFits("B", map[FR]int64{cpuFR: 6, memFR: 2}, true),
					wantFits("B", map[FR]int64{cpuFR: 6, memFR: 3}, false),
					wantFits("B", map[FR]int64{cpuFR: 7, memFR: 1}, false),
					wantBorrowing("B", 1, true),
				},
			}},
		},
		{
			name: "unknown names read as zero and ClusterQueue and Cohort names are separate",
			stages: []stage{{
				do: func(t *Tree) {
					t.SetCohort("R", "", cpuOnly(7))
					t.SetClusterQueue("R", "R", cpuOnly(3))
					t.AddUsage("nope", cpuAmount(5))
					t.RemoveUsage("nope", cpuAmount(5))
					t.DeleteClusterQueue("nope")
					t.DeleteCohort("nope")
				},
				want: []probe{
					wantAvailable("R", 10), wantCohortQuota("R", 10),
					wantAvailable("nope", 0), wantPotential("nope", 0), wantUsage("nope", 0),
					wantFits("nope", nil, false), wantBorrowing("nope", 1, false), wantCycle("nope"),
					wantCohortUsage("nope", 0), wantCohortLent("nope", 0),
				},
			}},
		},
		{
			name: "negative amounts are taken as zero and the caller's limits are copied",
			stages: []stage{{
				do: func(t *Tree) {
					bl := limit(-4)
					t.SetClusterQueue("A", "R", map[FR]Quota{cpuFR: {Nominal: -5, BorrowingLimit: bl}})
					t.SetClusterQueue("B", "R", cpuOnly(10))
					*bl = 100
					t.AddUsage("A", cpuAmount(-3))
				},
				want: []probe{wantAvailable("A", 0), wantPotential("A", 0), wantUsage("A", 0), wantAvailable("B", 10)},
			}},
		},
		{
			name: "huge amounts saturate instead of wrapping around",
			stages: []stage{{
				do: func(t *Tree) {
					t.SetClusterQueue("A", "R", cpuOnly(math.MaxInt64))
					t.SetClusterQueue("B", "R", cpuOnly(math.MaxInt64))
					t.AddUsage("A", cpuAmount(math.MaxInt64))
					t.AddUsage("A", cpuAmount(math.MaxInt64))
				},
				want: []probe{wantCohortQuota("R", math.MaxInt64), wantUsage("A", math.MaxInt64), wantPotential("A", math.MaxInt64)},
			}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { runStages(t, tc.stages) })
	}
}

// runStages applies each stage to a new Tree and checks its probes.
func runStages(t *testing.T, stages []stage) {
	t.Helper()
	tree := NewTree()
	for i, s := range stages {
		s.do(tree)
		for _, p := range s.want {
			if got := p.got(tree); !reflect.DeepEqual(got, p.want) {
				t.Errorf("stage %d: %s = %v, want %v", i, p.what, got, p.want)
			}
		}
	}
}

func wantCohortOf(cq, want string) probe {
	return probe{"ClusterQueueCohort(" + cq + ")", func(t *Tree) any { return t.ClusterQueueCohort(cq) }, want}
}

func wantParent(cohort, want string) probe {
	return probe{"CohortParent(" + cohort + ")", func(t *Tree) any { return t.CohortParent(cohort) }, want}
}

// wantChildren expects the Cohort's child Cohorts and ClusterQueues.
func wantChildren(cohort string, cohorts, clusterQueues []string) probe {
	return probe{"CohortChildren(" + cohort + ")", func(t *Tree) any {
		c, q := t.CohortChildren(cohort)
		return [2][]string{c, q}
	}, [2][]string{cohorts, clusterQueues}}
}

func wantLocalFree(cq string, want int64) probe {
	return probe{"LocalFree(" + cq + ")", func(t *Tree) any { return t.LocalFree(cq, cpuFR) }, want}
}

func wantCohortLocalFree(cohort string, want int64) probe {
	return probe{"CohortLocalFree(" + cohort + ")", func(t *Tree) any { return t.CohortLocalFree(cohort, cpuFR) }, want}
}

// TestTreeShape covers the accessors that let a caller walk the tree:
// parents, children and the quota lending limits keep local.
func TestTreeShape(t *testing.T) {
	tests := []struct {
		name   string
		stages []stage
	}{
		{
			name: "parents and children of nested cohorts",
			stages: []stage{{
				do: func(t *Tree) {
					t.SetCohort("R", "", nil)
					t.SetCohort("P", "R", nil)
					t.SetCohort("Q", "R", nil)
					t.SetClusterQueue("B", "P", cpuOnly(1))
					t.SetClusterQueue("A", "P", cpuOnly(1))
					t.SetClusterQueue("C", "R", cpuOnly(1))
					t.SetClusterQueue("S", "", cpuOnly(1))
				},
				want: []probe{
					wantCohortOf("A", "P"), wantCohortOf("C", "R"), wantCohortOf("S", ""), wantCohortOf("nope", ""),
					wantParent("P", "R"), wantParent("R", ""), wantParent("nope", ""),
					wantChildren("R", []string{"P", "Q"}, []string{"C"}),
					wantChildren("P", nil, []string{"A", "B"}),
					wantChildren("Q", nil, nil),
					wantChildren("nope", nil, nil),
				},
			}, {
				// An implicit parent is a parent all the same.
				do:   func(t *Tree) { t.SetCohort("R", "G", nil) },
				want: []probe{wantParent("R", "G"), wantChildren("G", []string{"R"}, nil)},
			}},
		},
		{
			name: "a loop member has no usable parent and is no child",
			stages: []stage{{
				do: func(t *Tree) {
					t.SetCohort("X", "Y", nil)
					t.SetCohort("Y", "X", nil)
					t.SetCohort("Z", "X", nil)
					t.SetClusterQueue("A", "Z", cpuOnly(1))
				},
				want: []probe{
					wantParent("X", ""), wantParent("Y", ""), wantParent("Z", "X"),
					wantChildren("X", []string{"Z"}, nil), wantChildren("Y", nil, nil),
					wantCohortOf("A", "Z"),
				},
			}},
		},
		{
			// A keeps 10 − 4 = 6 local; P keeps its pool of 6 + 4 = 10
			// minus its lendingLimit 7: 3.
			name: "local free quota is what lending limits keep and usage leaves",
			stages: []stage{{
				do: func(t *Tree) {
					t.SetCohort("R", "", nil)
					t.SetCohort("P", "R", cpuQuota(6, nil, limit(7)))
					t.SetClusterQueue("A", "P", cpuQuota(10, nil, limit(4)))
					t.SetClusterQueue("B", "R", cpuOnly(10))
				},
				want: []probe{
					wantLocalFree("A", 6), wantLocalFree("B", 0), wantLocalFree("nope", 0),
					wantCohortLocalFree("P", 3), wantCohortLocalFree("R", 0), wantCohortLocalFree("nope", 0),
				},
			}, {
				// A holds 8: 6 locally, 2 in P's pool.
				do:   func(t *Tree) { t.AddUsage("A", cpuAmount(8)) },
				want: []probe{wantLocalFree("A", 0), wantCohortUsage("P", 2), wantCohortLocalFree("P", 1)},
			}, {
				do:   func(t *Tree) { t.AddUsage("A", cpuAmount(5)) },
				want: []probe{wantCohortUsage("P", 7), wantCohortLocalFree("P", 0)},
			}, {
				do:   func(t *Tree) { t.RemoveUsage("A", cpuAmount(10)) },
				want: []probe{wantLocalFree("A", 3), wantCohortLocalFree("P", 3)},
			}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { runStages(t, tc.stages) })
	}
}

func TestAmountOf(t *testing.T) {
	tests := []struct {
		res  corev1.ResourceName
		q    string
		want int64
	}{
		{corev1.ResourceCPU, "500m", 500},
		{corev1.ResourceCPU, "2", 2000},
		{corev1.ResourceCPU, "0.5m", 1}, // rounded up
		{corev1.ResourceMemory, "1Gi", 1073741824},
		{corev1.ResourceMemory, "1.5", 2},
		{"nvidia.com/gpu", "8", 8},
		{corev1.ResourceMemory, "100E", math.MaxInt64},
		{corev1.ResourceCPU, "10P", math.MaxInt64}, // 10^19 millicores
		{corev1.ResourceCPU, "9223372036854775807m", math.MaxInt64},
		{corev1.ResourceCPU, "9223372036854775806m", math.MaxInt64 - 1},
		{corev1.ResourceMemory, "-100E", math.MinInt64},
	}
	for _, tc := range tests {
		if got := AmountOf(tc.res, resource.MustParse(tc.q)); got != tc.want {
			t.Errorf("AmountOf(%s, %s) = %d, want %d", tc.res, tc.q, got, tc.want)
		}
	}
}
