package act

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/sluice-dev/sluice/pkg/podgroup"
	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/services/grouper/internal/metrics"
	"github.com/sluice-dev/sluice/services/grouper/internal/podpatch"
	"github.com/sluice-dev/sluice/services/grouper/internal/podstate"
)

// ReasonUngatedWithoutAdmission is the reason of the Warning event on a
// pod sluice stops because someone else removed its gate.
const ReasonUngatedWithoutAdmission = "UngatedWithoutAdmission"

// actionStop is the action of events about stops no decision asked for.
const actionStop = "Stop"

// GateLoss says how a live managed pod came to be without sluice's gate.
// sluice's own ungate patch removes the gate and, in the same patch,
// writes the annotation sluice.dev/workload, so a pod without either was
// ungated by someone else. Removing the gate together with sluice's
// finalizer, as grouper release-all does, releases the pod on purpose: it
// is sluice's no more. Removing the gate alone runs the pod beyond its
// queue's quota.
type GateLoss int

const (
	// GateKept: the pod is gated, or sluice ungated it, or it is not
	// sluice's to judge (not managed, ended, or being deleted).
	GateKept GateLoss = iota
	// GateRemoved: someone else removed the gate and left sluice's
	// finalizer: the pod runs without an admission.
	GateRemoved
	// GateReleased: someone else removed the gate and sluice's finalizer
	// together: the pod was released on purpose.
	GateReleased
)

// GateLossOf tells how pod lost sluice's gate. ungatedBySluice says this
// grouper's ungate patch of the pod succeeded, which the cache may not
// show yet: such a pod is never taken for one ungated by someone else.
func GateLossOf(pod *corev1.Pod, ungatedBySluice bool) GateLoss {
	if ungatedBySluice || !liveManaged(pod) || !gatedBySluice(pod) || podpatch.HasGate(pod) || carriesUngateMark(pod) {
		return GateKept
	}
	if podpatch.HasFinalizer(pod) {
		return GateRemoved
	}
	return GateReleased
}

// liveManaged reports whether pod carries the managed label, has not
// ended and is not being deleted.
func liveManaged(pod *corev1.Pod) bool {
	return pod.Labels[podkeys.ManagedLabel] == podkeys.ManagedLabelValue && !podgroup.Ended(pod) && pod.DeletionTimestamp == nil
}

// gatedBySluice reports whether sluice's webhook gated pod: it stamps
// every pod it gates with sluice.dev/traceparent, which nobody else may
// write. The grouper's cache holds every pod labelled managed, and Kueue's
// pod integration, on namespaces of its own, labels, gates and ungates its
// pods with the same keys: those are never sluice's to stop.
func gatedBySluice(pod *corev1.Pod) bool {
	_, ok := pod.Annotations[podkeys.TraceparentAnnotation]
	return ok
}

// carriesUngateMark reports whether pod carries what only sluice's ungate
// patch writes, in the same patch that removes the gate.
func carriesUngateMark(pod *corev1.Pod) bool {
	_, ok := pod.Annotations[podkeys.WorkloadAnnotation]
	return ok
}

// ungatedWithoutAdmission is why sluice stops a pod someone else ungated
// without an admission, in the pod's DisruptionTarget condition and in
// its Warning event.
func (p Pods) ungatedWithoutAdmission() stopCause {
	return stopCause{
		action:    actionStop,
		message:   fmt.Sprintf("the scheduling gate %s was removed without an admission", podkeys.AdmissionGate),
		eventType: corev1.EventTypeWarning,
		reason:    ReasonUngatedWithoutAdmission,
		note: fmt.Sprintf("the scheduling gate %s was removed by someone other than sluice, without an admission, "+
			"so the pod would run beyond its queue's quota: sluice stops it as it stops an evicted pod. "+
			"To release pods from sluice on purpose, use `grouper release-all`, which removes the finalizer %s too",
			podkeys.AdmissionGate, podkeys.ManagedFinalizer),
		counter: p.Metrics.UngatedWithoutAdmission.WithLabelValues(metrics.ResultStopped),
	}
}

// StopUngated stops a pod someone else ungated without an admission, as
// an evicted pod is stopped, with a Warning event saying why.
func (p Pods) StopUngated(ctx context.Context, pod *corev1.Pod, st *podstate.State) (reconcile.Result, error) {
	if st.Evicted {
		return reconcile.Result{}, nil // deleted already; the cache shows it soon
	}
	p.Log.Info("pod ungated without an admission; stopping it", "pod", client.ObjectKeyFromObject(pod))
	return p.stop(ctx, pod, p.ungatedWithoutAdmission(), st)
}

// CountReleased counts a pod released on purpose, once per pod: it is
// left alone, but whoever watches quota should know it runs outside it.
func (p Pods) CountReleased(pod *corev1.Pod, st *podstate.State) {
	if st.Released {
		return
	}
	st.Released = true
	p.Metrics.UngatedWithoutAdmission.WithLabelValues(metrics.ResultReleased).Inc()
	p.Log.V(1).Info("pod released from sluice's gate and finalizer by someone else; left alone",
		"pod", client.ObjectKeyFromObject(pod))
}
