package controller

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
)

// ReasonUngatedWithoutAdmission is the reason of the Warning event on a
// pod sluice stops because someone else removed its gate.
const ReasonUngatedWithoutAdmission = "UngatedWithoutAdmission"

// actionStop is the action of events about stops no decision asked for.
const actionStop = "Stop"

// gateLoss says how a live managed pod came to be without sluice's gate.
// sluice's own ungate patch removes the gate and, in the same patch,
// writes the annotation sluice.dev/workload, so a pod without either was
// ungated by someone else. Removing the gate together with sluice's
// finalizer, as grouper release-all does, releases the pod on purpose: it
// is sluice's no more. Removing the gate alone runs the pod beyond its
// queue's quota.
type gateLoss int

const (
	// gateKept: the pod is gated, or sluice ungated it, or it is not
	// sluice's to judge (not managed, ended, or being deleted).
	gateKept gateLoss = iota
	// gateRemoved: someone else removed the gate and left sluice's
	// finalizer: the pod runs without an admission.
	gateRemoved
	// gateReleased: someone else removed the gate and sluice's finalizer
	// together: the pod was released on purpose.
	gateReleased
)

// gateLossOf tells how pod lost sluice's gate. ungatedBySluice says this
// grouper's ungate patch of the pod succeeded, which the cache may not
// show yet: such a pod is never taken for one ungated by someone else.
func gateLossOf(pod *corev1.Pod, ungatedBySluice bool) gateLoss {
	if ungatedBySluice || !liveManaged(pod) || !gatedBySluice(pod) || podpatch.HasGate(pod) || carriesUngateMark(pod) {
		return gateKept
	}
	if podpatch.HasFinalizer(pod) {
		return gateRemoved
	}
	return gateReleased
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
func (r *Reconciler) ungatedWithoutAdmission() stopCause {
	return stopCause{
		action:    actionStop,
		message:   fmt.Sprintf("the scheduling gate %s was removed without an admission", podkeys.AdmissionGate),
		eventType: corev1.EventTypeWarning,
		reason:    ReasonUngatedWithoutAdmission,
		note: fmt.Sprintf("the scheduling gate %s was removed by someone other than sluice, without an admission, "+
			"so the pod would run beyond its queue's quota: sluice stops it as it stops an evicted pod. "+
			"To release pods from sluice on purpose, use `grouper release-all`, which removes the finalizer %s too",
			podkeys.AdmissionGate, podkeys.ManagedFinalizer),
		counter: r.opts.Metrics.UngatedWithoutAdmission.WithLabelValues(metrics.ResultStopped),
	}
}

// stopUngated stops a pod someone else ungated without an admission, as
// an evicted pod is stopped, with a Warning event saying why.
func (r *Reconciler) stopUngated(ctx context.Context, pod *corev1.Pod, st *podState) (reconcile.Result, error) {
	if st.evicted {
		return reconcile.Result{}, nil // deleted already; the cache shows it soon
	}
	r.opts.Log.Info("pod ungated without an admission; stopping it", "pod", client.ObjectKeyFromObject(pod))
	return r.stopPod(ctx, pod, r.ungatedWithoutAdmission(), st)
}

// countReleased counts a pod released on purpose, once per pod: it is
// left alone, but whoever watches quota should know it runs outside it.
func (r *Reconciler) countReleased(pod *corev1.Pod, st *podState) {
	if st.released {
		return
	}
	st.released = true
	r.opts.Metrics.UngatedWithoutAdmission.WithLabelValues(metrics.ResultReleased).Inc()
	r.opts.Log.V(1).Info("pod released from sluice's gate and finalizer by someone else; left alone",
		"pod", client.ObjectKeyFromObject(pod))
}
