package groups

import (
	"context"
	"fmt"
	"maps"
	"slices"

	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	sluicev1 "github.com/sluice-dev/sluice/gen/sluice/v1"
	"github.com/sluice-dev/sluice/pkg/podgroup"
	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/pkg/podset"
	"github.com/sluice-dev/sluice/services/grouper/internal/act"
	"github.com/sluice-dev/sluice/services/grouper/internal/decisions"
	"github.com/sluice-dev/sluice/services/grouper/internal/fit"
	"github.com/sluice-dev/sluice/services/grouper/internal/group"
	"github.com/sluice-dev/sluice/services/grouper/internal/podpatch"
	"github.com/sluice-dev/sluice/services/grouper/internal/podstate"
	"github.com/sluice-dev/sluice/services/grouper/internal/workload"
)

// ungate applies the group's admission to one of its gated pods, with the
// info of the pod set of its role — unless its role has all its pods
// already: then it is excess and deleted.
func (p *Path) ungate(ctx context.Context, pod *corev1.Pod, key workload.Key, entry decisions.Entry, st *podstate.State) (reconcile.Result, error) {
	state, ref, err := p.observeGroup(key, entry)
	if err != nil {
		return reconcile.Result{}, err
	}
	if slices.ContainsFunc(state.Waiting, func(w *corev1.Pod) bool { return w.UID == pod.UID }) {
		p.warnGroup(key, ReasonWaitingForPlace, fmt.Sprintf(
			"group %s was admitted with the pods its gang had when complete; pods beyond them wait, gated, for a place a failed pod frees: %s",
			key.Name, group.NameList(podNames(state.Waiting))))
		return reconcile.Result{}, nil
	}
	if slices.ContainsFunc(state.Strangers, func(s *corev1.Pod) bool { return s.UID == pod.UID }) {
		return reconcile.Result{}, p.deleteStrangers(ctx, key, p.Roster.Pods(key), []*corev1.Pod{pod}, slices.Sorted(maps.Keys(entry.Decision.GetPodSetCounts())))
	}
	if slices.ContainsFunc(state.Excess, func(e *corev1.Pod) bool { return e.UID == pod.UID }) {
		return reconcile.Result{}, p.deletePods(ctx, key, p.Roster.Pods(key), []*corev1.Pod{pod}, "its role has all its pods")
	}
	// This pod may be the replacement a failed pod waits for, to be freed.
	for _, replaced := range state.Replaced {
		p.Wake(replaced)
	}
	if err := p.reportState(ctx, key, ref, state); err != nil {
		return reconcile.Result{}, err
	}
	role, err := state.Roles.Of(pod)
	if err != nil {
		return p.cannotApply(pod, key, err)
	}
	v, err := fit.Check(pod, entry.Decision, role, false)
	if err != nil {
		return p.cannotApply(pod, key, err)
	}
	switch {
	case v.QueueMoved():
		return p.Misfits.Hold(ctx, pod, key, entry.Decision, v, st), p.followQueue(ctx, key, ref)
	case state.Roles.Declared && !v.SameShape():
		// Not shaped like the pod its set was built from (a worker of a
		// role with a template, a pod naming a role shaped like the
		// driver, a pod changed since): only the admitter can say whether
		// it may run in the set.
		joined, err := p.joinOrDelete(ctx, key, ref, pod, role, v.Hash)
		if err != nil || !joined {
			return reconcile.Result{}, err
		}
	case !state.Roles.Declared && !v.Fits():
		return p.Misfits.Hold(ctx, pod, key, entry.Decision, v, st), nil
	}
	st.Misfit = ""
	// The scheduler's gang comes first: a pod ungated before its
	// PodGroup exists waits in the scheduler for it anyway.
	if err := p.ensureGang(ctx, pod, key, ref.GetUid()); err != nil {
		return reconcile.Result{}, err
	}
	info, err := act.PodSetInfoFor(entry.Decision, role)
	if err != nil {
		return p.cannotApply(pod, key, err)
	}
	patch, err := podpatch.Ungate(pod, info, ref, entry.Decision.GetReservationId())
	if err != nil {
		return p.cannotApply(pod, key, err)
	}
	return p.Ungater.Send(ctx, pod, key, entry, st, patch)
}

// cannotApply tells that the group's admission cannot be applied to pod as
// it is; only a new decision (or a changed pod) can help.
func (p *Path) cannotApply(pod *corev1.Pod, key workload.Key, err error) (reconcile.Result, error) {
	return p.Ungater.CannotApply(pod, fmt.Sprintf("admission of group %s cannot be applied to this pod: %v", key.Name, err))
}

// observeGroup reads an admitted group whole: what its pods say against
// the admitted pod set counts, and the reference its reports use.
func (p *Path) observeGroup(key workload.Key, entry decisions.Entry) (*group.State, *sluicev1.WorkloadRef, error) {
	state, err := p.observe(key, entry.Decision)
	if err != nil {
		return nil, nil, err
	}
	ref := &sluicev1.WorkloadRef{Namespace: key.Namespace, Name: key.Name, Uid: entry.Decision.GetWorkload().GetUid()}
	return state, ref, nil
}

// joinOrDelete lets a pod of a declared group join its pod set, or
// deletes it, with a warning for the group, when the admitter refuses it.
func (p *Path) joinOrDelete(ctx context.Context, key workload.Key, ref *sluicev1.WorkloadRef,
	pod *corev1.Pod, role, hash string) (joined bool, err error) {
	refused, err := p.join(ctx, key, ref, pod, role, hash)
	if err != nil || refused == "" {
		return err == nil, err
	}
	if _, err := p.deleteGroupPods(ctx, key, []*corev1.Pod{pod}); err != nil {
		return false, err
	}
	p.Events.Warn(firstByName(append(p.Roster.Pods(key), pod)), ReasonJoinRefused, act.ActionUngate, "group %s: deleted pod %s: it cannot join pod set %s: %s",
		key.Name, pod.Name, role, refused)
	return false, nil
}

// join asks the admitter whether a pod of a declared group may join the
// pod set of its role although it is not shaped like the pod the set was
// built from (role hash hash): a worker created after the group's
// workload, or a pod that copies the declaration. refused says why not.
// Pods of one role hash are interchangeable, so once the admitter let one
// join, the others of that hash in the same workload ask nothing.
func (p *Path) join(ctx context.Context, key workload.Key, ref *sluicev1.WorkloadRef, pod *corev1.Pod, role, hash string) (refused string, err error) {
	jk := ref.GetUid() + "/" + role + "/" + hash
	known := false
	p.known.update(key, func(g *groupState) { known = g.joined[jk] })
	if known {
		return "", nil
	}
	cctx, cancel := p.Admitter.Call(ctx)
	defer cancel()
	_, err = p.Admitter.Client.UpdateWorkload(cctx, &admitterv1.UpdateWorkloadRequest{
		Workload: ref,
		Join: &admitterv1.PodJoin{PodName: pod.Name, PodSet: role, Requests: workload.Requests(pod),
			Scheduling: &admitterv1.PodScheduling{
				NodeSelector: pod.Spec.NodeSelector,
				Tolerations:  podset.TolerationsToProto(pod.Spec.Tolerations),
				Priority:     workload.Priority(pod),
			}},
	})
	switch {
	case status.Code(err) == grpccodes.FailedPrecondition:
		return status.Convert(err).Message(), nil
	case err != nil:
		return "", fmt.Errorf("ask to join pod %s/%s to pod set %s of group %s: %w", pod.Namespace, pod.Name, role, key, err)
	}
	p.known.update(key, func(g *groupState) {
		if g.joined == nil {
			g.joined = map[string]bool{}
		}
		g.joined[jk] = true
	})
	return "", nil
}

// followQueue moves an admitted group whose pods all name another
// LocalQueue there, as submit moves a gated one; the move ends the
// admission. While the pods disagree the group stays, and the pods that
// moved stay gated.
func (p *Path) followQueue(ctx context.Context, key workload.Key, ref *sluicev1.WorkloadRef) error {
	queue := ""
	for _, pod := range p.Roster.Pods(key) {
		if podgroup.Released(pod) {
			continue // a run that is over
		}
		q := pod.Labels[podkeys.QueueNameLabel]
		if queue != "" && q != queue {
			return nil
		}
		queue = q
	}
	if queue == "" {
		return nil
	}
	moved := false
	p.known.update(key, func(g *groupState) { moved = g.submitted && g.queue == queue })
	if moved {
		return nil
	}
	if err := p.Admitter.MoveQueue(ctx, &sluicev1.Workload{Ref: ref, QueueName: queue}); err != nil {
		return err
	}
	p.known.update(key, func(g *groupState) { g.submitted, g.queue = true, queue })
	return nil
}
