package controller

import (
	"context"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/services/admitter/internal/checks"
)

// Release calls are owed durably: the status write that gives a reservation
// up lists them in status.pendingReleases, and workers call Release until
// each provider acknowledges. Acknowledgements live in memory and are
// written back lazily, with the workload's next status write; after a
// restart the unpruned entries are sent again, which the contract allows
// (Release is idempotent).
const (
	// DefaultReleaseWorkers bounds the Release calls in flight.
	DefaultReleaseWorkers = 8
	// releaseTimeout bounds one Release call.
	releaseTimeout = 30 * time.Second
)

// releaseItem is one Release owed.
type releaseItem struct {
	key           types.NamespacedName
	uid           types.UID
	check         string
	reservationID string
	reason        v1alpha1.ReleaseReason
}

// releases tracks the Release calls owed and acknowledged.
type releases struct {
	q     workqueue.TypedRateLimitingInterface[releaseItem]
	mu    sync.Mutex
	acked map[releaseItem]bool
}

func newReleases() *releases {
	return &releases{
		q: workqueue.NewTypedRateLimitingQueue(
			workqueue.NewTypedItemExponentialFailureRateLimiter[releaseItem](checks.DefaultInitialBackoff, checks.DefaultMaxBackoff)),
		acked: map[releaseItem]bool{},
	}
}

func itemsOf(wl *v1alpha1.Workload) []releaseItem {
	out := make([]releaseItem, 0, len(wl.Status.PendingReleases))
	for _, r := range wl.Status.PendingReleases {
		out = append(out, releaseItem{
			key: types.NamespacedName{Namespace: wl.Namespace, Name: wl.Name}, uid: wl.UID,
			check: r.Name, reservationID: r.ReservationID, reason: r.Reason,
		})
	}
	return out
}

// enqueue queues every Release wl owes that is not acknowledged yet.
func (r *releases) enqueue(wl *v1alpha1.Workload) {
	for _, it := range itemsOf(wl) {
		if !r.isAcked(it) {
			r.q.Add(it)
		}
	}
}

func (r *releases) isAcked(it releaseItem) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.acked[it]
}

func (r *releases) ack(it releaseItem) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.acked[it] = true
}

// outstanding reports whether wl owes a Release not acknowledged yet.
func (r *releases) outstanding(wl *v1alpha1.Workload) bool {
	return slices.ContainsFunc(itemsOf(wl), func(it releaseItem) bool { return !r.isAcked(it) })
}

// prune drops acknowledged entries from status (about to be written) and
// forgets them.
func (r *releases) prune(status *v1alpha1.WorkloadStatus, wl *v1alpha1.Workload) {
	if len(status.PendingReleases) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	status.PendingReleases = slices.DeleteFunc(status.PendingReleases, func(p v1alpha1.PendingRelease) bool {
		it := releaseItem{key: types.NamespacedName{Namespace: wl.Namespace, Name: wl.Name}, uid: wl.UID,
			check: p.Name, reservationID: p.ReservationID, reason: p.Reason}
		return r.acked[it]
	})
}

// forget drops what is known of a workload that is gone.
func (r *releases) forget(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for it := range r.acked {
		if it.key == key {
			delete(r.acked, it)
		}
	}
}

// owe adds to wl's status a Release for each check of its current
// reservation. Call it in the write that gives the reservation up.
func owe(wl *v1alpha1.Workload, reason v1alpha1.ReleaseReason) {
	id := reservationID(wl)
	if id == "" {
		return
	}
	for _, st := range wl.Status.AdmissionChecks {
		if slices.ContainsFunc(wl.Status.PendingReleases, func(p v1alpha1.PendingRelease) bool {
			return p.Name == st.Name && p.ReservationID == id
		}) {
			continue
		}
		wl.Status.PendingReleases = append(wl.Status.PendingReleases, v1alpha1.PendingRelease{Name: st.Name, ReservationID: id, Reason: reason})
	}
}

// releaseWorker sends the Release calls owed until ctx ends.
func (a *Admitter) releaseWorker(ctx context.Context) {
	for {
		it, shutdown := a.releases.q.Get()
		if shutdown {
			return
		}
		if a.sendRelease(ctx, it) {
			a.releases.q.Forget(it)
			a.releases.ack(it)
			a.deletionQ.Add(it.key) // a deleted workload may be waiting for it
		} else if ctx.Err() == nil {
			a.releases.q.AddRateLimited(it)
		}
		a.releases.q.Done(it)
	}
}

// sendRelease calls Release and reports whether the Release is done with:
// acknowledged, not supported by the provider, or owed to a check that no
// longer exists.
func (a *Admitter) sendRelease(ctx context.Context, it releaseItem) bool {
	var ac v1alpha1.AdmissionCheck
	if err := a.cfg.Cache.Get(ctx, clientKey(it.check), &ac); err != nil {
		a.log.V(1).Info("release dropped: the admission check is gone", "check", it.check, "workload", it.key.String())
		return true
	}
	if ac.Status.Provider != nil && !slices.Contains(checks.Capabilities(&ac), checksv1.Capability_CAPABILITY_RELEASE) {
		return true
	}
	params, err := checks.Parameters(&ac)
	if err != nil {
		a.log.V(1).Info("release dropped: the admission check's parameters are invalid", "check", it.check, "error", err.Error())
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, releaseTimeout)
	defer cancel()
	err = a.cfg.Checks.Release(ctx, &ac, &checksv1.ReleaseRequest{
		CheckName: it.check, Parameters: params, EvaluationKey: string(it.uid) + "/" + it.reservationID,
		Namespace: it.key.Namespace, Name: it.key.Name, Uid: string(it.uid), Reason: releaseReasonProto(it.reason),
	})
	if err != nil {
		a.log.V(1).Info("release failed; will retry", "check", it.check, "workload", it.key.String(), "error", err.Error())
		return false
	}
	return true
}

func releaseReasonProto(r v1alpha1.ReleaseReason) checksv1.ReleaseReason {
	switch r {
	case v1alpha1.ReleaseFinished:
		return checksv1.ReleaseReason_RELEASE_REASON_FINISHED
	case v1alpha1.ReleaseDeleted:
		return checksv1.ReleaseReason_RELEASE_REASON_DELETED
	default:
		return checksv1.ReleaseReason_RELEASE_REASON_EVICTED
	}
}
