package groups

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/services/grouper/internal/act"
	"github.com/sluice-dev/sluice/services/grouper/internal/group"
	"github.com/sluice-dev/sluice/services/grouper/internal/workload"
)

// submit assembles the group of a gated pod and submits its workload once
// every pod is there, deleting pods beyond its total count first.
func (p *Path) submit(ctx context.Context, key workload.Key) (reconcile.Result, error) {
	a, short, err := p.assemble(ctx, key)
	if short {
		return reconcile.Result{}, nil // a new pod of the group wakes it again
	}
	var noSize *group.NoSizeError
	if errors.As(err, &noSize) {
		// The PodGroup may well come after its pods: look again soon.
		p.warnGroup(key, ReasonWaitingForPodGroup, err.Error())
		return reconcile.Result{RequeueAfter: podGroupRecheck}, nil
	}
	if err != nil {
		p.warnGroup(key, reasonFor(err), err.Error())
		return reconcile.Result{}, nil
	}
	if len(a.Strangers) > 0 {
		return reconcile.Result{}, p.deleteStrangers(ctx, key, a.Members, a.Strangers, a.Declared)
	}
	if len(a.Excess) > 0 {
		return reconcile.Result{}, p.deleteExcess(ctx, key, a)
	}
	if a.Workload == nil {
		return reconcile.Result{}, nil // a new pod of the group wakes it again
	}
	// One submission per group at a time: the group's other pods wake
	// together, and the one submitting speaks for all of them.
	skip := false
	p.known.update(key, func(g *groupState) {
		skip = (g.submitted && g.queue == a.Queue) || g.submitting
		g.submitting = g.submitting || !skip
	})
	if skip {
		return reconcile.Result{}, nil
	}
	defer p.known.update(key, func(g *groupState) { g.submitting = false })
	// When every pod of the group now names another LocalQueue than its
	// Workload, the group moves there, as a single pod does.
	created, refused, err := p.Admitter.Submit(ctx, a.Members[0], a.Workload, "workload of group "+key.String(), false)
	if err != nil {
		return reconcile.Result{}, err
	}
	if refused != "" {
		p.warnGroup(key, act.ReasonSubmitFailed, refused)
		return reconcile.Result{RequeueAfter: act.RecheckAfter}, nil
	}
	p.known.update(key, func(g *groupState) { g.submitted, g.queue = true, a.Queue })
	p.Log.V(1).Info("group submitted", "group", key.String(), "pods", len(a.Members), "created", created)
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
func (p *Path) deleteExcess(ctx context.Context, key workload.Key, a *group.Assembly) error {
	why := fmt.Sprintf("the group wants %d pods", a.TotalCount)
	if len(a.Declared) > 0 {
		why = "their roles have all the pods the group declares"
	}
	return p.deletePods(ctx, key, a.Members, a.Excess, why)
}

// deletePods deletes excess pods of a group, with one event for the group
// on its first pod saying why.
func (p *Path) deletePods(ctx context.Context, key workload.Key, members, excess []*corev1.Pod, why string) error {
	names, err := p.deleteGroupPods(ctx, key, excess)
	if err != nil {
		return err
	}
	p.Events.Recorder.Eventf(firstByName(append(slices.Clone(members), excess...)), nil, corev1.EventTypeNormal, ReasonExcessPodsDeleted, actionAssemble,
		"group %s: deleted %d excess pods (%s): %s", key.Name, len(names), why, group.NameList(names))
	return nil
}

// deleteStrangers deletes the pods of a declared group that name a role
// it does not declare, with one warning for the group.
func (p *Path) deleteStrangers(ctx context.Context, key workload.Key, members, strangers []*corev1.Pod, declared []string) error {
	names, err := p.deleteGroupPods(ctx, key, strangers)
	if err != nil {
		return err
	}
	roles := map[string]bool{}
	for _, pod := range strangers {
		roles[pod.Labels[podkeys.PodGroupRoleLabel]] = true
	}
	p.Events.Warn(firstByName(append(slices.Clone(members), strangers...)), ReasonUnknownRole, actionAssemble,
		"group %s: deleted pods [%s]: their %s %v is not declared by the group's %s (declared: %v)",
		key.Name, group.NameList(names), podkeys.PodGroupRoleLabel, slices.Sorted(maps.Keys(roles)), podkeys.PodGroupSetsAnnotation, declared)
	return nil
}

// deleteGroupPods deletes pods of a group, each guarded by its uid.
func (p *Path) deleteGroupPods(ctx context.Context, key workload.Key, pods []*corev1.Pod) ([]string, error) {
	var names []string
	for _, pod := range pods {
		uid := pod.UID
		target := &corev1.Pod{}
		target.Namespace, target.Name = pod.Namespace, pod.Name
		if err := p.Client.Delete(ctx, target, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
			return names, fmt.Errorf("delete pod %s/%s of group %s: %w", pod.Namespace, pod.Name, key, err)
		}
		names = append(names, pod.Name)
	}
	return names, nil
}

func podNames(pods []*corev1.Pod) []string {
	names := make([]string, len(pods))
	for i, pod := range pods {
		names[i] = pod.Name
	}
	slices.Sort(names)
	return names
}

// firstByName is the pod of the group events are emitted on.
func firstByName(pods []*corev1.Pod) *corev1.Pod {
	first := pods[0]
	for _, pod := range pods[1:] {
		if pod.Name < first.Name {
			first = pod
		}
	}
	return first
}

// warnGroup tells a group's problem once, on its first pod by name.
func (p *Path) warnGroup(key workload.Key, reason, msg string) {
	tell := false
	p.known.update(key, func(g *groupState) {
		tell = g.warned != msg
		g.warned = msg
	})
	if !tell {
		return
	}
	pods := p.Roster.Pods(key)
	if len(pods) == 0 {
		return
	}
	p.Events.Warn(firstByName(pods), reason, actionAssemble, "%s", msg)
}
