package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/services/admitter/internal/lifecycle"
	"github.com/sluice-dev/sluice/services/admitter/internal/scheduler"
	"github.com/sluice-dev/sluice/services/admitter/internal/workload"
)

// A reservation write answered by a timeout, a dropped connection or a 5xx
// may have reached etcd, and the informer may show it only later. Its
// quota therefore stays assumed in the scheduler, so that no other
// workload is given it, until the API server shows what happened.

// Backoff between attempts to settle a write whose outcome stays unknown.
const (
	settleInitialBackoff = 100 * time.Millisecond
	settleMaxBackoff     = 30 * time.Second
)

// How a write whose outcome was unknown settled (the outcome label of
// metrics.ReservationsUnknown).
const (
	// settledLanded: the reservation is in the workload.
	settledLanded = "landed"
	// settledSuperseded: the workload changed otherwise, so the write can
	// no longer land; the scheduler follows the newer version.
	settledSuperseded = "superseded"
	// settledRetried: the same write was made again and landed.
	settledRetried = "retried"
	// settledRefused: the same write made again was refused.
	settledRefused = "refused"
	// settledGone: the workload was deleted.
	settledGone = "gone"
	// settledAbandoned: the admitter stopped leading first.
	settledAbandoned = "abandoned"
)

// notWritten reports whether err, from a reservation write, proves that
// nothing was written: no write was sent (ErrMoved), it lost to a newer
// version (ErrStale), or the API server refused it outright. Anything else
// may have landed.
func notWritten(err error) bool {
	switch {
	case errors.Is(err, lifecycle.ErrMoved), errors.Is(err, lifecycle.ErrStale):
		return true
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err), apierrors.IsForbidden(err),
		apierrors.IsUnauthorized(err), apierrors.IsMethodNotSupported(err), apierrors.IsNotAcceptable(err),
		apierrors.IsUnsupportedMediaType(err), apierrors.IsRequestEntityTooLargeError(err):
		return true
	}
	return false
}

// settle finds out what became of reservation r, written with reservation
// id id, whose write failed with cause that does not say whether it
// landed. It keeps trying, with backoff, until it knows or ctx ends; the
// quota stays assumed meanwhile.
func (a *Admitter) settle(ctx context.Context, r scheduler.Reservation, id string, cause error) {
	log := ctrl.LoggerFrom(ctx).WithValues("workload", workload.Key(r.Workload).String(), "reservationID", id)
	log.Error(cause, "reserve quota: the write's outcome is unknown; its quota stays held until the API server shows it")
	delay, reread := settleInitialBackoff, false
	for {
		outcome, err := a.settleOnce(ctx, r, id)
		if outcome != "" {
			a.cfg.Metrics.ReservationsUnknown.WithLabelValues(outcome).Inc()
			if err != nil {
				log.Error(err, "reservation write settled", "outcome", outcome)
			} else {
				log.Info("reservation write settled", "outcome", outcome)
			}
			return
		}
		if err == nil {
			// The write lost to a newer version, which a (quorum) read
			// shows at once; a read that does not waits like any error.
			if !reread {
				reread = true
				continue
			}
			err = errors.New("the write lost to a newer version the API server does not show yet")
		}
		reread = false
		log.V(1).Info("reservation write still unsettled", "error", err.Error(), "retryAfter", delay)
		select {
		case <-ctx.Done():
			a.cfg.Metrics.ReservationsUnknown.WithLabelValues(settledAbandoned).Inc()
			log.Info("reservation write left unsettled: the admitter stopped", "lastError", err.Error())
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, settleMaxBackoff)
	}
}

// settleOnce reads the workload from the API server and acts on it. It
// returns how the write settled, or no outcome and either nil (read again
// now) or the error that left the outcome unknown.
func (a *Admitter) settleOnce(ctx context.Context, r scheduler.Reservation, id string) (string, error) {
	key := workload.Key(r.Workload)
	var live v1alpha1.Workload
	if err := a.cfg.APIReader.Get(ctx, key, &live); err != nil && !apierrors.IsNotFound(err) {
		return "", fmt.Errorf("read workload %s: %w", key, err)
	}
	switch {
	case live.UID != r.Workload.UID:
		// Deleted (perhaps created anew): the guarded write can no longer
		// land. Unassume undoes only the assumption itself, so a deletion
		// the informer delivered first stays as it is.
		a.sched.Unassume(r.Workload)
		a.triggerCycle()
		return settledGone, nil
	case live.ResourceVersion != r.Workload.ResourceVersion:
		// Our write or another: either way the write made against the old
		// version cannot land any more, and the newest version replaces
		// the assumption.
		a.catchUp(&live)
		if workload.ReservationID(&live) == id {
			a.writer.ReservationLanded(&live)
			return settledLanded, nil
		}
		return settledSuperseded, nil
	}
	// Not landed yet, but the lost request may still land. The same write
	// under the same precondition settles it: exactly one of the two can
	// land, and either way it is this reservation.
	err := a.writer.Reserve(ctx, r, id)
	switch {
	case err == nil:
		return settledRetried, nil
	case errors.Is(err, lifecycle.ErrStale), errors.Is(err, lifecycle.ErrMoved):
		return "", nil
	case notWritten(err):
		// The same write refused again: the lost one was no better.
		a.sched.Unassume(r.Workload)
		a.triggerCycle()
		return settledRefused, err
	}
	return "", err
}

// catchUp hands live, read from the API server, to the admitter as the
// informer would; the store and the scheduler ignore it if they hold it
// or newer already (the informer came first). The scheduler is then told
// the store's version as well, in case the store learnt of it without the
// scheduler (a fresh read): an assumption must not outlive the version
// that replaced it.
func (a *Admitter) catchUp(live *v1alpha1.Workload) {
	a.record(live)
	if cur := a.store.Get(workload.Key(live)); cur != nil {
		a.sched.Observe(cur)
	}
}
