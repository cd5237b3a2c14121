// Package metrics defines the grouper's Prometheus metrics.
package metrics

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Results of an admitter call, as metric label values.
const (
	ResultCreated  = "created"
	ResultExisting = "existing"
	ResultOK       = "ok"
	ResultError    = "error"
)

// What became of a pod someone else ungated, as metric label values.
const (
	ResultStopped  = "stopped"
	ResultReleased = "released"
)

// Metrics are the grouper's counters and histograms.
type Metrics struct {
	// Submissions counts SubmitWorkload calls by result (created,
	// existing, error).
	Submissions *prometheus.CounterVec
	// Reports counts ReportProgress calls by result (ok, error).
	Reports *prometheus.CounterVec
	// PodsUngated counts pods ungated by one successful patch.
	PodsUngated prometheus.Counter
	// UngateErrors counts failed ungate patches (each is retried).
	UngateErrors prometheus.Counter
	// DecisionToUngate is the time from receiving an admission to the
	// successful ungate patch of a pod.
	DecisionToUngate prometheus.Histogram
	// AdmissionToUngate is the time from a workload's admission to the
	// successful ungate patch of each of its pods, per ClusterQueue.
	AdmissionToUngate *prometheus.HistogramVec
	// AlreadyUngated counts pods that an admission decision found ungated
	// already, and that were therefore left alone.
	AlreadyUngated prometheus.Counter
	// UngatesSuperseded counts ungates not sent because the admission they
	// were built from was no longer in force (an eviction or deletion came
	// while the grouper prepared them).
	UngatesSuperseded prometheus.Counter
	// Decisions counts decisions received by action.
	Decisions *prometheus.CounterVec
	// StreamConnects counts decision streams opened.
	StreamConnects prometheus.Counter
	// PodsEvicted counts pods deleted because their workload was evicted.
	PodsEvicted prometheus.Counter
	// FinalizersRemoved counts pods released from sluice's finalizer.
	FinalizersRemoved prometheus.Counter
	// UngatedWithoutAdmission counts live managed pods found without
	// sluice's gate that sluice's own ungate patch did not remove, by
	// result: stopped (sluice's finalizer was still on them) or released
	// (the finalizer went with the gate: left alone).
	UngatedWithoutAdmission *prometheus.CounterVec
	// PodGroups counts the scheduler PodGroups the grouper made sure of
	// for KEP-976 groups, by result (created, existing, earlier, foreign,
	// error).
	PodGroups *prometheus.CounterVec
}

// New creates the metrics and registers them on reg.
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		Submissions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_grouper_workload_submissions_total",
			Help: "SubmitWorkload calls to the admitter, by result (created, existing, error).",
		}, []string{"result"}),
		Reports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_grouper_progress_reports_total",
			Help: "ReportProgress calls to the admitter, by result (ok, error).",
		}, []string{"result"}),
		PodsUngated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_grouper_pods_ungated_total",
			Help: "Pods ungated after admission.",
		}),
		UngateErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_grouper_ungate_patch_errors_total",
			Help: "Ungate patches that failed; each is retried with backoff.",
		}),
		DecisionToUngate: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sluice_grouper_decision_to_ungate_seconds",
			Help:    "Time from receiving an admission decision to the pod's successful ungate patch.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16), // 1ms .. ~33s
		}),
		AdmissionToUngate: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_grouper_admission_to_ungate_seconds",
			Help:    "Time from a workload's admission (its Admitted condition) to each of its pods' successful ungate patch, per ClusterQueue.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16), // 1ms .. ~33s
		}, []string{"cluster_queue"}),
		AlreadyUngated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_grouper_decision_pods_already_ungated_total",
			Help: "Pods an admission decision found already ungated (repeated decisions, snapshots); no patch is sent for them.",
		}),
		UngatesSuperseded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_grouper_ungates_superseded_total",
			Help: "Ungates not sent because the admission they were built from was no longer in force when the patch was due.",
		}),
		Decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_grouper_decisions_total",
			Help: "Decisions received from the admitter's stream, by action.",
		}, []string{"action"}),
		StreamConnects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_grouper_decision_stream_connects_total",
			Help: "Decision streams opened to the admitter.",
		}),
		PodsEvicted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_grouper_pods_evicted_total",
			Help: "Pods deleted because their workload was evicted.",
		}),
		FinalizersRemoved: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_grouper_finalizers_removed_total",
			Help: "Pods released from sluice's finalizer.",
		}),
	}
	m.UngatedWithoutAdmission = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_grouper_pods_ungated_without_admission_total",
		Help: "Live managed pods found ungated by someone other than sluice, by result (stopped: sluice's finalizer was still on them; released: the finalizer went too, left alone).",
	}, []string{"result"})
	// Both series exist from the start, so an alert on a rise sees the
	// first one.
	for _, result := range []string{ResultStopped, ResultReleased} {
		m.UngatedWithoutAdmission.WithLabelValues(result)
	}
	m.PodGroups = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_grouper_podgroups_total",
		Help: "Scheduler PodGroups ensured for pod groups before ungating, by result (created; existing: this run's was there; earlier: an earlier run's is used until it goes; foreign: one sluice did not create is used as it is; error).",
	}, []string{"result"})
	for _, c := range []prometheus.Collector{
		m.Submissions, m.Reports, m.PodsUngated, m.UngateErrors, m.DecisionToUngate, m.AdmissionToUngate,
		m.AlreadyUngated, m.Decisions, m.StreamConnects, m.PodsEvicted, m.FinalizersRemoved, m.PodGroups,
		m.UngatedWithoutAdmission, m.UngatesSuperseded,
	} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register grouper metrics: %w", err)
		}
	}
	return m, nil
}
