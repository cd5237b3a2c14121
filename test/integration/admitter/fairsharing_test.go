package admitter

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/services/admitter/app"
)

// TestFairSharingShares: with --fair-sharing, two queues of weights 1 and
// 3 that borrow alike report shares of 1:3 in their status and gauges,
// and the root Cohort reports 0; restarted without it, the admitter
// clears the field.
//
// The Cohort's pool is 12 of its own and the queues' 4 each: 20. Each
// queue runs 6 on its 4, borrowing 2: 2 of 20 is 100 per 1000, 100 at
// weight 1 and 33.3 (34 rounded up) at weight 3.
func TestFairSharingShares(t *testing.T) {
	ctx := testContext(t)
	cohort := unique("fair")
	st, cqs := newMembers(ctx, t,
		member{cohort: cohort, cpu: "4"},
		member{cohort: cohort, cpu: "4", weight: "3"},
	)
	newCohort(ctx, t, cohort, "", st.flavor, "12")
	light, heavy := cqs[0], cqs[1]

	reg := prometheus.NewRegistry()
	restartAdmitter(t, func(c *app.Config) {
		c.FairSharing = app.FairSharing{Enabled: true}
		c.Registry, c.Gatherer = reg, reg
	})
	restored := false
	t.Cleanup(func() {
		if !restored {
			restartAdmitter(t)
		}
	})

	submit(ctx, t, st.ns, "light", "6", inQueue(light))
	submit(ctx, t, st.ns, "heavy", "6", inQueue(heavy))
	waitWorkload(ctx, t, st.ns, "light", "admitted", admitted)
	waitWorkload(ctx, t, st.ns, "heavy", "admitted", admitted)

	for _, q := range []struct {
		name  string
		want  int64
		gauge float64
	}{{light, 100, 100}, {heavy, 34, 100.0 / 3}} {
		waitClusterQueue(ctx, t, q.name, fmt.Sprintf("weightedShare %d", q.want), func(cq *v1alpha1.ClusterQueue) bool {
			return cq.Status.FairSharing != nil && cq.Status.FairSharing.WeightedShare == q.want
		})
		waitGauge(ctx, t, reg, "sluice_admitter_cluster_queue_weighted_share", "cluster_queue", q.name, q.gauge)
	}
	waitCohort(ctx, t, cohort, "weightedShare 0 (a root)", func(co *v1alpha1.Cohort) bool {
		return co.Status.FairSharing != nil && co.Status.FairSharing.WeightedShare == 0
	})
	waitGauge(ctx, t, reg, "sluice_admitter_cohort_weighted_share", "cohort", cohort, 0)

	// Without the flag, the field is cleared.
	restartAdmitter(t)
	restored = true
	for _, name := range []string{light, heavy} {
		waitClusterQueue(ctx, t, name, "without fairSharing", func(cq *v1alpha1.ClusterQueue) bool {
			return cq.Status.FairSharing == nil
		})
	}
	waitCohort(ctx, t, cohort, "without fairSharing", func(co *v1alpha1.Cohort) bool {
		return co.Status.FairSharing == nil
	})
}

// waitGauge waits until the gauge name{label=value} in g reads want.
func waitGauge(ctx context.Context, t *testing.T, g prometheus.Gatherer, name, label, value string, want float64) {
	t.Helper()
	waitFor(ctx, t, fmt.Sprintf("%s{%s=%q} = %v", name, label, value, want), func() (bool, string) {
		families, err := g.Gather()
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, f := range families {
			if f.GetName() != name {
				continue
			}
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() != label || l.GetValue() != value {
						continue
					}
					got := m.GetGauge().GetValue()
					seen = append(seen, fmt.Sprint(got))
					if math.Abs(got-want) < 1e-9 {
						return true, ""
					}
				}
			}
		}
		return false, "seen " + strings.Join(seen, " ")
	})
}
