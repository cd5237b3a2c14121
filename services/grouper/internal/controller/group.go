package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	schedulingv1alpha2 "k8s.io/api/scheduling/v1alpha2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	sluicev1 "github.com/sluice-dev/sluice/gen/sluice/v1"
	"github.com/sluice-dev/sluice/pkg/crashpoint"
	"github.com/sluice-dev/sluice/pkg/podgroup"
	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/pkg/podset"
	"github.com/sluice-dev/sluice/services/grouper/internal/fit"
	"github.com/sluice-dev/sluice/services/grouper/internal/gang"
	"github.com/sluice-dev/sluice/services/grouper/internal/group"
	"github.com/sluice-dev/sluice/services/grouper/internal/metrics"
	"github.com/sluice-dev/sluice/services/grouper/internal/podpatch"
	"github.com/sluice-dev/sluice/services/grouper/internal/workload"
)

// Event reasons of pod groups. Each is emitted once per group and reason,
// on the group's first pod, not once per pod.
const (
	ReasonGroupMismatch      = "GroupMismatch"
	ReasonTooManyRoles       = "TooManyRoles"
	ReasonExcessPodsDeleted  = "ExcessPodsDeleted"
	ReasonUnknownRole        = "UnknownRole"
	ReasonJoinRefused        = "JoinRefused"
	ReasonWaitingForPodGroup = "WaitingForPodGroup"
	ReasonWaitingForPlace    = "WaitingForPlace"

	actionAssemble = "Assemble"
)

// groupState is what the grouper remembers about one pod group. It lives
// in memory only: after a restart the group is assembled and submitted
// again (the admitter answers from what it has) and its finish is reported
// again (the admitter ignores a second one).
type groupState struct {
	// submitted: SubmitWorkload succeeded, in LocalQueue queue;
	// submitting: a call is in flight.
	submitted  bool
	submitting bool
	queue      string
	// warned is the last problem told in an event, so it is told once.
	warned string
	// finished: the group's end was reported.
	finished bool
	// succeeded is the count of succeeded pods per role last reported, and
	// missing the pods missing per role last reported (printed; empty when
	// none was ever reported), both under reservation: a new reservation
	// counts afresh.
	reservation string
	succeeded   map[string]int32
	missing     string
	// joined holds the shapes of pods the admitter let join a pod set of
	// the declared group's workload, by "<workload uid>/<pod set>/<role
	// hash>": pods of one shape ask once.
	joined map[string]bool
	// gangSize is the minCount of the gang of the PodGroup the group's
	// pods name, once read (it cannot change); 0 before. gangLooked is
	// when the PodGroup was last found missing, or without a gang: the
	// group's pods look again together, not each on its own.
	gangSize   int32
	gangLooked time.Time
}

// podGroupRecheck is how soon a group sized by a PodGroup that is missing,
// or has no gang, looks for it again.
const podGroupRecheck = 5 * time.Second

// gangSize returns the size of a group that takes it from its PodGroup's
// gang (gangSized: a pod has no total count; see podgroup.GangSized): the
// gang's minCount, read once per group from the API server. 0 for other
// groups, and while the PodGroup is missing or has no gang policy.
func (r *Reconciler) gangSize(ctx context.Context, key workload.Key, gangSized bool) (int32, error) {
	if !gangSized {
		return 0, nil
	}
	var size int32
	now, recent := r.now(), false
	r.groups.update(key, func(g *groupState) {
		size, recent = g.gangSize, now.Sub(g.gangLooked) < podGroupRecheck
	})
	if size > 0 || recent {
		return size, nil
	}
	pg := &schedulingv1alpha2.PodGroup{}
	err := r.opts.APIReader.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: key.Name}, pg)
	switch {
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		r.groups.update(key, func(g *groupState) { g.gangLooked = now })
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("read PodGroup %s: %w", key, err)
	}
	size = gang.MinCountOf(pg)
	r.groups.update(key, func(g *groupState) { g.gangSize, g.gangLooked = size, now })
	return size, nil
}

// groupStates holds groupState by group.
type groupStates struct {
	mu sync.Mutex
	m  map[workload.Key]*groupState
}

func newGroupStates() *groupStates { return &groupStates{m: map[workload.Key]*groupState{}} }

// update runs f on the group's state under the lock.
func (s *groupStates) update(k workload.Key, f func(*groupState)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.m[k]
	if st == nil {
		st = &groupState{}
		s.m[k] = st
	}
	f(st)
}

func (s *groupStates) forget(k workload.Key) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, k)
}

// resubmitAll makes every group submit again on its next look.
func (s *groupStates) resubmitAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.m {
		st.submitted, st.finished = false, false
	}
}

// groupMember brings one pod of a pod group forward. The group is one
// workload: it is submitted once its pods are all there, admitted whole,
// and ended by what all its pods say; one pod's end is not the group's.
func (r *Reconciler) groupMember(ctx context.Context, pod *corev1.Pod, key workload.Key, st *podState) (reconcile.Result, error) {
	entry, hasDecision := r.decisions.get(key)
	d := entry.decision
	action := d.GetAction()
	if hasDecision && stopping(d) {
		defer r.stopQ.Add(key)
	}
	ended := podgroup.Ended(pod)
	neverRan := pod.DeletionTimestamp != nil && (podpatch.HasGate(pod) || pod.Spec.NodeName == "")
	loss := gateLossOf(pod, st.ungated)

	switch {
	case hasDecision && (action == admitterv1.Decision_ACTION_DELETE || action == admitterv1.Decision_ACTION_EVICT) && (ended || neverRan):
		// The pods of a stopped group come back as new pods; an ended one
		// holds nothing.
		return reconcile.Result{}, r.removeFinalizer(ctx, pod)
	case hasDecision && action == admitterv1.Decision_ACTION_DELETE && d.GetFinished() && podpatch.HasGate(pod):
		// A later run of the group: it queues once the finished one is gone.
		return reconcile.Result{}, nil
	case hasDecision && action == admitterv1.Decision_ACTION_DELETE:
		return r.remove(ctx, pod, d, st)
	case hasDecision && action == admitterv1.Decision_ACTION_EVICT:
		if pod.DeletionTimestamp != nil {
			return reconcile.Result{}, nil // it stops; its end frees it
		}
		return r.evict(ctx, pod, d, st)
	case ended || neverRan:
		return r.groupProgress(ctx, pod, key, entry, hasDecision && action == admitterv1.Decision_ACTION_ADMIT)
	case loss == gateRemoved:
		return r.stopUngated(ctx, pod, st)
	case loss == gateReleased:
		r.countReleased(pod, st)
		return r.noteStarted(key, entry)
	case pod.DeletionTimestamp != nil || !podpatch.HasGate(pod) || st.ungated:
		return r.noteStarted(key, entry)
	case hasDecision && action == admitterv1.Decision_ACTION_ADMIT:
		return r.ungateMember(ctx, pod, key, entry, st)
	default:
		return r.submitGroup(ctx, key)
	}
}

// submitGroup assembles the group of a gated pod and submits its workload
// once every pod is there, deleting pods beyond its total count first.
func (r *Reconciler) submitGroup(ctx context.Context, key workload.Key) (reconcile.Result, error) {
	a, short, err := r.assemble(ctx, key)
	if short {
		return reconcile.Result{}, nil // a new pod of the group wakes it again
	}
	var noSize *group.NoSizeError
	if errors.As(err, &noSize) {
		// The PodGroup may well come after its pods: look again soon.
		r.warnGroup(key, ReasonWaitingForPodGroup, err.Error())
		return reconcile.Result{RequeueAfter: podGroupRecheck}, nil
	}
	if err != nil {
		r.warnGroup(key, reasonFor(err), err.Error())
		return reconcile.Result{}, nil
	}
	if len(a.Strangers) > 0 {
		return reconcile.Result{}, r.deleteStrangers(ctx, key, a.Members, a.Strangers, a.Declared)
	}
	if len(a.Excess) > 0 {
		return reconcile.Result{}, r.deleteExcess(ctx, key, a)
	}
	if a.Workload == nil {
		return reconcile.Result{}, nil // a new pod of the group wakes it again
	}
	// One submission per group at a time: the group's other pods wake
	// together, and the one submitting speaks for all of them.
	skip := false
	r.groups.update(key, func(g *groupState) {
		skip = (g.submitted && g.queue == a.Queue) || g.submitting
		g.submitting = g.submitting || !skip
	})
	if skip {
		return reconcile.Result{}, nil
	}
	defer r.groups.update(key, func(g *groupState) { g.submitting = false })
	wl := a.Workload
	ctx, span := r.startSpan(ctx, a.Members[0], "grouper.SubmitWorkload", wl.GetRef())
	defer span.End()
	cctx, cancel := context.WithTimeout(ctx, r.opts.CallTimeout)
	defer cancel()
	resp, err := r.opts.Admitter.SubmitWorkload(cctx, &admitterv1.SubmitWorkloadRequest{Workload: wl})
	if err != nil {
		r.opts.Metrics.Submissions.WithLabelValues(metrics.ResultError).Inc()
		recordError(span, err)
		if permanent(err) {
			r.warnGroup(key, ReasonSubmitFailed, fmt.Sprintf("the admitter refused the workload of group %s: %s", key, status.Convert(err).Message()))
			return reconcile.Result{RequeueAfter: recheckAfter}, nil
		}
		return reconcile.Result{}, fmt.Errorf("submit workload of group %s: %w", key, err)
	}
	result := metrics.ResultExisting
	if resp.GetCreated() {
		result = metrics.ResultCreated
	}
	r.opts.Metrics.Submissions.WithLabelValues(result).Inc()
	crashpoint.Hit("grouper/submit")
	// Every pod of the group now names another LocalQueue than its
	// Workload: the group moves there, as a single pod does.
	if existing := resp.GetQueueName(); existing != "" && existing != wl.GetQueueName() {
		if err := r.moveQueue(ctx, wl); err != nil {
			return reconcile.Result{}, err
		}
	}
	r.groups.update(key, func(g *groupState) { g.submitted, g.queue = true, a.Queue })
	r.opts.Log.V(1).Info("group submitted", "group", key.String(), "pods", len(a.Members), "created", resp.GetCreated())
	return reconcile.Result{}, nil
}

func reasonFor(err error) string {
	var tooMany *group.TooManyRolesError
	if errors.As(err, &tooMany) {
		return ReasonTooManyRoles
	}
	return ReasonGroupMismatch
}

// deleteExcess deletes the pods a group has beyond its total count, the
// youngest first.
func (r *Reconciler) deleteExcess(ctx context.Context, key workload.Key, a *group.Assembly) error {
	why := fmt.Sprintf("the group wants %d pods", a.TotalCount)
	if len(a.Declared) > 0 {
		why = "their roles have all the pods the group declares"
	}
	return r.deletePods(ctx, key, a.Members, a.Excess, why)
}

// deletePods deletes excess pods of a group, with one event for the group
// on its first pod saying why.
func (r *Reconciler) deletePods(ctx context.Context, key workload.Key, members, excess []*corev1.Pod, why string) error {
	names, err := r.deleteGroupPods(ctx, key, excess)
	if err != nil {
		return err
	}
	r.opts.Recorder.Eventf(firstByName(append(slices.Clone(members), excess...)), nil, corev1.EventTypeNormal, ReasonExcessPodsDeleted, actionAssemble,
		"group %s: deleted %d excess pods (%s): %s", key.Name, len(names), why, group.NameList(names))
	return nil
}

// deleteStrangers deletes the pods of a declared group that name a role
// it does not declare, with one warning for the group.
func (r *Reconciler) deleteStrangers(ctx context.Context, key workload.Key, members, strangers []*corev1.Pod, declared []string) error {
	names, err := r.deleteGroupPods(ctx, key, strangers)
	if err != nil {
		return err
	}
	roles := map[string]bool{}
	for _, p := range strangers {
		roles[p.Labels[podkeys.PodGroupRoleLabel]] = true
	}
	r.warn(firstByName(append(slices.Clone(members), strangers...)), ReasonUnknownRole, actionAssemble,
		"group %s: deleted pods [%s]: their %s %v is not declared by the group's %s (declared: %v)",
		key.Name, group.NameList(names), podkeys.PodGroupRoleLabel, slices.Sorted(maps.Keys(roles)), podkeys.PodGroupSetsAnnotation, declared)
	return nil
}

// deleteGroupPods deletes pods of a group, each guarded by its uid.
func (r *Reconciler) deleteGroupPods(ctx context.Context, key workload.Key, pods []*corev1.Pod) ([]string, error) {
	var names []string
	for _, p := range pods {
		uid := p.UID
		target := &corev1.Pod{}
		target.Namespace, target.Name = p.Namespace, p.Name
		if err := r.opts.Client.Delete(ctx, target, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
			return names, fmt.Errorf("delete pod %s/%s of group %s: %w", p.Namespace, p.Name, key, err)
		}
		names = append(names, p.Name)
	}
	return names, nil
}

func podNames(pods []*corev1.Pod) []string {
	names := make([]string, len(pods))
	for i, p := range pods {
		names[i] = p.Name
	}
	slices.Sort(names)
	return names
}

// firstByName is the pod of the group events are emitted on.
func firstByName(pods []*corev1.Pod) *corev1.Pod {
	first := pods[0]
	for _, p := range pods[1:] {
		if p.Name < first.Name {
			first = p
		}
	}
	return first
}

// warnGroup tells a group's problem once, on its first pod by name.
func (r *Reconciler) warnGroup(key workload.Key, reason, msg string) {
	tell := false
	r.groups.update(key, func(g *groupState) {
		tell = g.warned != msg
		g.warned = msg
	})
	if !tell {
		return
	}
	pods := r.roster.Pods(key)
	if len(pods) == 0 {
		return
	}
	r.warn(firstByName(pods), reason, actionAssemble, "%s", msg)
}

// ungateMember applies the group's admission to one of its gated pods,
// with the info of the pod set of its role — unless its role has all its
// pods already: then it is excess and deleted.
func (r *Reconciler) ungateMember(ctx context.Context, pod *corev1.Pod, key workload.Key, entry decisionEntry, st *podState) (reconcile.Result, error) {
	state, ref, err := r.observeGroup(key, entry)
	if err != nil {
		return reconcile.Result{}, err
	}
	if slices.ContainsFunc(state.Waiting, func(p *corev1.Pod) bool { return p.UID == pod.UID }) {
		r.warnGroup(key, ReasonWaitingForPlace, fmt.Sprintf(
			"group %s was admitted with the pods its gang had when complete; pods beyond them wait, gated, for a place a failed pod frees: %s",
			key.Name, group.NameList(podNames(state.Waiting))))
		return reconcile.Result{}, nil
	}
	if slices.ContainsFunc(state.Strangers, func(p *corev1.Pod) bool { return p.UID == pod.UID }) {
		return reconcile.Result{}, r.deleteStrangers(ctx, key, r.roster.Pods(key), []*corev1.Pod{pod}, slices.Sorted(maps.Keys(entry.decision.GetPodSetCounts())))
	}
	if slices.ContainsFunc(state.Excess, func(p *corev1.Pod) bool { return p.UID == pod.UID }) {
		return reconcile.Result{}, r.deletePods(ctx, key, r.roster.Pods(key), []*corev1.Pod{pod}, "its role has all its pods")
	}
	// This pod may be the replacement a failed pod waits for, to be freed.
	for _, p := range state.Replaced {
		r.wake <- event.TypedGenericEvent[*corev1.Pod]{Object: p}
	}
	if err := r.reportState(ctx, key, ref, state); err != nil {
		return reconcile.Result{}, err
	}
	role, err := state.Roles.Of(pod)
	if err != nil {
		return r.cannotApply(pod, key, err)
	}
	v, err := fit.Check(pod, entry.decision, role, false)
	if err != nil {
		return r.cannotApply(pod, key, err)
	}
	switch {
	case v.QueueMoved():
		return r.misfit(ctx, pod, key, entry.decision, v, st), r.followQueue(ctx, key, ref)
	case state.Roles.Declared && !v.SameShape():
		// Not shaped like the pod its set was built from (a worker of a
		// role with a template, a pod naming a role shaped like the
		// driver, a pod changed since): only the admitter can say whether
		// it may run in the set.
		joined, err := r.joinOrDelete(ctx, key, ref, pod, role, v.Hash)
		if err != nil || !joined {
			return reconcile.Result{}, err
		}
	case !state.Roles.Declared && !v.Fits():
		return r.misfit(ctx, pod, key, entry.decision, v, st), nil
	}
	st.misfit = ""
	// The scheduler's gang comes first: a pod ungated before its
	// PodGroup exists waits in the scheduler for it anyway.
	if err := r.ensureGang(ctx, pod, key, ref.GetUid()); err != nil {
		return reconcile.Result{}, err
	}
	info, err := podSetInfoFor(entry.decision, role)
	if err != nil {
		return r.cannotApply(pod, key, err)
	}
	patch, err := podpatch.Ungate(pod, info, ref, entry.decision.GetReservationId())
	if err != nil {
		return r.cannotApply(pod, key, err)
	}
	return r.sendUngate(ctx, pod, key, entry, st, patch)
}

// cannotApply tells that the group's admission cannot be applied to pod as
// it is; only a new decision (or a changed pod) can help.
func (r *Reconciler) cannotApply(pod *corev1.Pod, key workload.Key, err error) (reconcile.Result, error) {
	r.opts.Metrics.UngateErrors.Inc()
	r.warn(pod, ReasonAdmissionInvalid, actionUngate, "admission of group %s cannot be applied to this pod: %v", key.Name, err)
	return reconcile.Result{RequeueAfter: recheckAfter}, nil
}

// joinOrDelete lets a pod of a declared group join its pod set, or
// deletes it, with a warning for the group, when the admitter refuses it.
func (r *Reconciler) joinOrDelete(ctx context.Context, key workload.Key, ref *sluicev1.WorkloadRef,
	pod *corev1.Pod, role, hash string) (joined bool, err error) {
	refused, err := r.join(ctx, key, ref, pod, role, hash)
	if err != nil || refused == "" {
		return err == nil, err
	}
	if _, err := r.deleteGroupPods(ctx, key, []*corev1.Pod{pod}); err != nil {
		return false, err
	}
	r.warn(firstByName(append(r.roster.Pods(key), pod)), ReasonJoinRefused, actionUngate, "group %s: deleted pod %s: it cannot join pod set %s: %s",
		key.Name, pod.Name, role, refused)
	return false, nil
}

// join asks the admitter whether a pod of a declared group may join the
// pod set of its role although it is not shaped like the pod the set was
// built from (role hash hash): a worker created after the group's
// workload, or a pod that copies the declaration. refused says why not.
// Pods of one role hash are interchangeable, so once the admitter let one
// join, the others of that hash in the same workload ask nothing.
func (r *Reconciler) join(ctx context.Context, key workload.Key, ref *sluicev1.WorkloadRef, pod *corev1.Pod, role, hash string) (refused string, err error) {
	jk := ref.GetUid() + "/" + role + "/" + hash
	known := false
	r.groups.update(key, func(g *groupState) { known = g.joined[jk] })
	if known {
		return "", nil
	}
	cctx, cancel := context.WithTimeout(ctx, r.opts.CallTimeout)
	defer cancel()
	_, err = r.opts.Admitter.UpdateWorkload(cctx, &admitterv1.UpdateWorkloadRequest{
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
	r.groups.update(key, func(g *groupState) {
		if g.joined == nil {
			g.joined = map[string]bool{}
		}
		g.joined[jk] = true
	})
	return "", nil
}

// observeGroup reads an admitted group whole: what its pods say against
// the admitted pod set counts, and the reference its reports use.
func (r *Reconciler) observeGroup(key workload.Key, entry decisionEntry) (*group.State, *sluicev1.WorkloadRef, error) {
	state, err := r.observe(key, entry.decision)
	if err != nil {
		return nil, nil, err
	}
	ref := &sluicev1.WorkloadRef{Namespace: key.Namespace, Name: key.Name, Uid: entry.decision.GetWorkload().GetUid()}
	return state, ref, nil
}

// groupProgress accounts for a pod of the group that ended (or will never
// run). Under an admission the group is observed whole: its end is
// reported once, and a pod's finalizer goes when the group ended, when a
// newer pod of its role replaced it (failed pods hold their place until
// then), or, for a pod being deleted, once the group's state with it gone
// is reported. Without an admission an ended pod holds nothing.
func (r *Reconciler) groupProgress(ctx context.Context, pod *corev1.Pod, key workload.Key, entry decisionEntry, admitted bool) (reconcile.Result, error) {
	if !podpatch.HasFinalizer(pod) {
		return reconcile.Result{}, nil
	}
	if !admitted {
		if err := r.removeFinalizer(ctx, pod); err != nil {
			return reconcile.Result{}, err
		}
		// A pod that leaves a group before admission (excess, a stranger,
		// a failure) may be what held its submission up.
		r.wakeGated(key)
		return reconcile.Result{}, nil
	}
	state, ref, err := r.observeGroup(key, entry)
	if err != nil {
		return reconcile.Result{}, err
	}
	if state.Finished {
		first, err := r.reportGroupFinish(ctx, pod, key, ref, state)
		if err != nil {
			return reconcile.Result{}, err
		}
		if first {
			// Every pod of the group may go now, not only this one.
			for _, p := range r.roster.Pods(key) {
				if p.UID != pod.UID && podpatch.HasFinalizer(p) {
					r.wake <- event.TypedGenericEvent[*corev1.Pod]{Object: p}
				}
			}
		}
		return reconcile.Result{}, r.removeFinalizer(ctx, pod)
	}
	if err := r.reportState(ctx, key, ref, state); err != nil {
		return reconcile.Result{}, err
	}
	if len(state.Waiting) > 0 {
		// The place this pod held may be one a waiting pod can take.
		r.wakeGated(key)
	}
	for _, p := range state.Replaced {
		if p.UID == pod.UID {
			return reconcile.Result{}, r.removeFinalizer(ctx, pod)
		}
	}
	if pod.DeletionTimestamp != nil && (pod.Status.Phase == corev1.PodSucceeded || podgroup.Retriable(pod)) {
		// Being deleted: what it leaves behind (a success to reclaim, a
		// place to fill) is recorded by the report above, so it need not
		// stay Terminating. A non-retriable failure is kept until the group
		// ends, which that failure decides.
		return reconcile.Result{}, r.removeFinalizer(ctx, pod)
	}
	return reconcile.Result{}, nil
}

// reportGroupFinish reports the group's end once; first says this call
// reported it.
func (r *Reconciler) reportGroupFinish(ctx context.Context, pod *corev1.Pod, key workload.Key, ref *sluicev1.WorkloadRef, state *group.State) (first bool, err error) {
	done := false
	r.groups.update(key, func(g *groupState) { done = g.finished })
	if done {
		return false, nil
	}
	if err := r.progress(ctx, pod, ref, &admitterv1.ReportProgressRequest{
		Workload: ref, ReservationId: state.Run.Reservation, SucceededPods: state.Succeeded,
		Finish: &admitterv1.Finish{Succeeded: state.Success, Message: state.Message},
	}); err != nil {
		return false, err
	}
	crashpoint.Hit("grouper/report-finish")
	r.groups.update(key, func(g *groupState) { g.finished = true })
	return true, nil
}

// reportState reports, in one call and only when they changed, the
// group's succeeded pods per role (their quota is released while the
// others run) and the pods it waits for (failed, not replaced yet).
func (r *Reconciler) reportState(ctx context.Context, key workload.Key, ref *sluicev1.WorkloadRef, state *group.State) error {
	req := &admitterv1.ReportProgressRequest{Workload: ref, ReservationId: state.Run.Reservation}
	missing := fmt.Sprint(state.Missing)
	r.groups.update(key, func(g *groupState) {
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
	if err := r.progress(ctx, nil, ref, req); err != nil {
		return err
	}
	crashpoint.Hit("grouper/report-state")
	r.groups.update(key, func(g *groupState) {
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

// progress sends one progress report; a workload the admitter does not
// know needs none.
func (r *Reconciler) progress(ctx context.Context, pod *corev1.Pod, ref *sluicev1.WorkloadRef, req *admitterv1.ReportProgressRequest) error {
	if pod != nil {
		var span trace.Span
		ctx, span = r.startSpan(ctx, pod, "grouper.ReportProgress", ref)
		defer span.End()
	}
	cctx, cancel := context.WithTimeout(ctx, r.opts.CallTimeout)
	defer cancel()
	if _, err := r.opts.Admitter.ReportProgress(cctx, req); err != nil && status.Code(err) != grpccodes.NotFound {
		r.opts.Metrics.Reports.WithLabelValues(metrics.ResultError).Inc()
		return fmt.Errorf("report progress of group %s: %w", ref.GetName(), err)
	}
	r.opts.Metrics.Reports.WithLabelValues(metrics.ResultOK).Inc()
	return nil
}
