package groups

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1alpha2 "k8s.io/api/scheduling/v1alpha2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/pkg/crashpoint"
	"github.com/sluice-dev/sluice/services/grouper/internal/gang"
	"github.com/sluice-dev/sluice/services/grouper/internal/metrics"
	"github.com/sluice-dev/sluice/services/grouper/internal/workload"
)

// Event reasons of a group's gang, emitted once per group and message.
const (
	// ReasonGangPending: the group's PodGroup cannot be created yet; the
	// pods stay gated.
	ReasonGangPending = "GangPending"
	// ReasonGangOfEarlierRun: the group's name still holds the PodGroup of
	// an earlier run with another gang size, which this run uses.
	ReasonGangOfEarlierRun = "GangOfEarlierRun"
)

// gangState remembers the uid of the Workload whose PodGroup is in
// place, so that a group costs one PodGroup write and not one per pod. It
// lives in memory only: after a restart the create meets AlreadyExists
// and a read tells the PodGroup is the run's. Its lock lets one pod of the
// group create while the group's other pods wait for it.
type gangState struct {
	mu sync.Mutex
	// ready is the uid of the Workload whose gang is in place.
	ready types.UID
}

// ensureGang puts the group's PodGroup in place before pod is ungated,
// when the pod asks for a gang (see gang.MinCount). An error leaves the
// pod gated: ungated, it would only wait in the scheduler for a PodGroup
// that is not there.
func (p *Path) ensureGang(ctx context.Context, pod *corev1.Pod, key workload.Key, uid string) error {
	minCount, ok := gang.MinCount(pod, key.Name)
	if !ok {
		return nil
	}
	if uid == "" {
		return fmt.Errorf("admission of group %s names no Workload uid: the PodGroup's owner needs it", key)
	}
	owner := gang.Owner{Name: key.Name, UID: types.UID(uid)}
	st := p.known.gang(key)
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.ready == owner.UID {
		return nil
	}
	existing, err := p.createPodGroup(ctx, key, minCount, owner)
	if err != nil {
		p.Metrics.PodGroups.WithLabelValues(metrics.ResultError).Inc()
		p.warnGroup(key, ReasonGangPending, fmt.Sprintf("creating the PodGroup of group %s failed, retrying: %v", key, err))
		return err
	}
	log := p.Log.WithValues("group", key.String(), "workloadUID", uid, "minCount", minCount)
	if existing == nil {
		p.Metrics.PodGroups.WithLabelValues(metrics.ResultCreated).Inc()
		log.V(1).Info("PodGroup created")
	} else {
		p.foundPodGroup(key, existing, owner, minCount)
	}
	st.ready = owner.UID
	return nil
}

// foundPodGroup accounts for a PodGroup that already held the group's
// name. The run's own (found again after a restart) is in place. Any
// other is used as it is: one sluice did not make is someone's choice,
// and an earlier run's cannot be replaced while the run's pods name it —
// kube-controller-manager deletes it only once no active pod does.
func (p *Path) foundPodGroup(key workload.Key, existing *schedulingv1alpha2.PodGroup, owner gang.Owner, minCount int32) {
	standing := gang.StandingOf(existing, owner)
	p.Metrics.PodGroups.WithLabelValues(standing.String()).Inc()
	log := p.Log.WithValues("group", key.String(), "workloadUID", owner.UID, "minCount", minCount,
		"existingMinCount", gang.MinCountOf(existing))
	switch standing {
	case gang.Current:
		log.V(1).Info("PodGroup in place")
	case gang.Foreign:
		log.Info("a PodGroup sluice did not create holds the group's name; the pods use it as it is")
	case gang.Earlier:
		log.Info("the PodGroup of an earlier run holds the group's name; this run uses it until it goes")
		if got := gang.MinCountOf(existing); got != minCount {
			p.warnGroup(key, ReasonGangOfEarlierRun, fmt.Sprintf(
				"group %s runs with the PodGroup of an earlier run, whose gang minCount is %d, not this run's %d: it goes once no pod of the group is active",
				key, got, minCount))
		}
	}
}

// createPodGroup creates the group's PodGroup. When the name is taken it
// returns the PodGroup holding it.
func (p *Path) createPodGroup(ctx context.Context, key workload.Key, minCount int32, owner gang.Owner) (*schedulingv1alpha2.PodGroup, error) {
	pg := gang.PodGroup(key.Namespace, key.Name, minCount, owner)
	err := p.Client.Create(ctx, pg)
	if err == nil {
		crashpoint.Hit("grouper/podgroup")
		return nil, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create PodGroup %s: %w", key, err)
	}
	// Rare (a restart, or a name used again): one read from the API
	// server rather than a cache of every PodGroup in the cluster.
	existing := &schedulingv1alpha2.PodGroup{}
	if err := p.APIReader.Get(ctx, client.ObjectKeyFromObject(pg), existing); err != nil {
		return nil, fmt.Errorf("read existing PodGroup %s: %w", key, err)
	}
	return existing, nil
}

// podGroupRecheck is how soon a group sized by a PodGroup that is missing,
// or has no gang, looks for it again.
const podGroupRecheck = 5 * time.Second

// gangSize returns the size of a group that takes it from its PodGroup's
// gang (gangSized: a pod has no total count; see podgroup.GangSized): the
// gang's minCount, read once per group from the API server. 0 for other
// groups, and while the PodGroup is missing or has no gang policy.
func (p *Path) gangSize(ctx context.Context, key workload.Key, gangSized bool) (int32, error) {
	if !gangSized {
		return 0, nil
	}
	var size int32
	now, recent := p.Now(), false
	p.known.update(key, func(g *groupState) {
		size, recent = g.gangSize, now.Sub(g.gangLooked) < podGroupRecheck
	})
	if size > 0 || recent {
		return size, nil
	}
	pg := &schedulingv1alpha2.PodGroup{}
	err := p.APIReader.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: key.Name}, pg)
	switch {
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		p.known.update(key, func(g *groupState) { g.gangLooked = now })
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("read PodGroup %s: %w", key, err)
	}
	size = gang.MinCountOf(pg)
	p.known.update(key, func(g *groupState) { g.gangSize, g.gangLooked = size, now })
	return size, nil
}
