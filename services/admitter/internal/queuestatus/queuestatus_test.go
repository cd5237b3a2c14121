package queuestatus

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-dev/sluice/services/admitter/internal/metrics"
	"github.com/sluice-dev/sluice/services/admitter/internal/scheduler"
)

func TestGaugeSeriesGoWithTheirQueue(t *testing.T) {
	m, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	r := New(Config{Metrics: m})
	steps := []struct {
		name    string
		queues  map[string]scheduler.ClusterQueueStatus
		series  int
		pending map[string]float64
	}{
		{"two queues", map[string]scheduler.ClusterQueueStatus{
			"a": {Counts: scheduler.Counts{Pending: 3}}, "b": {Counts: scheduler.Counts{Pending: 1}},
		}, 2, map[string]float64{"a": 3, "b": 1}},
		{"a deleted", map[string]scheduler.ClusterQueueStatus{"b": {Counts: scheduler.Counts{Pending: 2}}}, 1, map[string]float64{"b": 2}},
		{"none left", map[string]scheduler.ClusterQueueStatus{}, 0, nil},
	}
	for _, st := range steps {
		r.setGauges(st.queues)
		for _, g := range []*prometheus.GaugeVec{m.PendingWorkloads, m.ReservingWorkloads, m.AdmittedWorkloads} {
			if n := testutil.CollectAndCount(g); n != st.series {
				t.Fatalf("%s: %d series, want %d", st.name, n, st.series)
			}
		}
		for name, want := range st.pending {
			if got := testutil.ToFloat64(m.PendingWorkloads.WithLabelValues(name)); got != want {
				t.Fatalf("%s: pending{%s} = %v, want %v", st.name, name, got, want)
			}
		}
	}
}

func TestSummariesCountPerQueue(t *testing.T) {
	r := New(Config{})
	r.Reserved("a", true)
	r.Reserved("a", false)
	r.Reserved("b", true)
	want := map[string]summary{"a": {reserved: 1, admitted: 1}, "b": {admitted: 1}}
	if len(r.summaries) != len(want) {
		t.Fatalf("summaries for %d queues, want %d", len(r.summaries), len(want))
	}
	for name, w := range want {
		if got := *r.summaries[name]; got != w {
			t.Fatalf("summary of %s = %+v, want %+v", name, got, w)
		}
	}
}
