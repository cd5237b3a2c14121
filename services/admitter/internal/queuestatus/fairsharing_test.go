package queuestatus

import (
	"math"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-dev/sluice/services/admitter/internal/metrics"
	"github.com/sluice-dev/sluice/services/admitter/internal/quota"
	"github.com/sluice-dev/sluice/services/admitter/internal/scheduler"
)

// TestShareGauges: the share gauges carry the unrounded share, exist only
// for nodes that report one (fair sharing on), and go with their node.
func TestShareGauges(t *testing.T) {
	m, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	r := New(Config{Metrics: m})
	third := &quota.Share{Ratio: 100, Weight: 3, Borrowing: true}
	infinite := &quota.Share{Ratio: 50, Weight: 0, Borrowing: true}
	steps := []struct {
		name    string
		queues  map[string]scheduler.ClusterQueueStatus
		cohorts map[string]scheduler.CohortStatus
		want    map[string]float64 // by "cq/" or "co/" and name
	}{
		{
			name:    "shares",
			queues:  map[string]scheduler.ClusterQueueStatus{"a": {Share: third}, "b": {Share: infinite}},
			cohorts: map[string]scheduler.CohortStatus{"org": {Share: &quota.Share{Weight: 1}}, "team": {Share: third}},
			want:    map[string]float64{"cq/a": 100.0 / 3, "cq/b": math.Inf(1), "co/org": 0, "co/team": 100.0 / 3},
		},
		{
			name:    "a queue and a Cohort gone",
			queues:  map[string]scheduler.ClusterQueueStatus{"b": {Share: infinite}},
			cohorts: map[string]scheduler.CohortStatus{"org": {Share: &quota.Share{Weight: 1}}},
			want:    map[string]float64{"cq/b": math.Inf(1), "co/org": 0},
		},
		{
			name:    "fair sharing off",
			queues:  map[string]scheduler.ClusterQueueStatus{"c": {}},
			cohorts: map[string]scheduler.CohortStatus{"x": {}},
		},
	}
	for _, st := range steps {
		r.setGauges(st.queues)
		r.setCohortGauges(st.cohorts)
		var cqSeries, coSeries int
		for key, want := range st.want {
			g := m.ClusterQueueWeightedShare
			if key[:3] == "co/" {
				g = m.CohortWeightedShare
				coSeries++
			} else {
				cqSeries++
			}
			if got := testutil.ToFloat64(g.WithLabelValues(key[3:])); got != want {
				t.Fatalf("%s: %s = %v, want %v", st.name, key, got, want)
			}
		}
		if n := testutil.CollectAndCount(m.ClusterQueueWeightedShare); n != cqSeries {
			t.Fatalf("%s: %d ClusterQueue share series, want %d", st.name, n, cqSeries)
		}
		if n := testutil.CollectAndCount(m.CohortWeightedShare); n != coSeries {
			t.Fatalf("%s: %d Cohort share series, want %d", st.name, n, coSeries)
		}
	}
}

func TestFairSharingStatus(t *testing.T) {
	if got := fairSharingStatus(nil); got != nil {
		t.Fatalf("fair sharing off: %+v, want nil (cleared)", got)
	}
	if got := fairSharingStatus(&quota.Share{Ratio: 250, Weight: 3, Borrowing: true}); got == nil || got.WeightedShare != 84 {
		t.Fatalf("250 at weight 3: %+v, want 84", got)
	}
	if got := fairSharingStatus(&quota.Share{Ratio: 1, Weight: 0, Borrowing: true}); got == nil || got.WeightedShare != math.MaxInt64 {
		t.Fatalf("weight 0 borrowing: %+v, want MaxInt64", got)
	}
}
