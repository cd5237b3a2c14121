package act

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	"github.com/sluice-dev/sluice/pkg/crashpoint"
	"github.com/sluice-dev/sluice/services/grouper/internal/metrics"
	"github.com/sluice-dev/sluice/services/grouper/internal/podpatch"
	"github.com/sluice-dev/sluice/services/grouper/internal/podstate"
)

// disruptionReason is the DisruptionTarget condition's reason on pods
// deleted for an eviction.
const disruptionReason = "EvictedBySluice"

// Pods stops pods and releases them from sluice's finalizer.
type Pods struct {
	Client  client.Client
	Events  Events
	Metrics *metrics.Metrics
	Now     func() time.Time
	Log     logr.Logger
}

// Evict deletes a running pod of an evicted workload, marking why first.
func (p Pods) Evict(ctx context.Context, pod *corev1.Pod, d *admitterv1.Decision, st *podstate.State) (reconcile.Result, error) {
	if st.Evicted || (podpatch.HasGate(pod) && !st.Ungated) {
		// A gated pod holds nothing: it stays queued for the next
		// admission. One this grouper ungated is running, whatever the
		// cache shows yet.
		return reconcile.Result{}, nil
	}
	msg := d.GetMessage()
	if msg == "" {
		msg = "workload evicted"
	}
	return p.stop(ctx, pod, p.decidedStop(actionEvict, msg), st)
}

// Remove deletes a pod of a deleted Workload, gated or not: the workload
// will never be submitted again.
func (p Pods) Remove(ctx context.Context, pod *corev1.Pod, d *admitterv1.Decision, st *podstate.State) (reconcile.Result, error) {
	if st.Evicted {
		return reconcile.Result{}, nil
	}
	msg := d.GetMessage()
	if msg == "" {
		msg = "the Workload was deleted"
	}
	return p.stop(ctx, pod, p.decidedStop(actionDelete, msg), st)
}

// stopCause is why sluice stops a pod: the message of the pod's
// DisruptionTarget condition, the one event that tells the stop, and the
// counter of such stops.
type stopCause struct {
	action    string
	message   string
	eventType string
	reason    string
	note      string
	counter   prometheus.Counter
}

// decidedStop is the cause of a stop the admitter decided (an eviction, a
// deleted Workload): a Normal Stopped event, counted as an eviction.
func (p Pods) decidedStop(action, msg string) stopCause {
	return stopCause{
		action:    action,
		message:   msg,
		eventType: corev1.EventTypeNormal,
		reason:    ReasonStopped,
		note:      "Stopped: " + msg,
		counter:   p.Metrics.PodsEvicted,
	}
}

// stop deletes pod with one event. A pod that may run gets the
// DisruptionTarget condition first, so its owner (and anyone reading it)
// can tell a stop by sluice from a failure.
func (p Pods) stop(ctx context.Context, pod *corev1.Pod, cause stopCause, st *podstate.State) (reconcile.Result, error) {
	target := &corev1.Pod{}
	target.Namespace, target.Name = pod.Namespace, pod.Name
	if (!podpatch.HasGate(pod) || st.Ungated) && !disrupted(pod) {
		cond, err := podpatch.DisruptionTarget(disruptionReason, cause.message, p.Now())
		if err != nil {
			return reconcile.Result{}, err
		}
		if err := p.Client.Status().Patch(ctx, target, client.RawPatch(types.StrategicMergePatchType, cond)); err != nil {
			if apierrors.IsNotFound(err) {
				return reconcile.Result{}, nil
			}
			p.Events.Warn(pod, ReasonEvictFailed, cause.action, "marking the pod for eviction failed, retrying: %v", err)
			return reconcile.Result{}, fmt.Errorf("mark pod %s/%s disrupted: %w", pod.Namespace, pod.Name, err)
		}
		crashpoint.Hit("grouper/disrupt")
	}
	uid := pod.UID
	if err := p.Client.Delete(ctx, target, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
		p.Events.Warn(pod, ReasonEvictFailed, cause.action, "deleting the pod failed, retrying: %v", err)
		return reconcile.Result{}, fmt.Errorf("delete pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	crashpoint.Hit("grouper/delete")
	st.Evicted = true
	cause.counter.Inc()
	p.Events.Recorder.Eventf(pod, nil, cause.eventType, cause.reason, cause.action, "%s", cause.note)
	return reconcile.Result{}, nil
}

// disrupted reports whether sluice already marked the pod for deletion.
func disrupted(pod *corev1.Pod) bool {
	return disruption(pod) != nil
}

func disruption(pod *corev1.Pod) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		c := &pod.Status.Conditions[i]
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue && c.Reason == disruptionReason {
			return c
		}
	}
	return nil
}

// FailureMessage says why a Failed pod failed; for a pod sluice stopped,
// why it was stopped.
func FailureMessage(pod *corev1.Pod) string {
	if c := disruption(pod); c != nil {
		return "pod stopped by sluice: " + c.Message
	}
	msg := "pod failed"
	if pod.Status.Reason != "" {
		msg += ": " + pod.Status.Reason
	}
	if pod.Status.Message != "" {
		msg += ": " + pod.Status.Message
	}
	return msg
}

// RemoveFinalizer removes sluice's finalizer from pod with a guarded JSON
// patch, once: st remembers it, so a reconcile of an event from before
// the removal, with the cache not caught up yet, sends nothing.
func (p Pods) RemoveFinalizer(ctx context.Context, pod *corev1.Pod, st *podstate.State) error {
	if st.FinalizerRemoved {
		return nil
	}
	patch, found, err := podpatch.RemoveFinalizer(pod)
	if err != nil || !found {
		return err
	}
	target := &corev1.Pod{}
	target.Namespace, target.Name = pod.Namespace, pod.Name
	if err := p.Client.Patch(ctx, target, client.RawPatch(types.JSONPatchType, patch)); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		// A failed test means the pod changed since the cache saw it;
		// the retry reads the newer pod.
		return fmt.Errorf("remove finalizer of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	crashpoint.Hit("grouper/remove-finalizer")
	st.FinalizerRemoved = true
	p.Metrics.FinalizersRemoved.Inc()
	return nil
}
