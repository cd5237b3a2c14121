// Package single is the path of a pod that is a workload of its own: its
// submission (and its move when it changes LocalQueue), the check that it
// still fits the pod set it was admitted in, its ungate, and its end:
// eviction, deletion, the report of how it finished and its release from
// sluice's finalizer.
package single

import (
	"context"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	sluicev1 "github.com/sluice-dev/sluice/gen/sluice/v1"
	"github.com/sluice-dev/sluice/pkg/crashpoint"
	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/services/grouper/internal/act"
	"github.com/sluice-dev/sluice/services/grouper/internal/decisions"
	"github.com/sluice-dev/sluice/services/grouper/internal/fit"
	"github.com/sluice-dev/sluice/services/grouper/internal/podpatch"
	"github.com/sluice-dev/sluice/services/grouper/internal/podstate"
	"github.com/sluice-dev/sluice/services/grouper/internal/workload"
)

// Path brings single pods forward.
type Path struct {
	Admitter act.Admitter
	Ungater  *act.Ungater
	Pods     act.Pods
	Misfits  act.Misfits
	Events   act.Events
	// NoteStarted has the started pods of an admission with a start-up
	// deadline counted soon.
	NoteStarted func(workload.Key, decisions.Entry)
	Log         logr.Logger
}

// Reconcile brings one single pod forward under the decision entry in
// force for its workload key (decided says there is one): report and
// release it when it ended, apply the decision, or submit the workload.
func (p *Path) Reconcile(ctx context.Context, pod *corev1.Pod, key workload.Key, entry decisions.Entry, decided bool, st *podstate.State) (reconcile.Result, error) {
	action := entry.Decision.GetAction()
	switch {
	case pod.Status.Phase == corev1.PodSucceeded:
		return p.finish(ctx, pod, key, st, &admitterv1.Finish{Succeeded: true, Message: "pod succeeded"})
	case pod.Status.Phase == corev1.PodFailed:
		return p.finish(ctx, pod, key, st, &admitterv1.Finish{Succeeded: false, Message: act.FailureMessage(pod)})
	case pod.DeletionTimestamp != nil:
		return p.deleted(ctx, pod, key, st)
	}

	loss := act.GateLossOf(pod, st.Ungated)
	switch {
	case decided && action == admitterv1.Decision_ACTION_DELETE:
		return p.Pods.Remove(ctx, pod, entry.Decision, st)
	case decided && action == admitterv1.Decision_ACTION_EVICT:
		return p.Pods.Evict(ctx, pod, entry.Decision, st)
	case loss == act.GateRemoved:
		// Even under an admission: the pod runs without the node
		// selector and tolerations the admission sets.
		return p.Pods.StopUngated(ctx, pod, st)
	case loss == act.GateReleased:
		p.Pods.CountReleased(pod, st)
		return p.running(key, entry)
	case !podpatch.HasGate(pod) || st.Ungated:
		return p.running(key, entry)
	case decided && action == admitterv1.Decision_ACTION_ADMIT:
		return p.ungate(ctx, pod, key, entry, st)
	default:
		return p.submit(ctx, pod, st)
	}
}

// running has the started pods of a pod that runs, or may, counted when
// its admission has a start-up deadline.
func (p *Path) running(key workload.Key, entry decisions.Entry) (reconcile.Result, error) {
	p.NoteStarted(key, entry)
	return reconcile.Result{}, nil
}

// submit sends the pod's workload to the admitter, once per queue: when
// the pod moves to another LocalQueue while gated, the workload moves
// with it.
func (p *Path) submit(ctx context.Context, pod *corev1.Pod, st *podstate.State) (reconcile.Result, error) {
	if st.Submitted && st.Queue == pod.Labels[podkeys.QueueNameLabel] {
		return reconcile.Result{}, nil
	}
	wl, err := workload.ForSinglePod(pod)
	if err != nil {
		if !st.Warned {
			p.Events.Warn(pod, act.ReasonSubmitFailed, act.ActionSubmit, "not queued: %v", err)
			st.Warned = true
		}
		return reconcile.Result{}, nil
	}
	log := p.Log.WithValues("pod", client.ObjectKeyFromObject(pod), "workload", wl.GetRef().GetName())
	created, refused, err := p.Admitter.Submit(ctx, pod, wl, "workload "+wl.GetRef().GetName(), true)
	if err != nil {
		return reconcile.Result{}, err
	}
	if refused != "" {
		p.Events.Warn(pod, act.ReasonSubmitFailed, act.ActionSubmit, "%s", refused)
		return reconcile.Result{RequeueAfter: act.RecheckAfter}, nil
	}
	st.Submitted, st.Queue = true, wl.GetQueueName()
	log.V(1).Info("workload submitted", "created", created)
	return reconcile.Result{}, nil
}

// ungate applies an admission to a gated pod with one patch, if the pod
// still fits its pod set.
func (p *Path) ungate(ctx context.Context, pod *corev1.Pod, key workload.Key, entry decisions.Entry, st *podstate.State) (reconcile.Result, error) {
	d := entry.Decision
	if fits, res, err := p.fits(ctx, pod, key, d, st); !fits {
		return res, err
	}
	info, err := act.PodSetInfoFor(d, workload.SinglePodSetName)
	if err == nil {
		var patch []byte
		patch, err = podpatch.Ungate(pod, info, &sluicev1.WorkloadRef{Namespace: key.Namespace, Name: key.Name, Uid: d.GetWorkload().GetUid()}, d.GetReservationId())
		if err == nil {
			return p.Ungater.Send(ctx, pod, key, entry, st, patch)
		}
	}
	// The admission cannot be applied as it is; only a new decision (or
	// a changed pod) can help.
	return p.Ungater.CannotApply(pod, "admission of workload "+key.Name+" cannot be applied: "+err.Error())
}

// fits checks a single pod against its admission before it is ungated. A
// pod that does not fit stays gated; one that names another LocalQueue
// has its workload follow it there (which ends this admission), as a
// gated pod without a decision does.
func (p *Path) fits(ctx context.Context, pod *corev1.Pod, key workload.Key, d *admitterv1.Decision,
	st *podstate.State) (fits bool, res reconcile.Result, err error) {
	v, err := fit.Check(pod, d, workload.SinglePodSetName, true)
	if err != nil {
		return false, reconcile.Result{}, err
	}
	if v.Fits() {
		st.Misfit = ""
		return true, reconcile.Result{}, nil
	}
	res = p.Misfits.Hold(ctx, pod, key, d, v, st)
	if v.QueueMoved() {
		if _, err := p.submit(ctx, pod, st); err != nil {
			return false, reconcile.Result{}, err
		}
	}
	return false, res, nil
}

// deleted handles a pod being deleted before it ended. A pod that never
// reached a node will never run: its workload ends and its finalizer goes.
// A pod on a node waits for the kubelet to record how it ended.
func (p *Path) deleted(ctx context.Context, pod *corev1.Pod, key workload.Key, st *podstate.State) (reconcile.Result, error) {
	switch {
	case podpatch.HasGate(pod):
		return p.finish(ctx, pod, key, st, &admitterv1.Finish{Message: "pod deleted before it was admitted"})
	case pod.Spec.NodeName == "":
		return p.finish(ctx, pod, key, st, &admitterv1.Finish{Message: "pod deleted before it was scheduled"})
	default:
		return reconcile.Result{}, nil
	}
}

// finish reports the end of the pod's workload, and once the admitter has
// it, removes sluice's finalizer. A workload the admitter does not know
// (never created, or already gone) needs no report.
func (p *Path) finish(ctx context.Context, pod *corev1.Pod, key workload.Key, st *podstate.State, fin *admitterv1.Finish) (reconcile.Result, error) {
	if !podpatch.HasFinalizer(pod) {
		return reconcile.Result{}, nil
	}
	// A pod without a queue name was never submitted: nothing to report.
	if !st.Reported && pod.Labels[podkeys.QueueNameLabel] != "" {
		ref := &sluicev1.WorkloadRef{Namespace: key.Namespace, Name: key.Name}
		if _, err := p.Admitter.Progress(ctx, pod, &admitterv1.ReportProgressRequest{Workload: ref, Finish: fin},
			"finish of workload "+key.String()); err != nil {
			return reconcile.Result{}, err
		}
		crashpoint.Hit("grouper/report-finish")
		st.Reported = true
	}
	return reconcile.Result{}, p.Pods.RemoveFinalizer(ctx, pod, st)
}
