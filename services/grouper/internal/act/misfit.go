package act

import (
	"context"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/services/grouper/internal/fit"
	"github.com/sluice-dev/sluice/services/grouper/internal/metrics"
	"github.com/sluice-dev/sluice/services/grouper/internal/podstate"
	"github.com/sluice-dev/sluice/services/grouper/internal/workload"
)

// ReasonPodSetMismatch is the Warning on a gated pod that does not fit the
// pod set it was admitted in, and so is not ungated.
const ReasonPodSetMismatch = "PodSetMismatch"

// Misfits keep the pods that do not fit their pod set gated, and tell why.
type Misfits struct {
	// APIReader reads the admitted Workload, to name what changed.
	APIReader client.Reader
	Events    Events
	Metrics   *metrics.Metrics
	Log       logr.Logger
}

// Hold keeps a pod that does not fit its pod set gated. It tells why once
// per pod and problem (reading the Workload, this once, to name what
// changed) and looks again later; a change of the pod or of its decision
// wakes it sooner.
func (m Misfits) Hold(ctx context.Context, pod *corev1.Pod, key workload.Key, d *admitterv1.Decision, v fit.Verdict, st *podstate.State) reconcile.Result {
	if k := v.Key(); k != st.Misfit {
		st.Misfit = k
		m.Metrics.UngateErrors.Inc()
		var tmpl *v1alpha1.PodSetTemplate
		if v.Problem == nil {
			tmpl = m.podSetTemplate(ctx, key, d, v.PodSet)
		}
		msg := fit.Explain(pod, v, tmpl)
		if v.QueueMoved() {
			msg += "; the workload moves to LocalQueue " + v.Problem.Pod + " and queues there"
		}
		m.Events.Warn(pod, ReasonPodSetMismatch, ActionUngate, "not ungated: the pod does not fit pod set %s of workload %s as it was admitted: %s",
			v.PodSet, key.Name, msg)
	}
	return reconcile.Result{RequeueAfter: RecheckAfter}
}

// podSetTemplate reads pod set podSet's template from the Workload d
// admitted, straight from the API server: the cache keeps no Workload
// specs, and only a pod that does not fit needs it. Nil when it cannot be
// read, or the Workload is another one of the name.
func (m Misfits) podSetTemplate(ctx context.Context, key workload.Key, d *admitterv1.Decision, podSet string) *v1alpha1.PodSetTemplate {
	var wl v1alpha1.Workload
	if err := m.APIReader.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: key.Name}, &wl); err != nil {
		m.Log.V(1).Info("read Workload to explain a pod that does not fit its pod set", "workload", key.String(), "error", err.Error())
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
