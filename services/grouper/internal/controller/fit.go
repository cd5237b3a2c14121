package controller

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	sluicev1 "github.com/sluice-dev/sluice/gen/sluice/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/podgroup"
	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/services/grouper/internal/fit"
	"github.com/sluice-dev/sluice/services/grouper/internal/workload"
)

// ReasonPodSetMismatch is the Warning on a gated pod that does not fit the
// pod set it was admitted in, and so is not ungated.
const ReasonPodSetMismatch = "PodSetMismatch"

// singlePodFits checks a single pod against its admission before it is
// ungated. A pod that does not fit stays gated; one that names another
// LocalQueue has its workload follow it there (which ends this
// admission), as a gated pod without a decision does.
func (r *Reconciler) singlePodFits(ctx context.Context, pod *corev1.Pod, key workload.Key, d *admitterv1.Decision,
	st *podState) (fits bool, res reconcile.Result, err error) {
	v, err := fit.Check(pod, d, workload.SinglePodSetName, true)
	if err != nil {
		return false, reconcile.Result{}, err
	}
	if v.Fits() {
		st.misfit = ""
		return true, reconcile.Result{}, nil
	}
	res = r.misfit(ctx, pod, key, d, v, st)
	if v.QueueMoved() {
		if _, err := r.submit(ctx, pod, st); err != nil {
			return false, reconcile.Result{}, err
		}
	}
	return false, res, nil
}

// misfit keeps a pod that does not fit its pod set gated. It tells why
// once per pod and problem (reading the Workload, this once, to name what
// changed) and looks again later; a change of the pod or of its decision
// wakes it sooner.
func (r *Reconciler) misfit(ctx context.Context, pod *corev1.Pod, key workload.Key, d *admitterv1.Decision, v fit.Verdict, st *podState) reconcile.Result {
	if k := v.Key(); k != st.misfit {
		st.misfit = k
		r.opts.Metrics.UngateErrors.Inc()
		var tmpl *v1alpha1.PodSetTemplate
		if v.Problem == nil {
			tmpl = r.podSetTemplate(ctx, key, d, v.PodSet)
		}
		msg := fit.Explain(pod, v, tmpl)
		if v.QueueMoved() {
			msg += "; the workload moves to LocalQueue " + v.Problem.Pod + " and queues there"
		}
		r.warn(pod, ReasonPodSetMismatch, actionUngate, "not ungated: the pod does not fit pod set %s of workload %s as it was admitted: %s",
			v.PodSet, key.Name, msg)
	}
	return reconcile.Result{RequeueAfter: recheckAfter}
}

// podSetTemplate reads pod set podSet's template from the Workload d
// admitted, straight from the API server: the cache keeps no Workload
// specs, and only a pod that does not fit needs it. Nil when it cannot be
// read, or the Workload is another one of the name.
func (r *Reconciler) podSetTemplate(ctx context.Context, key workload.Key, d *admitterv1.Decision, podSet string) *v1alpha1.PodSetTemplate {
	var wl v1alpha1.Workload
	if err := r.opts.APIReader.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: key.Name}, &wl); err != nil {
		r.opts.Log.V(1).Info("read Workload to explain a pod that does not fit its pod set", "workload", key.String(), "error", err.Error())
		return nil
	}
	if uid := d.GetWorkload().GetUid(); uid != "" && string(wl.UID) != uid {
		return nil
	}
	for i := range wl.Spec.PodSets {
		if wl.Spec.PodSets[i].Name == podSet {
			return &wl.Spec.PodSets[i].Template
		}
	}
	return nil
}

// followQueue moves an admitted group whose pods all name another
// LocalQueue there, as submitGroup moves a gated one; the move ends the
// admission. While the pods disagree the group stays, and the pods that
// moved stay gated.
func (r *Reconciler) followQueue(ctx context.Context, key workload.Key, ref *sluicev1.WorkloadRef) error {
	queue := ""
	for _, p := range r.roster.Pods(key) {
		if podgroup.Released(p) {
			continue // a run that is over
		}
		q := p.Labels[podkeys.QueueNameLabel]
		if queue != "" && q != queue {
			return nil
		}
		queue = q
	}
	if queue == "" {
		return nil
	}
	moved := false
	r.groups.update(key, func(g *groupState) { moved = g.submitted && g.queue == queue })
	if moved {
		return nil
	}
	if err := r.moveQueue(ctx, &sluicev1.Workload{Ref: ref, QueueName: queue}); err != nil {
		return err
	}
	r.groups.update(key, func(g *groupState) { g.submitted, g.queue = true, queue })
	return nil
}
