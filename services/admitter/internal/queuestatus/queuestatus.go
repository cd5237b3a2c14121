// Package queuestatus reports what the scheduler knows of each queue: the
// status of every ClusterQueue, Cohort and LocalQueue (Active condition,
// workload counts, quota reserved, borrowed and lent per flavor, and the
// fair-sharing share while fair sharing is on), written at most once per
// interval and only when it differs; the per-ClusterQueue and per-Cohort
// gauges, whose series are deleted with their queue or Cohort; and one
// summary Event per ClusterQueue and interval for what it admitted,
// instead of one per workload.
package queuestatus

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/services/admitter/internal/lifecycle"
	"github.com/sluice-dev/sluice/services/admitter/internal/metrics"
	"github.com/sluice-dev/sluice/services/admitter/internal/quota"
	"github.com/sluice-dev/sluice/services/admitter/internal/scheduler"
	"github.com/sluice-dev/sluice/services/admitter/internal/workload"
)

// Defaults for Config.
const (
	DefaultInterval      = time.Second
	DefaultEventInterval = 10 * time.Second
)

// Config is what a Reporter needs.
type Config struct {
	// Client writes the statuses; Reader reads the queues (the cache).
	Client   client.Client
	Reader   client.Reader
	Recorder events.EventRecorder
	Metrics  *metrics.Metrics
	// Statuses returns what the scheduler knows of every queue.
	Statuses func() (map[string]scheduler.ClusterQueueStatus, map[types.NamespacedName]scheduler.LocalQueueStatus)
	// CohortStatuses returns what the scheduler knows of every Cohort.
	CohortStatuses func() map[string]scheduler.CohortStatus
	// Interval is the least time between two status writes of one queue.
	Interval time.Duration
	// EventInterval is how often the summary Events are emitted.
	EventInterval time.Duration
}

// Reporter writes queue statuses, gauges and summary Events.
type Reporter struct {
	cfg Config

	mu        sync.Mutex
	summaries map[string]*summary
	// gauged are the ClusterQueues whose gauge series exist, and
	// gaugedCohorts the Cohorts whose share series exist.
	gauged        map[string]bool
	gaugedCohorts map[string]bool
}

type summary struct{ reserved, admitted int }

// New returns a Reporter that reports nothing until Run.
func New(cfg Config) *Reporter {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.EventInterval <= 0 {
		cfg.EventInterval = DefaultEventInterval
	}
	return &Reporter{cfg: cfg, summaries: map[string]*summary{}, gauged: map[string]bool{}, gaugedCohorts: map[string]bool{}}
}

// Reserved counts a reservation for the next summary Event.
func (r *Reporter) Reserved(clusterQueue string, admitted bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.summaries[clusterQueue]
	if s == nil {
		s = &summary{}
		r.summaries[clusterQueue] = s
	}
	if admitted {
		s.admitted++
	} else {
		s.reserved++
	}
}

// Run reports until ctx ends.
func (r *Reporter) Run(ctx context.Context) {
	status := time.NewTicker(r.cfg.Interval)
	defer status.Stop()
	summaries := time.NewTicker(r.cfg.EventInterval)
	defer summaries.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-status.C:
			r.Report(ctx)
		case <-summaries.C:
			r.emitSummaries(ctx)
		}
	}
}

// Report writes every queue status that changed and sets the gauges.
func (r *Reporter) Report(ctx context.Context) {
	cqs, lqs := r.cfg.Statuses()
	r.setGauges(cqs)
	for name, s := range cqs {
		var cq v1alpha1.ClusterQueue
		if err := r.cfg.Reader.Get(ctx, client.ObjectKey{Name: name}, &cq); err != nil {
			continue
		}
		want := cq.DeepCopy()
		workload.SetCondition(&want.Status.Conditions, v1alpha1.ClusterQueueActive, conditionStatus(s.Active), s.Reason, s.Message, cq.Generation)
		want.Status.PendingWorkloads = s.Counts.Pending
		want.Status.ReservingWorkloads = s.Counts.Reserving
		want.Status.AdmittedWorkloads = s.Counts.Admitted
		want.Status.FlavorsReservation = s.Flavors
		want.Status.FairSharing = fairSharingStatus(s.Share)
		r.patch(ctx, &cq, want, cq.Status, want.Status)
	}
	if r.cfg.CohortStatuses != nil {
		cohorts := r.cfg.CohortStatuses()
		r.setCohortGauges(cohorts)
		for name, s := range cohorts {
			var co v1alpha1.Cohort
			if err := r.cfg.Reader.Get(ctx, client.ObjectKey{Name: name}, &co); err != nil {
				continue
			}
			want := co.DeepCopy()
			workload.SetCondition(&want.Status.Conditions, v1alpha1.ClusterQueueActive, conditionStatus(s.Active), s.Reason, s.Message, co.Generation)
			want.Status.FlavorsReservation = s.Flavors
			want.Status.FairSharing = fairSharingStatus(s.Share)
			r.patch(ctx, &co, want, co.Status, want.Status)
		}
	}
	for key, s := range lqs {
		var lq v1alpha1.LocalQueue
		if err := r.cfg.Reader.Get(ctx, key, &lq); err != nil {
			continue
		}
		want := lq.DeepCopy()
		workload.SetCondition(&want.Status.Conditions, v1alpha1.ClusterQueueActive, conditionStatus(s.Active), s.Reason, s.Message, lq.Generation)
		want.Status.PendingWorkloads = s.Counts.Pending
		want.Status.ReservingWorkloads = s.Counts.Reserving
		want.Status.AdmittedWorkloads = s.Counts.Admitted
		r.patch(ctx, &lq, want, lq.Status, want.Status)
	}
}

// setGauges sets the per-ClusterQueue gauges and deletes the series of
// queues that are gone, so a churn of queues does not grow the registry.
func (r *Reporter) setGauges(cqs map[string]scheduler.ClusterQueueStatus) {
	m := r.cfg.Metrics
	for name, s := range cqs {
		m.PendingWorkloads.WithLabelValues(name).Set(float64(s.Counts.Pending))
		m.ReservingWorkloads.WithLabelValues(name).Set(float64(s.Counts.Reserving))
		m.AdmittedWorkloads.WithLabelValues(name).Set(float64(s.Counts.Admitted))
		if s.Share != nil {
			m.ClusterQueueWeightedShare.WithLabelValues(name).Set(s.Share.Value())
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for name := range r.gauged {
		if _, ok := cqs[name]; !ok {
			m.PendingWorkloads.DeleteLabelValues(name)
			m.ReservingWorkloads.DeleteLabelValues(name)
			m.AdmittedWorkloads.DeleteLabelValues(name)
			m.ClusterQueueWeightedShare.DeleteLabelValues(name)
			delete(r.gauged, name)
		}
	}
	for name := range cqs {
		r.gauged[name] = true
	}
}

// setCohortGauges sets the per-Cohort share gauges and deletes the series
// of Cohorts that are gone.
func (r *Reporter) setCohortGauges(cohorts map[string]scheduler.CohortStatus) {
	m := r.cfg.Metrics
	for name, s := range cohorts {
		if s.Share != nil {
			m.CohortWeightedShare.WithLabelValues(name).Set(s.Share.Value())
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for name := range r.gaugedCohorts {
		if _, ok := cohorts[name]; !ok {
			m.CohortWeightedShare.DeleteLabelValues(name)
			delete(r.gaugedCohorts, name)
		}
	}
	for name, s := range cohorts {
		if s.Share != nil {
			r.gaugedCohorts[name] = true
		}
	}
}

// fairSharingStatus is the status of a share: nil (the field cleared)
// while fair sharing is off.
func fairSharingStatus(share *quota.Share) *v1alpha1.FairSharingStatus {
	if share == nil {
		return nil
	}
	return &v1alpha1.FairSharingStatus{WeightedShare: share.Weighted()}
}

// patch writes want's status when it differs from orig's. The admitter
// owns these fields, so a plain merge patch is enough; a stale cache at
// worst repeats a write.
func (r *Reporter) patch(ctx context.Context, orig, want client.Object, have, wantStatus any) {
	if equality.Semantic.DeepEqual(have, wantStatus) {
		return
	}
	if err := r.cfg.Client.Status().Patch(ctx, want, client.MergeFrom(orig), client.FieldOwner(lifecycle.FieldOwner)); err != nil {
		ctrl.LoggerFrom(ctx).V(1).Info("write queue status", "queue", client.ObjectKeyFromObject(orig).String(), "error", err.Error())
	}
}

// emitSummaries writes one aggregated Event per ClusterQueue for what it
// admitted since the last call.
func (r *Reporter) emitSummaries(ctx context.Context) {
	r.mu.Lock()
	counts := r.summaries
	r.summaries = map[string]*summary{}
	r.mu.Unlock()
	for name, c := range counts {
		var cq v1alpha1.ClusterQueue
		if err := r.cfg.Reader.Get(ctx, client.ObjectKey{Name: name}, &cq); err != nil {
			continue
		}
		r.cfg.Recorder.Eventf(&cq, nil, "Normal", "Admitted", "Admit",
			"in the last %s: %d workloads admitted, %d more reserved quota and wait for admission checks",
			r.cfg.EventInterval, c.admitted, c.reserved)
	}
}

func conditionStatus(active bool) metav1.ConditionStatus {
	if active {
		return metav1.ConditionTrue
	}
	return metav1.ConditionFalse
}
