package scheduler

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/services/admitter/internal/quota"
)

func TestParsePreemptionStrategies(t *testing.T) {
	for _, tc := range []struct {
		list string
		want []PreemptionStrategy
	}{
		{"LessThanOrEqualToFinalShare", []PreemptionStrategy{LessThanOrEqualToFinalShare}},
		{"LessThanInitialShare", []PreemptionStrategy{LessThanInitialShare}},
		{"LessThanOrEqualToFinalShare,LessThanInitialShare", DefaultPreemptionStrategies()},
		{"LessThanOrEqualToFinalShare, LessThanInitialShare", DefaultPreemptionStrategies()},
		{"LessThanInitialShare,LessThanOrEqualToFinalShare", nil},
		{"LessThanInitialShare,LessThanInitialShare", nil},
		{"", nil},
		{"Always", nil},
		{"lessthaninitialshare", nil},
	} {
		t.Run(tc.list, func(t *testing.T) {
			got, err := ParsePreemptionStrategies(tc.list)
			if tc.want == nil {
				if err == nil || !strings.Contains(err.Error(), `must be exactly "LessThanOrEqualToFinalShare", "LessThanInitialShare" or "LessThanOrEqualToFinalShare,LessThanInitialShare"`) {
					t.Fatalf("accepted %v, %v; want an error naming the allowed lists", got, err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

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
