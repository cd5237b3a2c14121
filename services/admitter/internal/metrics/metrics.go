// Package metrics defines the admitter's Prometheus metrics.
package metrics

import (
	"errors"
	"fmt"
	"math"

	"github.com/prometheus/client_golang/prometheus"
)

const namespace = "sluice_admitter"

// Metrics are the admitter's collectors.
type Metrics struct {
	// CycleDuration times scheduling cycles' decisions, their writes
	// excluded.
	CycleDuration prometheus.Histogram
	// CycleWritesDuration times the scheduling cycles that reserved or
	// evicted, from their start until every one of those writes was
	// answered.
	CycleWritesDuration prometheus.Histogram
	// CycleReserved counts reservations made by scheduling cycles.
	CycleReserved prometheus.Counter
	// PendingWorkloads is the number of workloads waiting for quota, per
	// ClusterQueue.
	PendingWorkloads *prometheus.GaugeVec
	// ReservingWorkloads is the number of workloads holding quota, per
	// ClusterQueue.
	ReservingWorkloads *prometheus.GaugeVec
	// AdmittedWorkloads is the number of admitted, unfinished workloads, per
	// ClusterQueue.
	AdmittedWorkloads *prometheus.GaugeVec
	// ClusterQueueWeightedShare and CohortWeightedShare are each
	// ClusterQueue's and Cohort's fair-sharing share, unrounded (+Inf for
	// a weight of 0 while borrowing); set only with fair sharing on.
	ClusterQueueWeightedShare *prometheus.GaugeVec
	CohortWeightedShare       *prometheus.GaugeVec
	// CheckCallDuration times calls to admission-check providers, per
	// check and method.
	CheckCallDuration *prometheus.HistogramVec
	// CheckCallErrors counts failed or invalid provider answers, per check,
	// method and gRPC code (or "invalid_response", "dial", or a TLS
	// failure's reason: TLSConfigInvalid, TLSHandshakeFailed).
	CheckCallErrors *prometheus.CounterVec
	// DecisionsStreamed counts decisions sent on WatchAdmissions, per action.
	DecisionsStreamed *prometheus.CounterVec
	// DecisionsPublished counts decisions recorded in the stream, per action.
	DecisionsPublished *prometheus.CounterVec
	// SlowSubscribers counts stream subscribers cut off for falling behind.
	SlowSubscribers prometheus.Counter
	// DecisionRing is the number of recent decisions the stream holds for
	// subscribers that resume.
	DecisionRing prometheus.Gauge
	// WorkloadWrites counts API writes to Workloads, per operation.
	WorkloadWrites *prometheus.CounterVec
	// ReservationsUnknown counts reservation writes whose outcome was
	// unknown (a timeout, a lost connection, a 5xx), per how they settled:
	// "landed", "superseded" (the workload changed otherwise), "retried"
	// (written again), "refused", "gone" or "abandoned" (leadership ended
	// first).
	ReservationsUnknown *prometheus.CounterVec
	// DeadlineEvictions counts workloads evicted (or deactivated) for
	// missing their start-up deadline, per ClusterQueue.
	DeadlineEvictions *prometheus.CounterVec
	// WatchStreamOpens counts WatchChanges streams opened, per provider
	// endpoint; each open re-evaluates every evaluation held with it.
	WatchStreamOpens *prometheus.CounterVec
	// WatchStreamsOpen is the number of WatchChanges streams open now.
	WatchStreamsOpen prometheus.Gauge
	// WatchKeys counts evaluation keys providers pushed, per outcome:
	// "evaluate" (asked again) or "ignored" (not an evaluation held).
	WatchKeys *prometheus.CounterVec
	// Revocations counts admitted workloads evicted because a check no
	// longer answered Ready, per check and the state it answered.
	Revocations *prometheus.CounterVec
	// OwedReleases is the number of Releases held in each AdmissionCheck's
	// status.owedReleases for deleted workloads, per check.
	OwedReleases *prometheus.GaugeVec
	// ReleaseHandovers counts deleted workloads that stopped waiting for a
	// check's provider and handed their Release over to the check, per
	// check.
	ReleaseHandovers *prometheus.CounterVec
}

// cycleBuckets are the bounds of CycleDuration: 125µs to 65.5s in steps
// of about √2, so that a quantile read from them is off by 41% at most.
// A cycle that reserves thousands of workloads at once waits for as many
// writes and can take half a minute on a loaded API server. The doubling
// bounds are exact (0.5ms to 16.4s among them, the buckets of earlier
// releases); the ones between are √2 times the one below, rounded to
// three significant digits.
func cycleBuckets() []float64 {
	const lowest, highest = 0.000125, 65.536
	var bounds []float64
	for b := lowest; b <= highest; b *= 2 {
		bounds = append(bounds, b)
		if b < highest {
			mid := b * math.Sqrt2
			scale := math.Pow(10, 2-math.Floor(math.Log10(mid)))
			bounds = append(bounds, math.Round(mid*scale)/scale)
		}
	}
	return bounds
}

// New creates the collectors and registers them with reg. Collectors that
// reg already holds (a second admitter in the same process) are reused.
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		CycleDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "cycle_duration_seconds",
			Help:    "Time one scheduling cycle takes to decide, its writes excluded (see cycle_writes_duration_seconds).",
			Buckets: cycleBuckets(),
		}),
		CycleWritesDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "cycle_writes_duration_seconds",
			Help:    "Time from the start of a scheduling cycle that reserved or evicted until every one of those writes was answered.",
			Buckets: cycleBuckets(),
		}),
		CycleReserved: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "reservations_total",
			Help: "Quota reservations written by scheduling cycles.",
		}),
		PendingWorkloads: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "pending_workloads",
			Help: "Workloads waiting for quota, per ClusterQueue.",
		}, []string{"cluster_queue"}),
		ReservingWorkloads: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "reserving_workloads",
			Help: "Workloads holding quota (admitted or waiting for checks), per ClusterQueue.",
		}, []string{"cluster_queue"}),
		AdmittedWorkloads: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "admitted_workloads",
			Help: "Admitted workloads that have not finished, per ClusterQueue.",
		}, []string{"cluster_queue"}),
		ClusterQueueWeightedShare: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "cluster_queue_weighted_share",
			Help: "Fair-sharing share of a ClusterQueue: the most, over resources, of what it borrows per 1000 of what its cohort could lend it, divided by its weight (+Inf for weight 0 while borrowing).",
		}, []string{"cluster_queue"}),
		CohortWeightedShare: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "cohort_weighted_share",
			Help: "Fair-sharing share of a Cohort in its parent: the most, over resources, of what its subtree borrows per 1000 of what its parent could lend it, divided by its weight (+Inf for weight 0 while borrowing).",
		}, []string{"cohort"}),
		CheckCallDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "check_call_duration_seconds",
			Help:    "Latency of calls to admission-check providers.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		}, []string{"check", "method"}),
		CheckCallErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "check_call_errors_total",
			Help: "Calls to admission-check providers that failed or returned an invalid answer.",
		}, []string{"check", "method", "code"}),
		DecisionsStreamed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "decisions_streamed_total",
			Help: "Decisions sent to WatchAdmissions subscribers.",
		}, []string{"action"}),
		DecisionsPublished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "decisions_published_total",
			Help: "Decisions recorded in the decision stream.",
		}, []string{"action"}),
		DecisionRing: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "decision_ring_changes",
			Help: "Recent decisions the decision stream holds so that a subscriber can resume; they leave as the ring's bounds of entries, bytes and age require.",
		}),
		SlowSubscribers: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "stream_slow_subscribers_total",
			Help: "WatchAdmissions subscribers disconnected for falling behind.",
		}),
		WorkloadWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "workload_writes_total",
			Help: "API writes to Workload objects, per operation.",
		}, []string{"operation"}),
		ReservationsUnknown: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "reservation_writes_unknown_total",
			Help: "Reservation writes whose outcome was unknown, per how they settled (landed, superseded, retried, refused, gone, abandoned).",
		}, []string{"outcome"}),
		DeadlineEvictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "pods_ready_timeout_evictions_total",
			Help: "Workloads evicted or deactivated because their pods did not all start by the start-up deadline, per ClusterQueue.",
		}, []string{"cluster_queue"}),
		WatchStreamOpens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "watch_stream_opens_total",
			Help: "WatchChanges streams opened to admission-check providers, per endpoint.",
		}, []string{"endpoint"}),
		WatchStreamsOpen: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "watch_streams_open",
			Help: "WatchChanges streams open now.",
		}),
		WatchKeys: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "watch_keys_total",
			Help: "Evaluation keys pushed on WatchChanges streams, per outcome (evaluate, ignored).",
		}, []string{"outcome"}),
		Revocations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "admission_revocations_total",
			Help: "Admitted workloads evicted because an admission check no longer answered Ready, per check and answer.",
		}, []string{"check", "state"}),
		OwedReleases: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "owed_releases",
			Help: "Releases held in an AdmissionCheck's status.owedReleases for deleted workloads, per check.",
		}, []string{"check"}),
		ReleaseHandovers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "release_wait_handovers_total",
			Help: "Deleted workloads that stopped waiting for a check's provider after --release-wait and handed the Release to the check, per check.",
		}, []string{"check"}),
	}
	var err error
	register := func(c prometheus.Collector) prometheus.Collector {
		if e := reg.Register(c); e != nil {
			var already prometheus.AlreadyRegisteredError
			if errors.As(e, &already) {
				return already.ExistingCollector
			}
			err = errors.Join(err, e)
		}
		return c
	}
	m.CycleDuration = register(m.CycleDuration).(prometheus.Histogram)
	m.CycleWritesDuration = register(m.CycleWritesDuration).(prometheus.Histogram)
	m.CycleReserved = register(m.CycleReserved).(prometheus.Counter)
	m.PendingWorkloads = register(m.PendingWorkloads).(*prometheus.GaugeVec)
	m.ReservingWorkloads = register(m.ReservingWorkloads).(*prometheus.GaugeVec)
	m.AdmittedWorkloads = register(m.AdmittedWorkloads).(*prometheus.GaugeVec)
	m.ClusterQueueWeightedShare = register(m.ClusterQueueWeightedShare).(*prometheus.GaugeVec)
	m.CohortWeightedShare = register(m.CohortWeightedShare).(*prometheus.GaugeVec)
	m.CheckCallDuration = register(m.CheckCallDuration).(*prometheus.HistogramVec)
	m.CheckCallErrors = register(m.CheckCallErrors).(*prometheus.CounterVec)
	m.DecisionsStreamed = register(m.DecisionsStreamed).(*prometheus.CounterVec)
	m.DecisionsPublished = register(m.DecisionsPublished).(*prometheus.CounterVec)
	m.SlowSubscribers = register(m.SlowSubscribers).(prometheus.Counter)
	m.DecisionRing = register(m.DecisionRing).(prometheus.Gauge)
	m.WorkloadWrites = register(m.WorkloadWrites).(*prometheus.CounterVec)
	m.ReservationsUnknown = register(m.ReservationsUnknown).(*prometheus.CounterVec)
	m.DeadlineEvictions = register(m.DeadlineEvictions).(*prometheus.CounterVec)
	m.WatchStreamOpens = register(m.WatchStreamOpens).(*prometheus.CounterVec)
	m.WatchStreamsOpen = register(m.WatchStreamsOpen).(prometheus.Gauge)
	m.WatchKeys = register(m.WatchKeys).(*prometheus.CounterVec)
	m.Revocations = register(m.Revocations).(*prometheus.CounterVec)
	m.OwedReleases = register(m.OwedReleases).(*prometheus.GaugeVec)
	m.ReleaseHandovers = register(m.ReleaseHandovers).(*prometheus.CounterVec)
	if err != nil {
		return nil, fmt.Errorf("register admitter metrics: %w", err)
	}
	return m, nil
}
