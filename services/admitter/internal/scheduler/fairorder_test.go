package scheduler

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

// The admission order under fair sharing (see fairOrder). Every scenario
// also runs with fair sharing off, where the heads of a round go in
// compareCandidates order as they always did.

// newFairFixture is newFixture with a Scheduler made with opts.
func newFairFixture(t testing.TB, opts ...Option) *fixture {
	f := newFixture(t)
	f.s = New(opts...)
	f.s.SetFlavor(&v1alpha1.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: "f", UID: "f", Generation: 1}})
	f.s.SetNamespace("ns", nil)
	return f
}

var fairSharingOn = WithFairSharing(FairSharing{Enabled: true})

// weightedCohort is the Cohort c with fair-sharing weight w.
func weightedCohort(c cohortDef, w string) *v1alpha1.Cohort {
	obj := c.object()
	q := resource.MustParse(w)
	obj.Spec.FairSharing = &v1alpha1.FairSharing{Weight: &q}
	return obj
}

// withMemory adds memory, of nominal quota memory, to the resources the
// ClusterQueue's flavor f covers.
func withMemory(memory string) func(*v1alpha1.ClusterQueue) {
	return func(cq *v1alpha1.ClusterQueue) {
		rg := &cq.Spec.ResourceGroups[0]
		rg.CoveredResources = append(rg.CoveredResources, corev1.ResourceMemory)
		rg.Flavors[0].Resources = append(rg.Flavors[0].Resources,
			v1alpha1.ResourceQuota{Name: corev1.ResourceMemory, NominalQuota: resource.MustParse(memory)})
	}
}

// fairWorkload is a workload of a scenario; memory "" asks for none.
type fairWorkload struct {
	name, queue, cpu, memory string
	age                      int
	priority                 int32
}

func (f *fixture) observeAll(wls []fairWorkload) {
	for _, w := range wls {
		wl := f.workload(w.name, "lq-"+w.queue, w.cpu, w.age, w.priority)
		if w.memory != "" {
			wl.Spec.PodSets[0].Template.Requests[corev1.ResourceMemory] = resource.MustParse(w.memory)
		}
		f.s.Observe(wl)
	}
}

func TestFairOrder(t *testing.T) {
	tests := []struct {
		name  string
		build func(f *fixture)
		// admitted are reserved, and written back, before pending comes.
		admitted, pending []fairWorkload
		// wantOn and wantOff are the pending workloads reserved, in order,
		// with fair sharing on and off.
		wantOn, wantOff []string
	}{{
		// b borrows 1 of 8 cpu (share 125); a is within its cpu quota but
		// borrows 8 of 10 memory (share 800). The head within its quota,
		// on what it asks for, goes first; without fair sharing, priority
		// decides.
		name: "a queue within its quota goes before a borrower of a lower share",
		build: func(f *fixture) {
			f.clusterQueue("a", "4", inCohort("org"), withMemory("0"))
			f.clusterQueue("b", "0", inCohort("org"))
			f.clusterQueue("lender", "4", inCohort("org"), withMemory("10"))
		},
		admitted: []fairWorkload{{name: "a-memory", queue: "a", cpu: "1", memory: "8"}},
		pending: []fairWorkload{{name: "a1", queue: "a", cpu: "1", age: 2},
			{name: "b1", queue: "b", cpu: "1", age: 1, priority: 5}},
		wantOn:  []string{"a1", "b1"},
		wantOff: []string{"b1", "a1"},
	}, {
		// team already holds 4 of org's 10 through t2: with t1's head its
		// share is 500, against solo's 100 and then 200. t1's own share
		// would tie solo's, and t1's head has the higher priority.
		name: "nested cohorts: a sub-cohort's share counts at the root",
		build: func(f *fixture) {
			f.cohortQueues([]queueDef{{name: "t1", cohort: "team", cpu: "0"}, {name: "t2", cohort: "team", cpu: "0"},
				{name: "solo", cohort: "org", cpu: "0"}},
				[]cohortDef{{name: "org", cpu: "10"}, {name: "team", parent: "org"}})
		},
		admitted: []fairWorkload{{name: "t2-four", queue: "t2", cpu: "4"}},
		pending: []fairWorkload{{name: "t1-a", queue: "t1", cpu: "1", age: 1, priority: 5},
			{name: "solo-a", queue: "solo", cpu: "1", age: 2}, {name: "solo-b", queue: "solo", cpu: "1", age: 3}},
		wantOn:  []string{"solo-a", "solo-b", "t1-a"},
		wantOff: []string{"t1-a", "solo-a", "solo-b"},
	}, {
		// team weighs 10: with t1's head its share is 500/10, below
		// solo's 100.
		name: "nested cohorts: a sub-cohort's weight counts at the root",
		build: func(f *fixture) {
			f.s.SetCohort(cohortDef{name: "org", cpu: "10"}.object())
			f.s.SetCohort(weightedCohort(cohortDef{name: "team", parent: "org"}, "10"))
			f.cohortQueues([]queueDef{{name: "t1", cohort: "team", cpu: "0"}, {name: "t2", cohort: "team", cpu: "0"},
				{name: "solo", cohort: "org", cpu: "0"}}, nil)
		},
		admitted: []fairWorkload{{name: "t2-four", queue: "t2", cpu: "4"}},
		pending: []fairWorkload{{name: "solo-a", queue: "solo", cpu: "1", age: 1, priority: 5},
			{name: "t1-a", queue: "t1", cpu: "1", age: 2}},
		wantOn:  []string{"t1-a", "solo-a"},
		wantOff: []string{"solo-a", "t1-a"},
	}, {
		// Within team, t1 and t2 compare their own shares: t1 holds
		// nothing yet.
		name: "nested cohorts: the queues of a sub-cohort compare their own shares",
		build: func(f *fixture) {
			f.cohortQueues([]queueDef{{name: "t1", cohort: "team", cpu: "0"}, {name: "t2", cohort: "team", cpu: "0"}},
				[]cohortDef{{name: "org", cpu: "10"}, {name: "team", parent: "org"}})
		},
		admitted: []fairWorkload{{name: "t2-four", queue: "t2", cpu: "4"}},
		pending: []fairWorkload{{name: "t2-a", queue: "t2", cpu: "1", age: 1, priority: 5},
			{name: "t1-a", queue: "t1", cpu: "1", age: 2}},
		wantOn:  []string{"t1-a", "t2-a"},
		wantOff: []string{"t2-a", "t1-a"},
	}, {
		// solo holds 1: with its head, 200. t1-a takes team to 100 and
		// wins; team with t2-a is then at 300, no longer 200, and
		// solo-a, though younger, goes before t2-a.
		name: "nested cohorts: a pick in a sub-cohort counts for the next",
		build: func(f *fixture) {
			f.cohortQueues([]queueDef{{name: "t1", cohort: "team", cpu: "0"}, {name: "t2", cohort: "team", cpu: "0"},
				{name: "solo", cohort: "org", cpu: "0"}},
				[]cohortDef{{name: "org", cpu: "10"}, {name: "team", parent: "org"}})
		},
		admitted: []fairWorkload{{name: "solo-one", queue: "solo", cpu: "1"}},
		pending: []fairWorkload{{name: "t2-a", queue: "t2", cpu: "2", age: 1}, {name: "t1-a", queue: "t1", cpu: "1", age: 2},
			{name: "solo-a", queue: "solo", cpu: "1", age: 3}},
		wantOn:  []string{"t1-a", "solo-a", "t2-a"},
		wantOff: []string{"t2-a", "t1-a", "solo-a"},
	}, {
		name: "weight 0: a borrower of weight 0 goes after every finite share",
		build: func(f *fixture) {
			f.cohortQueues(nil, []cohortDef{{name: "org", cpu: "4"}})
			f.clusterQueue("zero", "0", inCohort("org"), weighted("0"))
			f.clusterQueue("one", "0", inCohort("org"))
		},
		pending: []fairWorkload{{name: "zero-a", queue: "zero", cpu: "1", priority: 5}, {name: "zero-b", queue: "zero", cpu: "1", age: 1, priority: 5},
			{name: "one-a", queue: "one", cpu: "1", age: 2}, {name: "one-b", queue: "one", cpu: "1", age: 3}},
		wantOn:  []string{"one-a", "one-b", "zero-a", "zero-b"},
		wantOff: []string{"zero-a", "one-a", "zero-b", "one-b"},
	}, {
		name: "weight 0: within its own quota, a queue of weight 0 does not borrow",
		build: func(f *fixture) {
			f.cohortQueues(nil, []cohortDef{{name: "org", cpu: "4"}})
			f.clusterQueue("zero", "2", inCohort("org"), weighted("0"))
			f.clusterQueue("one", "0", inCohort("org"))
		},
		pending: []fairWorkload{{name: "one-a", queue: "one", cpu: "1", priority: 5}, {name: "zero-a", queue: "zero", cpu: "2", age: 1}},
		wantOn:  []string{"zero-a", "one-a"},
		wantOff: []string{"one-a", "zero-a"},
	}, {
		// Equal shares: priority, then age, as in the queue.
		name: "equal shares: the higher priority, then the older",
		build: func(f *fixture) {
			f.cohortQueues([]queueDef{{name: "a", cohort: "org", cpu: "0"}, {name: "b", cohort: "org", cpu: "0"},
				{name: "c", cohort: "org", cpu: "0"}}, []cohortDef{{name: "org", cpu: "6"}})
		},
		pending: []fairWorkload{{name: "a1", queue: "a", cpu: "1", age: 3}, {name: "b1", queue: "b", cpu: "1", age: 1},
			{name: "c1", queue: "c", cpu: "1", age: 2, priority: 1}},
		wantOn:  []string{"c1", "b1", "a1"},
		wantOff: []string{"c1", "b1", "a1"},
	}}
	for _, tc := range tests {
		for _, on := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/fairSharing=%v", tc.name, on), func(t *testing.T) {
				var opts []Option
				want := tc.wantOff
				if on {
					opts, want = []Option{fairSharingOn}, tc.wantOn
				}
				f := newFairFixture(t, opts...)
				tc.build(f)
				f.observeAll(tc.admitted)
				if reserved, waiting, _ := f.runCycle(); len(reserved) != len(tc.admitted) {
					t.Fatalf("reserved %v beforehand, waiting %v; want all of %v", names(reserved), waiting, tc.admitted)
				}
				f.observeAll(tc.pending)
				reserved, waiting, _ := f.runCycle()
				if got := names(reserved); !slices.Equal(got, want) {
					t.Fatalf("reserved %v, want %v (waiting %v)", got, want, waiting)
				}
			})
		}
	}
}

// TestFairOrderSplitsByWeight: two queues of nominal quota 0 share a pool
// of 40 cpu by their weights, each wanting all of it in workloads of 1
// cpu. One cycle fills the pool, in the weights' proportion with fair
// sharing on. Off, each round admits one head per queue: half each.
func TestFairOrderSplitsByWeight(t *testing.T) {
	for _, tc := range []struct {
		name           string
		opts           []Option
		weightA        string
		weightB        string
		wantA, wantB   int
		toleranceOfOne bool
	}{
		{name: "weights 1 and 3", opts: []Option{fairSharingOn}, weightA: "1", weightB: "3", wantA: 10, wantB: 30, toleranceOfOne: true},
		{name: "weights 2 and 2", opts: []Option{fairSharingOn}, weightA: "2", weightB: "2", wantA: 20, wantB: 20, toleranceOfOne: true},
		{name: "weights 1 and 3, fair sharing off", weightA: "1", weightB: "3", wantA: 20, wantB: 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFairFixture(t, tc.opts...)
			f.cohortQueues(nil, []cohortDef{{name: "org", cpu: "40"}})
			f.clusterQueue("a", "0", inCohort("org"), weighted(tc.weightA))
			f.clusterQueue("b", "0", inCohort("org"), weighted(tc.weightB))
			var pending []fairWorkload
			for i := range 40 {
				pending = append(pending, fairWorkload{name: fmt.Sprintf("a%02d", i), queue: "a", cpu: "1", age: 2 * i},
					fairWorkload{name: fmt.Sprintf("b%02d", i), queue: "b", cpu: "1", age: 2*i + 1})
			}
			f.observeAll(pending)
			plan := f.cycle()
			if plan.More {
				t.Fatalf("the cycle asks for more after %d tries", plan.Tried)
			}
			count := map[string]int{}
			for _, r := range plan.Reservations {
				count[r.ClusterQueue.Name]++
			}
			a, b := count["a"], count["b"]
			if a+b != 40 {
				t.Fatalf("reserved %d in a and %d in b, want the pool of 40 full", a, b)
			}
			slack := 0
			if tc.toleranceOfOne {
				slack = 1
			}
			if a < tc.wantA-slack || a > tc.wantA+slack {
				t.Fatalf("reserved %d in a and %d in b, want %d and %d (±%d)", a, b, tc.wantA, tc.wantB, slack)
			}
		})
	}
}

// TestFairOrderKeepsTreesInCandidateOrder: heads of queues without cohort
// and the contests of different trees come in compareCandidates order,
// each tree where its first head comes.
func TestFairOrderKeepsTreesInCandidateOrder(t *testing.T) {
	f := newFairFixture(t, fairSharingOn)
	f.cohortQueues([]queueDef{{name: "x1", cohort: "x", cpu: "0"}, {name: "x2", cohort: "x", cpu: "0"},
		{name: "y1", cohort: "y", cpu: "0"}}, []cohortDef{{name: "x", cpu: "4"}, {name: "y", cpu: "4"}})
	f.clusterQueue("alone", "4")
	f.clusterQueue("last", "4")
	f.observeAll([]fairWorkload{
		{name: "alone", queue: "alone", cpu: "1", priority: 10},
		{name: "x1-held", queue: "x1", cpu: "1", priority: 8},
		{name: "x1-head", queue: "x1", cpu: "1", age: 1, priority: 5},
		{name: "x2-head", queue: "x2", cpu: "1", age: 2},
		{name: "y1-head", queue: "y1", cpu: "1", age: 3, priority: 7},
		{name: "last", queue: "last", cpu: "1", age: 4, priority: 1},
	})
	// x1-held and x2-head tie on shares, and x1-held has the higher
	// priority. x1 then offers x1-head at once, which loses to x2-head:
	// x1 holds 1 already. All of x's come where x1-held comes, before
	// y1-head of a higher priority than x2-head's.
	plan := f.cycle()
	want := []string{"alone", "x1-held", "x2-head", "x1-head", "y1-head", "last"}
	if got := names(plan.Reservations); !slices.Equal(got, want) {
		t.Fatalf("reserved %v, want %v", got, want)
	}
}

// TestFairOrderPickThatNoLongerFitsWaits: both heads fit when the round
// begins, but once the first is reserved the second no longer does: it
// is tried again in the next round, and parked.
func TestFairOrderPickThatNoLongerFitsWaits(t *testing.T) {
	f := newFairFixture(t, fairSharingOn)
	f.cohortQueues([]queueDef{{name: "a", cohort: "org", cpu: "0"}, {name: "b", cohort: "org", cpu: "0"}},
		[]cohortDef{{name: "org", cpu: "3"}})
	f.observeAll([]fairWorkload{{name: "a1", queue: "a", cpu: "2"}, {name: "b1", queue: "b", cpu: "2", age: 1}})
	plan := f.cycle()
	if got := names(plan.Reservations); !slices.Equal(got, []string{"a1"}) || plan.More {
		t.Fatalf("reserved %v (more: %v), want a1", got, plan.More)
	}
	if got := messages(plan.Waiting)["b1"]; !strings.HasPrefix(got, insufficientCPU+"1 more needed") {
		t.Fatalf("b1 is told %q, want that it lacks 1 cpu", got)
	}
	if plan.Tried != 3 {
		t.Fatalf("tried %d heads, want 3: a1, b1 and b1 again in the second round", plan.Tried)
	}
}

// TestFairOrderStopsAtMaxReservations: a queue that keeps winning offers
// its next head while the cycle may still reserve; the head that found the
// cycle full stays first, and the next cycle goes on with it.
func TestFairOrderStopsAtMaxReservations(t *testing.T) {
	const pending = MaxReservationsPerCycle + 10
	f := newFairFixture(t, fairSharingOn)
	f.cohortQueues([]queueDef{{name: "a", cohort: "org", cpu: "0"}}, []cohortDef{{name: "org", cpu: fmt.Sprint(pending)}})
	var wls []fairWorkload
	for i := range pending {
		wls = append(wls, fairWorkload{name: fmt.Sprintf("w%05d", i), queue: "a", cpu: "1", age: i})
	}
	f.observeAll(wls)
	plan := f.cycle()
	if len(plan.Reservations) != MaxReservationsPerCycle || plan.Tried != MaxReservationsPerCycle+1 || !plan.More {
		t.Fatalf("reserved %d, tried %d (more: %v); want %d reserved, one more tried, and more",
			len(plan.Reservations), plan.Tried, plan.More, MaxReservationsPerCycle)
	}
	plan = f.cycle()
	if got := names(plan.Reservations); len(got) != 10 || got[0] != fmt.Sprintf("w%05d", MaxReservationsPerCycle) || plan.More {
		t.Fatalf("the next cycle reserved %v (more: %v), want the 10 left, from w%05d", got, plan.More, MaxReservationsPerCycle)
	}
}
