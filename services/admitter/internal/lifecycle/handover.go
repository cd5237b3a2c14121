package lifecycle

import (
	"context"
	"fmt"
	"strings"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/services/admitter/internal/releases"
	"github.com/sluice-dev/sluice/services/admitter/internal/workload"
)

// Event reasons of a deletion that stops waiting for a provider.
const (
	// ReasonReleaseHandedOver: the Release is kept in the AdmissionCheck's
	// status.owedReleases and the Workload goes.
	ReasonReleaseHandedOver = "ReleaseHandedOver"
	// ReasonOwedReleasesFull: the check's owedReleases is full, so the
	// deletion keeps waiting for its provider.
	ReasonOwedReleasesFull = "OwedReleasesFull"
)

// handOver reports whether a deleted workload whose Releases are still
// outstanding may go anyway, and which Releases it handed over: its
// release wait is over and the Releases are written to their checks'
// status (the Tracker's HandOver). Otherwise it arranges to be asked
// again: at the end of the wait, or when the Tracker's Changed names the
// workload. Call it under the workload's lock.
func (w *Writer) handOver(wl *v1alpha1.Workload) ([]releases.Owed, bool) {
	h := w.cfg.Releases.HandOver(wl, time.Now())
	switch h.Stage {
	case releases.HandedOver:
		return h.Checks, true
	case releases.Waiting:
		if !h.Until.IsZero() {
			w.deletionQ.AddAfter(workload.Key(wl), time.Until(h.Until))
		}
	case releases.Full:
		if h.FirstFull {
			w.cfg.Recorder.Eventf(wl, nil, "Warning", ReasonOwedReleasesFull, "Delete",
				"deletion keeps waiting for %s: status.owedReleases is full (%d entries), so the Release cannot be kept there",
				describeOwed(h.Checks), releases.MaxOwed)
		}
	}
	return nil, false
}

// handedOver tells of the Releases a deleted workload, now gone, handed
// over to its checks.
func (w *Writer) handedOver(ctx context.Context, wl *v1alpha1.Workload, handed []releases.Owed) {
	if len(handed) == 0 {
		return
	}
	for _, o := range handed {
		w.cfg.Recorder.Eventf(wl, nil, "Warning", ReasonReleaseHandedOver, "Delete",
			"deletion stopped waiting for %s after %s: the Release of reservation %s is kept in the AdmissionCheck's status.owedReleases and sent when the provider answers",
			describeOwed([]releases.Owed{o}), w.cfg.Releases.Wait(), o.ReservationID)
		w.cfg.Metrics.ReleaseHandovers.WithLabelValues(o.Check).Inc()
	}
	ctrl.LoggerFrom(ctx).Info("deleted workload no longer waits for its providers", "workload", workload.Key(wl).String(), "checks", describeOwed(handed))
}

// describeOwed names the checks and their providers.
func describeOwed(owed []releases.Owed) string {
	parts := make([]string, 0, len(owed))
	for _, o := range owed {
		provider := o.Provider
		if provider == "" {
			provider = "unknown"
		}
		parts = append(parts, fmt.Sprintf("admission check %s (provider %s)", o.Check, provider))
	}
	return strings.Join(parts, ", ")
}
