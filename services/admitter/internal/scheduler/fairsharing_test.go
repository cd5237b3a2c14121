package scheduler

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/services/admitter/internal/quota"
)

// weighted sets a ClusterQueue's fair-sharing weight.
func weighted(w string) func(*v1alpha1.ClusterQueue) {
	return func(cq *v1alpha1.ClusterQueue) {
		q := resource.MustParse(w)
		cq.Spec.FairSharing = &v1alpha1.FairSharing{Weight: &q}
	}
}

// TestShareInStatus: with fair sharing on, every ClusterQueue's and
// Cohort's status carries its share, weights applied; off, none does.
func TestShareInStatus(t *testing.T) {
	// org's pool is 12 of its own and a's, b's and team's lendable 4, 4
	// and 2: 22. a and b each run 6 on a nominal quota of 4; c runs 6 in
	// team, whose quota is its 2.
	build := func(f *fixture) {
		f.cohortQueues(nil, []cohortDef{{name: "org", cpu: "12"}})
		team := cohortDef{name: "team", parent: "org"}.object()
		two := resource.MustParse("2")
		team.Spec.FairSharing = &v1alpha1.FairSharing{Weight: &two}
		f.s.SetCohort(team)
		f.clusterQueue("a", "4", inCohort("org"))
		f.clusterQueue("b", "4", inCohort("org"), weighted("3"))
		f.clusterQueue("c", "2", inCohort("team"))
		f.clusterQueue("alone", "2")
		for i, q := range []string{"a", "b", "c"} {
			f.s.Observe(f.workload("w-"+q, "lq-"+q, "6", i, 0))
		}
		f.s.Observe(f.workload("w-alone", "lq-alone", "2", 3, 0))
		if reserved, waiting, _ := f.runCycle(); len(reserved) != 4 {
			t.Fatalf("reserved %v, waiting %v; want all four", names(reserved), waiting)
		}
	}

	on := newFixture(t)
	on.s = New(WithFairSharing(FairSharing{Enabled: true}))
	on.s.SetFlavor(&v1alpha1.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: "f", UID: "f", Generation: 1}})
	on.s.SetNamespace("ns", nil)
	build(on)
	cqs, _ := on.s.Statuses()
	cohorts := on.s.CohortStatuses()
	for _, tc := range []struct {
		node string
		got  *quota.Share
		want int64
	}{
		{"ClusterQueue a: 2 of 22", cqs["a"].Share, 91},           // 90.9
		{"ClusterQueue b: 2 of 22, weight 3", cqs["b"].Share, 31}, // 30.3
		{"ClusterQueue c: 4 of what team could hand it, 22", cqs["c"].Share, 182},
		{"ClusterQueue alone: no cohort", cqs["alone"].Share, 0},
		{"Cohort team: 4 of 22, weight 2", cohorts["team"].Share, 91},
		{"Cohort org: a root", cohorts["org"].Share, 0},
	} {
		if tc.got == nil {
			t.Errorf("%s: no share", tc.node)
		} else if w := tc.got.Weighted(); w != tc.want {
			t.Errorf("%s: weighted share %d, want %d (%+v)", tc.node, w, tc.want, *tc.got)
		}
	}

	off := newFixture(t)
	build(off)
	cqs, _ = off.s.Statuses()
	for name, st := range cqs {
		if st.Share != nil {
			t.Errorf("fair sharing off: ClusterQueue %s has share %+v", name, *st.Share)
		}
	}
	for name, st := range off.s.CohortStatuses() {
		if st.Share != nil {
			t.Errorf("fair sharing off: Cohort %s has share %+v", name, *st.Share)
		}
	}
}

// TestFairSharingPreemption: queues a and b, of weights 1 and 3, hold a
// pool of 40 cpu at 10 and 30; c, of weight 1, arrives wanting it all.
// Its heads preempt by share in one cycle, each counting the quota the
// heads before it claimed, and stop where the shares are even: 8, 24 and
// 8 cpu, each a weighted share of 200. Nothing more is evicted after.
func TestFairSharingPreemption(t *testing.T) {
	f, _ := newcomerFixture(t)
	evicted := map[string]int{}
	reserved := map[string]int{"a": 10, "b": 30}
	for cycle := 0; ; cycle++ {
		plan := f.cycle()
		if cycle > 0 && len(plan.Evictions) > 0 {
			t.Fatalf("cycle %d evicted %v, want every victim chosen in the first", cycle, drained(plan.Evictions))
		}
		for _, ev := range plan.Evictions {
			if !strings.Contains(ev.Message, "under fair sharing") || !strings.Contains(ev.Message, "InCohortFairSharing") {
				t.Errorf("victim %s is told %q, want the fair-sharing reason", ev.Workload.Name, ev.Message)
			}
			q := ev.Workload.Status.Admission.ClusterQueue
			evicted[q]++
			reserved[q]--
			f.s.Observe(f.released(ev.Workload))
		}
		for _, r := range plan.Reservations {
			reserved[r.ClusterQueue.Name]++
			f.s.Observe(f.written(r, true))
		}
		if len(plan.Evictions) == 0 && len(plan.Reservations) == 0 && !plan.More {
			break
		}
		if cycle > 10 {
			t.Fatal("no steady state after 10 cycles")
		}
	}
	if want := map[string]int{"a": 8, "b": 24, "c": 8}; !maps.Equal(reserved, want) {
		t.Fatalf("reserved %v after preemption (evicted %v), want %v", reserved, evicted, want)
	}
	cqs, _ := f.s.Statuses()
	for _, q := range []string{"a", "b", "c"} {
		if got := cqs[q].Share.Weighted(); got != 200 {
			t.Errorf("ClusterQueue %s: weighted share %d, want 200", q, got)
		}
	}
}

// TestFairSharingPreemptionAfterRestart: the admitter dies after writing
// three of the eight evictions of TestFairSharingPreemption's newcomer.
// The next leader, which knows of no claims, sees three victims being
// evicted and hands out the other five, not one more.
func TestFairSharingPreemptionAfterRestart(t *testing.T) {
	f, written := newcomerFixture(t)
	plan := f.cycle()
	if len(plan.Evictions) != 8 {
		t.Fatalf("evicted %d, want 8", len(plan.Evictions))
	}
	var want []string
	for _, ev := range plan.Evictions {
		want = append(want, ev.Workload.Name)
	}
	slices.Sort(want)

	next := newFairFixture(t, fairSharingOn)
	next.newcomerQueues()
	for name, wl := range written {
		if slices.Contains(want[:3], name) {
			wl = next.next(wl, func(wl *v1alpha1.Workload) {
				meta.SetStatusCondition(&wl.Status.Conditions, metav1.Condition{Type: v1alpha1.WorkloadEvicted, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonPreempted})
			})
		}
		next.s.Observe(wl)
	}
	next.observeAll(newcomers())
	plan = next.cycle()
	got := want[:3:3]
	for _, ev := range plan.Evictions {
		got = append(got, ev.Workload.Name)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) || len(plan.Evictions) != 5 {
		t.Fatalf("after the restart evicted %v, want the five of %v not evicted yet", drained(plan.Evictions), want)
	}
}

// newcomerFixture has queues a, b and c (weights 1, 3 and 1) in a pool of
// 40 cpu, a and b holding 10 and 30 workloads of 1 cpu, and 40 of c
// pending; it returns the admitted workloads as written.
func newcomerFixture(t *testing.T) (*fixture, map[string]*v1alpha1.Workload) {
	f := newFairFixture(t, fairSharingOn)
	f.newcomerQueues()
	var held []fairWorkload
	for i := range 40 {
		q := "b"
		if i%4 == 0 {
			q = "a"
		}
		held = append(held, fairWorkload{name: fmt.Sprintf("%s%02d", q, i), queue: q, cpu: "1", age: i})
	}
	f.observeAll(held)
	reserved, waiting, written := f.runCycle()
	if len(reserved) != 40 {
		t.Fatalf("reserved %d, want all 40 (waiting %v)", len(reserved), waiting)
	}
	f.observeAll(newcomers())
	return f, written
}

func (f *fixture) newcomerQueues() {
	f.cohortQueues(nil, []cohortDef{{name: "org", cpu: "40"}})
	reclaim := withPreemption(v1alpha1.ClusterQueuePreemption{ReclaimWithinCohort: v1alpha1.PreemptionAny})
	f.clusterQueue("a", "0", inCohort("org"), weighted("1"), reclaim)
	f.clusterQueue("b", "0", inCohort("org"), weighted("3"), reclaim)
	f.clusterQueue("c", "0", inCohort("org"), weighted("1"), reclaim)
}

func newcomers() []fairWorkload {
	var out []fairWorkload
	for i := range 40 {
		out = append(out, fairWorkload{name: fmt.Sprintf("c%02d", i), queue: "c", cpu: "1", age: 100 + i})
	}
	return out
}
