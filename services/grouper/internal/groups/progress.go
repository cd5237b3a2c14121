package groups

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	sluicev1 "github.com/sluice-dev/sluice/gen/sluice/v1"
	"github.com/sluice-dev/sluice/pkg/crashpoint"
	"github.com/sluice-dev/sluice/pkg/podgroup"
	"github.com/sluice-dev/sluice/services/grouper/internal/decisions"
	"github.com/sluice-dev/sluice/services/grouper/internal/group"
	"github.com/sluice-dev/sluice/services/grouper/internal/podpatch"
	"github.com/sluice-dev/sluice/services/grouper/internal/podstate"
	"github.com/sluice-dev/sluice/services/grouper/internal/workload"
)

// progress accounts for a pod of the group that ended (or will never
// run). Under an admission the group is observed whole: its end is
// reported once, and a pod's finalizer goes when the group ended, when a
// newer pod of its role replaced it (failed pods hold their place until
// then), or, for a pod being deleted, once the group's state with it gone
// is reported. Without an admission an ended pod holds nothing.
func (p *Path) progress(ctx context.Context, pod *corev1.Pod, key workload.Key, entry decisions.Entry, admitted bool, st *podstate.State) (reconcile.Result, error) {
	if !podpatch.HasFinalizer(pod) {
		return reconcile.Result{}, nil
	}
	if !admitted {
		if err := p.Pods.RemoveFinalizer(ctx, pod, st); err != nil {
			return reconcile.Result{}, err
		}
		// A pod that leaves a group before admission (excess, a stranger,
		// a failure) may be what held its submission up.
		p.WakeGated(key)
		return reconcile.Result{}, nil
	}
	state, ref, err := p.observeGroup(key, entry)
	if err != nil {
		return reconcile.Result{}, err
	}
	if state.Finished {
		first, err := p.reportFinish(ctx, pod, key, ref, state)
		if err != nil {
			return reconcile.Result{}, err
		}
		if first {
			// Every pod of the group may go now, not only this one.
			for _, other := range p.Roster.Pods(key) {
				if other.UID != pod.UID && podpatch.HasFinalizer(other) {
					p.Wake(other)
				}
			}
		}
		return reconcile.Result{}, p.Pods.RemoveFinalizer(ctx, pod, st)
	}
	if err := p.reportState(ctx, key, ref, state); err != nil {
		return reconcile.Result{}, err
	}
	if len(state.Waiting) > 0 {
		// The place this pod held may be one a waiting pod can take.
		p.WakeGated(key)
	}
	for _, replaced := range state.Replaced {
		if replaced.UID == pod.UID {
			return reconcile.Result{}, p.Pods.RemoveFinalizer(ctx, pod, st)
		}
	}
	if pod.DeletionTimestamp != nil && (pod.Status.Phase == corev1.PodSucceeded || podgroup.Retriable(pod)) {
		// Being deleted: what it leaves behind (a success to reclaim, a
		// place to fill) is recorded by the report above, so it need not
		// stay Terminating. A non-retriable failure is kept until the group
		// ends, which that failure decides.
		return reconcile.Result{}, p.Pods.RemoveFinalizer(ctx, pod, st)
	}
	return reconcile.Result{}, nil
}

// reportFinish reports the group's end once; first says this call
// reported it.
func (p *Path) reportFinish(ctx context.Context, pod *corev1.Pod, key workload.Key, ref *sluicev1.WorkloadRef, state *group.State) (first bool, err error) {
	done := false
	p.known.update(key, func(g *groupState) { done = g.finished })
	if done {
		return false, nil
	}
	if err := p.report(ctx, pod, &admitterv1.ReportProgressRequest{
		Workload: ref, ReservationId: state.Run.Reservation, SucceededPods: state.Succeeded,
		Finish: &admitterv1.Finish{Succeeded: state.Success, Message: state.Message},
	}); err != nil {
		return false, err
	}
	crashpoint.Hit("grouper/report-finish")
	p.known.update(key, func(g *groupState) { g.finished = true })
	return true, nil
}

// reportState reports, in one call and only when they changed, the
// group's succeeded pods per role (their quota is released while the
// others run) and the pods it waits for (failed, not replaced yet).
func (p *Path) reportState(ctx context.Context, key workload.Key, ref *sluicev1.WorkloadRef, state *group.State) error {
	req := &admitterv1.ReportProgressRequest{Workload: ref, ReservationId: state.Run.Reservation}
	missing := fmt.Sprint(state.Missing)
	p.known.update(key, func(g *groupState) {
		if g.reservation != state.Run.Reservation {
			g.reservation, g.succeeded, g.missing = state.Run.Reservation, nil, ""
		}
		for role, n := range state.Succeeded {
			if g.succeeded[role] < n {
				req.SucceededPods = state.Succeeded
			}
		}
		// The first look of this process at a reservation reports even
		// that nothing is missing: a report lost to a restart may have left
		// the Workload waiting for pods that are back (a group emptied
		// within its replacement window, refilled while the grouper was
		// down). The admitter writes nothing when nothing changes.
		if g.missing != missing {
			req.Missing = &admitterv1.Missing{Pods: state.Missing}
		}
	})
	if req.SucceededPods == nil && req.Missing == nil {
		return nil
	}
	if err := p.report(ctx, nil, req); err != nil {
		return err
	}
	crashpoint.Hit("grouper/report-state")
	p.known.update(key, func(g *groupState) {
		if g.reservation != state.Run.Reservation {
			return // a newer reservation's counts were started meanwhile
		}
		if g.succeeded == nil {
			g.succeeded = map[string]int32{}
		}
		for role, n := range state.Succeeded {
			g.succeeded[role] = max(g.succeeded[role], n)
		}
		g.missing = missing
	})
	return nil
}

// report sends one progress report of the group, in a span that continues
// pod's trace when pod is not nil.
func (p *Path) report(ctx context.Context, pod *corev1.Pod, req *admitterv1.ReportProgressRequest) error {
	_, err := p.Admitter.Progress(ctx, pod, req, "progress of group "+req.GetWorkload().GetName())
	return err
}
