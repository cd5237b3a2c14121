package act

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	sluicev1 "github.com/sluice-dev/sluice/gen/sluice/v1"
	"github.com/sluice-dev/sluice/pkg/crashpoint"
	"github.com/sluice-dev/sluice/services/grouper/internal/decisions"
	"github.com/sluice-dev/sluice/services/grouper/internal/metrics"
	"github.com/sluice-dev/sluice/services/grouper/internal/podstate"
	"github.com/sluice-dev/sluice/services/grouper/internal/workload"
)

// Ungater sends the ungate patches of admitted pods, only under the
// admission in force, and counts them in flight meanwhile.
type Ungater struct {
	Client    client.Client
	Spans     Spans
	Events    Events
	Metrics   *metrics.Metrics
	Decisions *decisions.Store
	InFlight  *decisions.Ungates
	// PodStates keeps what an ungate changed of a pod as soon as it is
	// known.
	PodStates *podstate.Store
	// StopCheck has a workload's stop check look again.
	StopCheck func(workload.Key)
	Now       func() time.Time
}

// Send applies the ungate patch built for pod from the admission entry.
func (u *Ungater) Send(ctx context.Context, pod *corev1.Pod, key workload.Key, entry decisions.Entry, st *podstate.State, patch []byte) (reconcile.Result, error) {
	// The decision may have changed while the patch was built (a group
	// asks the admitter and the API server first): only the admission in
	// force may ungate, and the workload's stop check waits for the answer.
	if !u.InFlight.Begin(key, entry.Decision, u.Decisions) {
		u.Metrics.UngatesSuperseded.Inc()
		return reconcile.Result{}, nil // the newer decision woke the pod
	}
	defer u.end(key)
	ctx, span := u.Spans.Start(ctx, pod, "grouper.Ungate", &sluicev1.WorkloadRef{Namespace: key.Namespace, Name: key.Name})
	defer span.End()
	target := &corev1.Pod{}
	target.Namespace, target.Name = pod.Namespace, pod.Name
	err := u.Client.Patch(ctx, target, client.RawPatch(types.JSONPatchType, patch))
	switch {
	case apierrors.IsNotFound(err):
		return reconcile.Result{}, nil
	case apierrors.IsInvalid(err):
		// A test of the patch failed: the pod changed since the cache saw
		// it. The retry builds the patch from the newer pod.
		recordError(span, err)
		return reconcile.Result{}, fmt.Errorf("ungate pod %s/%s, changed since it was read: %w", pod.Namespace, pod.Name, err)
	case err != nil:
		u.Metrics.UngateErrors.Inc()
		recordError(span, err)
		u.Events.Warn(pod, ReasonUngateFailed, ActionUngate, "ungate patch failed, retrying: %v", err)
		return reconcile.Result{}, fmt.Errorf("ungate pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	crashpoint.Hit("grouper/ungate")
	st.Ungated = true
	// Known before the ungate counts as answered: a stop check must not
	// take the pod, gated in a cache that lags, for one that cannot run.
	u.PodStates.Store(client.ObjectKeyFromObject(pod), *st)
	u.Metrics.PodsUngated.Inc()
	u.Metrics.DecisionToUngate.Observe(u.Now().Sub(entry.Received).Seconds())
	if at := entry.Decision.GetAdmittedAt(); at != nil {
		u.Metrics.AdmissionToUngate.WithLabelValues(entry.Decision.GetClusterQueue()).
			Observe(max(u.Now().Sub(at.AsTime()), 0).Seconds())
	}
	// No Event on success: one per pod would be a write per pod on the hot
	// path. The Workload's Admitted condition and the pod's podset label
	// say the same, and the metrics count it.
	return reconcile.Result{}, nil
}

// end takes back an ungate in flight; a stop check it held up looks
// again.
func (u *Ungater) end(key workload.Key) {
	u.InFlight.End(key)
	if e, ok := u.Decisions.Get(key); ok && decisions.Stopping(e.Decision) {
		u.StopCheck(key)
	}
}

// CannotApply tells, with msg, that an admission cannot be applied to pod
// as it is: only a new decision (or a changed pod) can help.
func (u *Ungater) CannotApply(pod *corev1.Pod, msg string) (reconcile.Result, error) {
	u.Metrics.UngateErrors.Inc()
	u.Events.Warn(pod, ReasonAdmissionInvalid, ActionUngate, "%s", msg)
	return reconcile.Result{RequeueAfter: RecheckAfter}, nil
}

// PodSetInfoFor returns the info of pod set name in d; an admission that
// lacks it is applied with no changes beyond the gate.
func PodSetInfoFor(d *admitterv1.Decision, name string) (*sluicev1.PodSetInfo, error) {
	infos := d.GetPodSetInfos()
	for _, info := range infos {
		if info.GetName() == name {
			return info, nil
		}
	}
	if len(infos) == 0 {
		return &sluicev1.PodSetInfo{Name: name}, nil
	}
	return nil, fmt.Errorf("pod_set_infos has no entry for pod set %q", name)
}
