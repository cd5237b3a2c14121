// Package groups is the path of a pod that belongs to a pod group: the
// group is one workload, assembled from its pods and submitted once they
// are all there, admitted whole, its pods ungated each with the info of
// its role's pod set (a declared group's late workers join it), gang
// scheduled through a PodGroup, and ended by what all its pods say. It
// also notices groups whose pods are all gone.
package groups

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	"github.com/sluice-dev/sluice/pkg/podgroup"
	"github.com/sluice-dev/sluice/services/grouper/internal/act"
	"github.com/sluice-dev/sluice/services/grouper/internal/decisions"
	"github.com/sluice-dev/sluice/services/grouper/internal/metrics"
	"github.com/sluice-dev/sluice/services/grouper/internal/podpatch"
	"github.com/sluice-dev/sluice/services/grouper/internal/podstate"
	"github.com/sluice-dev/sluice/services/grouper/internal/roster"
	"github.com/sluice-dev/sluice/services/grouper/internal/shard"
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

// Config is what the group path works with.
type Config struct {
	Admitter act.Admitter
	Ungater  *act.Ungater
	Pods     act.Pods
	Misfits  act.Misfits
	Events   act.Events
	// Client deletes pods and creates PodGroups; its reads come from the
	// manager's cache.
	Client client.Client
	// APIReader reads from the API server where the cache may lag.
	APIReader client.Reader
	Metrics   *metrics.Metrics
	// Roster holds the groups' pods.
	Roster *roster.Roster
	// Shard is the share of workloads this replica handles.
	Shard shard.Shard
	// Wake has a pod reconciled.
	Wake func(*corev1.Pod)
	// NoteStarted has the started pods of an admission with a start-up
	// deadline counted soon.
	NoteStarted func(workload.Key, decisions.Entry)
	Log         logr.Logger
	Now         func() time.Time
}

// Path brings the pods of pod groups forward, and keeps what it worked
// out of each group.
type Path struct {
	Config
	known *known
}

// New returns a Path that knows no group yet.
func New(cfg Config) *Path {
	return &Path{Config: cfg, known: newKnown()}
}

// Forget drops what the path keeps of group key, whose decision went away.
func (p *Path) Forget(key workload.Key) { p.known.forget(key) }

// ResubmitAll makes every group submit again on its next look, and
// report its finish again.
func (p *Path) ResubmitAll() { p.known.resubmitAll() }

// Reconcile brings one pod of a pod group forward under the decision
// entry in force for the group key (decided says there is one). The group
// is one workload: it is submitted once its pods are all there, admitted
// whole, and ended by what all its pods say; one pod's end is not the
// group's.
func (p *Path) Reconcile(ctx context.Context, pod *corev1.Pod, key workload.Key, entry decisions.Entry, decided bool, st *podstate.State) (reconcile.Result, error) {
	d := entry.Decision
	action := d.GetAction()
	ended := podgroup.Ended(pod)
	neverRan := pod.DeletionTimestamp != nil && (podpatch.HasGate(pod) || pod.Spec.NodeName == "")
	loss := act.GateLossOf(pod, st.Ungated)

	switch {
	case decided && (action == admitterv1.Decision_ACTION_DELETE || action == admitterv1.Decision_ACTION_EVICT) && (ended || neverRan):
		// The pods of a stopped group come back as new pods; an ended one
		// holds nothing.
		return reconcile.Result{}, p.Pods.RemoveFinalizer(ctx, pod, st)
	case decided && action == admitterv1.Decision_ACTION_DELETE && d.GetFinished() && podpatch.HasGate(pod):
		// A later run of the group: it queues once the finished one is gone.
		return reconcile.Result{}, nil
	case decided && action == admitterv1.Decision_ACTION_DELETE:
		return p.Pods.Remove(ctx, pod, d, st)
	case decided && action == admitterv1.Decision_ACTION_EVICT:
		if pod.DeletionTimestamp != nil {
			return reconcile.Result{}, nil // it stops; its end frees it
		}
		return p.Pods.Evict(ctx, pod, d, st)
	case ended || neverRan:
		return p.progress(ctx, pod, key, entry, decided && action == admitterv1.Decision_ACTION_ADMIT, st)
	case loss == act.GateRemoved:
		return p.Pods.StopUngated(ctx, pod, st)
	case loss == act.GateReleased:
		p.Pods.CountReleased(pod, st)
		return p.running(key, entry)
	case pod.DeletionTimestamp != nil || !podpatch.HasGate(pod) || st.Ungated:
		return p.running(key, entry)
	case decided && action == admitterv1.Decision_ACTION_ADMIT:
		return p.ungate(ctx, pod, key, entry, st)
	default:
		return p.submit(ctx, key)
	}
}

// running has the started pods of a pod that runs, or may, counted when
// its admission has a start-up deadline.
func (p *Path) running(key workload.Key, entry decisions.Entry) (reconcile.Result, error) {
	p.NoteStarted(key, entry)
	return reconcile.Result{}, nil
}

// WakeGated wakes the gated pods of a group whose decision went away: a
// group's pods created while its eviction was in force submit it now.
func (p *Path) WakeGated(key workload.Key) {
	if !p.Shard.Owns(key.Namespace, key.Name) {
		return
	}
	for _, pod := range p.Roster.Pods(key) {
		if workload.IsGroupMember(pod) && pod.DeletionTimestamp == nil && podpatch.HasGate(pod) {
			p.Wake(pod)
		}
	}
}
