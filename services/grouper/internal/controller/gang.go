package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1alpha2 "k8s.io/api/scheduling/v1alpha2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/pkg/crashpoint"
	"github.com/sluice-dev/sluice/services/grouper/internal/gang"
	"github.com/sluice-dev/sluice/services/grouper/internal/metrics"
	"github.com/sluice-dev/sluice/services/grouper/internal/workload"
)

// ReasonGangPending is the event reason when a group's PodGroup cannot be
// put in place yet.
const ReasonGangPending = "GangPending"

// staleGangRecheck is how soon a group whose name still carries the
// PodGroup of an earlier run looks again: garbage collection removes it
// within moments of that run's Workload going.
const staleGangRecheck = time.Second

// gangs remembers, per group, the Workload uid whose PodGroup is in
// place, so that a group costs one PodGroup write and not one per pod. It
// lives in memory only: after a restart the create meets AlreadyExists
// and a read tells the PodGroup is the run's. Its per-group lock lets one
// pod of the group create while the group's other pods wait for it.
type gangs struct {
	mu sync.Mutex
	m  map[workload.Key]*gangState
}

type gangState struct {
	mu sync.Mutex
	// ready is the uid of the Workload whose gang is in place.
	ready types.UID
}

func newGangs() *gangs { return &gangs{m: map[workload.Key]*gangState{}} }

func (g *gangs) state(k workload.Key) *gangState {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.m[k]
	if st == nil {
		st = &gangState{}
		g.m[k] = st
	}
	return st
}

func (g *gangs) forget(k workload.Key) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.m, k)
}

// ensureGang puts the group's PodGroup in place before pod is ungated,
// when the pod asks for a gang (see gang.MinCount). ready false means the
// pod must stay gated for now: the pods' PodGroup name still holds an
// earlier run's PodGroup, which garbage collection is removing.
func (r *Reconciler) ensureGang(ctx context.Context, pod *corev1.Pod, key workload.Key, uid string, pods []*corev1.Pod) (ready bool, err error) {
	minCount, ok := gang.MinCount(pod, key.Name)
	if !ok {
		return true, nil
	}
	if uid == "" {
		return false, fmt.Errorf("admission of group %s names no Workload uid: the PodGroup's owner needs it", key)
	}
	owner := gang.Owner{Name: key.Name, UID: types.UID(uid)}
	st := r.gangs.state(key)
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.ready == owner.UID {
		return true, nil
	}
	standing, err := r.createPodGroup(ctx, key, minCount, owner)
	if err != nil {
		r.opts.Metrics.PodGroups.WithLabelValues(metrics.ResultError).Inc()
		r.warnGroup(key, pods, ReasonGangPending, fmt.Sprintf("creating the PodGroup of group %s failed, retrying: %v", key, err))
		return false, err
	}
	r.opts.Metrics.PodGroups.WithLabelValues(standing).Inc()
	log := r.opts.Log.WithValues("group", key.String(), "workloadUID", uid)
	switch standing {
	case gang.Stale.String():
		log.V(1).Info("PodGroup of an earlier run still there; waiting for garbage collection")
		r.warnGroup(key, pods, ReasonGangPending, fmt.Sprintf(
			"PodGroup %s belongs to an earlier run of the group; the pods stay gated until garbage collection removes it", key))
		return false, nil
	case gang.Foreign.String():
		log.Info("PodGroup of the group's name was not created by sluice; the pods use it as it is")
	default:
		log.V(1).Info("PodGroup in place", "minCount", minCount, "result", standing)
	}
	st.ready = owner.UID
	return true, nil
}

// createPodGroup creates the group's PodGroup and returns the result as a
// metric label: created, or the standing of the one found under its name.
func (r *Reconciler) createPodGroup(ctx context.Context, key workload.Key, minCount int32, owner gang.Owner) (string, error) {
	pg := gang.PodGroup(key.Namespace, key.Name, minCount, owner)
	err := r.opts.Client.Create(ctx, pg)
	if err == nil {
		crashpoint.Hit("grouper/podgroup")
		return metrics.ResultCreated, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("create PodGroup %s: %w", key, err)
	}
	// Rare (a restart, or a name used again): one read from the API
	// server rather than a cache of every PodGroup in the cluster.
	existing := &schedulingv1alpha2.PodGroup{}
	if err := r.opts.APIReader.Get(ctx, client.ObjectKeyFromObject(pg), existing); err != nil {
		return "", fmt.Errorf("read existing PodGroup %s: %w", key, err)
	}
	return gang.StandingOf(existing, owner).String(), nil
}
