package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	sluicev1 "github.com/sluice-dev/sluice/gen/sluice/v1"
	"github.com/sluice-dev/sluice/pkg/crashpoint"
	"github.com/sluice-dev/sluice/pkg/podgroup"
	"github.com/sluice-dev/sluice/services/grouper/internal/podpatch"
	"github.com/sluice-dev/sluice/services/grouper/internal/workload"
)

const (
	// stopWorkers bounds the concurrent stop checks; evictions are rare.
	stopWorkers = 4
	// stopSweep is how often every EVICT and DELETE decision in force is
	// checked again, whatever events were missed.
	stopSweep = 10 * time.Second
)

// stopping reports whether d asks for the workload's pods to stop.
func stopping(d *admitterv1.Decision) bool {
	switch d.GetAction() {
	case admitterv1.Decision_ACTION_EVICT, admitterv1.Decision_ACTION_DELETE:
		return true
	}
	return false
}

// runStopChecks serves the stop queue until ctx ends.
func (r *Reconciler) runStopChecks(ctx context.Context) error {
	go func() {
		<-ctx.Done()
		r.stopQ.ShutDown()
	}()
	for range stopWorkers {
		go r.stopWorker(ctx)
	}
	ticker := time.NewTicker(stopSweep)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
			for _, k := range r.decisions.keys(stopping) {
				if r.opts.Shard.Owns(k.Namespace, k.Name) {
					r.stopQ.Add(k)
				}
			}
		}
	}
}

func (r *Reconciler) stopWorker(ctx context.Context) {
	for {
		key, shutdown := r.stopQ.Get()
		if shutdown {
			return
		}
		if err := r.checkStopped(ctx, key); err != nil {
			r.opts.Log.V(1).Info("stop report failed; retrying", "workload", key.String(), "error", err.Error())
			r.stopQ.AddRateLimited(key)
		} else {
			r.stopQ.Forget(key)
		}
		r.stopQ.Done(key)
	}
}

// checkStopped reports a workload under an EVICT or DELETE decision as
// stopped once none of its pods runs: for an eviction gated pods may stay
// (they wait for the next admission); for a deletion no pod may hold
// sluice's finalizer any more, so the Workload never goes before its pods.
// A pod that ended but still carries the finalizer is left to its finish
// report first. The report gives the workload's quota back, so it is made
// only when no ungate of the workload is in flight, and a pod the cache
// shows gated is taken for gated only once the API server says so.
func (r *Reconciler) checkStopped(ctx context.Context, key workload.Key) error {
	entry, ok := r.decisions.get(key)
	if !ok || !stopping(entry.decision) || r.stops.reported(key, entry.decision) {
		return nil
	}
	if r.ungates.busy(key) {
		return nil // the ungate's end wakes this check again
	}
	d := entry.decision
	var gated []*corev1.Pod
	for _, pod := range r.roster.Pods(key) {
		if !stoppedFor(pod, d) || (podpatch.HasGate(pod) && r.alreadyUngated(pod)) {
			return nil // its own reconcile wakes this check again
		}
		if podpatch.HasGate(pod) && !podgroup.Ended(pod) {
			gated = append(gated, pod)
		}
	}
	if err := r.confirmGated(ctx, gated); err != nil {
		return err
	}
	ref := &sluicev1.WorkloadRef{Namespace: key.Namespace, Name: key.Name, Uid: d.GetWorkload().GetUid()}
	cctx, cancel := context.WithTimeout(ctx, r.opts.CallTimeout)
	defer cancel()
	_, err := r.opts.Admitter.ReportProgress(cctx, &admitterv1.ReportProgressRequest{
		Workload: ref,
		Stopped:  &admitterv1.Stopped{ReservationId: d.GetReservationId()},
	})
	if err != nil {
		return fmt.Errorf("report workload %s stopped: %w", key, err)
	}
	crashpoint.Hit("grouper/report-stopped")
	r.stops.markReported(key, d)
	r.opts.Log.V(1).Info("workload reported stopped", "workload", key.String(), "decision", d.GetAction().String())
	return nil
}

// confirmGated checks with the API server that the pods the cache shows
// gated still are: an ungate whose answer was lost (a timeout, a dropped
// connection) may have landed, and the cache may not have seen an ungate
// yet. A pod found ungated fails the check; it is woken, to be stopped.
func (r *Reconciler) confirmGated(ctx context.Context, pods []*corev1.Pod) error {
	for _, pod := range pods {
		live := &corev1.Pod{}
		err := r.opts.APIReader.Get(ctx, client.ObjectKeyFromObject(pod), live)
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return fmt.Errorf("read pod %s/%s: %w", pod.Namespace, pod.Name, err)
		case live.UID == pod.UID && !podpatch.HasGate(live):
			r.wake <- event.TypedGenericEvent[*corev1.Pod]{Object: pod}
			return fmt.Errorf("pod %s/%s is ungated, the cache shows it gated yet", pod.Namespace, pod.Name)
		}
	}
	return nil
}

// stoppedFor reports whether pod no longer stands in the way of the stop
// decision d asks for. Gated pods wait out an eviction, and the deletion
// of a pod group's finished workload (they are a later run of the group).
func stoppedFor(pod *corev1.Pod, d *admitterv1.Decision) bool {
	if podgroup.Ended(pod) {
		return !podpatch.HasFinalizer(pod)
	}
	if d.GetAction() == admitterv1.Decision_ACTION_EVICT || (d.GetFinished() && workload.IsGroupMember(pod)) {
		return podpatch.HasGate(pod)
	}
	return !podpatch.HasFinalizer(pod)
}
