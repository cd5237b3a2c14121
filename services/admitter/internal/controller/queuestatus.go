package controller

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/services/admitter/internal/workload"
)

// queueStatus holds the ClusterQueue and LocalQueue statuses the last
// cycle computed; writeQueueStatuses writes those that differ from what the
// API server has, at most once per queue per StatusInterval.
type queueStatus struct {
	mu  sync.Mutex
	cqs map[string]cqSummary
	lqs map[types.NamespacedName]lqSummary
}

type cqSummary struct {
	active          bool
	reason, message string
	counts          queueCounts
	flavors         []v1alpha1.FlavorUsage
}

type lqSummary struct {
	active          bool
	reason, message string
	counts          queueCounts
}

func newQueueStatus() *queueStatus {
	return &queueStatus{cqs: map[string]cqSummary{}, lqs: map[types.NamespacedName]lqSummary{}}
}

// update records what a cycle found.
func (q *queueStatus) update(w *world) {
	cqs := make(map[string]cqSummary, len(w.queues))
	for name, st := range w.queues {
		s := cqSummary{active: st.active, reason: st.reason, message: st.message, counts: st.counts}
		for _, rg := range st.cq.Spec.ResourceGroups {
			for _, f := range rg.Flavors {
				fu := v1alpha1.FlavorUsage{Name: f.Name}
				for _, res := range rg.CoveredResources {
					fu.Resources = append(fu.Resources, v1alpha1.ResourceUsage{Name: res, Total: st.used.Get(f.Name, res)})
				}
				s.flavors = append(s.flavors, fu)
			}
		}
		cqs[name] = s
	}
	lqs := make(map[types.NamespacedName]lqSummary, len(w.localQs))
	for key, st := range w.localQs {
		s := lqSummary{counts: st.counts}
		cq := w.queues[st.lq.Spec.ClusterQueue]
		switch {
		case cq == nil:
			s.reason, s.message = "ClusterQueueNotFound", "ClusterQueue "+st.lq.Spec.ClusterQueue+" doesn't exist"
		case st.lq.Spec.StopPolicy != nil && *st.lq.Spec.StopPolicy != v1alpha1.None:
			s.reason, s.message = "Stopped", "the LocalQueue is stopped (stopPolicy "+string(*st.lq.Spec.StopPolicy)+")"
		case !cq.active:
			s.reason, s.message = "ClusterQueueInactive", "ClusterQueue "+cq.cq.Name+" is inactive: "+cq.message
		default:
			s.active, s.reason, s.message = true, "Ready", "Can submit new workloads to ClusterQueue "+cq.cq.Name
		}
		lqs[key] = s
	}
	q.mu.Lock()
	q.cqs, q.lqs = cqs, lqs
	q.mu.Unlock()
}

func (q *queueStatus) snapshot() (map[string]cqSummary, map[types.NamespacedName]lqSummary) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.cqs, q.lqs
}

func conditionStatus(active bool) metav1.ConditionStatus {
	if active {
		return metav1.ConditionTrue
	}
	return metav1.ConditionFalse
}

// every calls f each period until ctx is done, the first time one period
// from now.
func every(ctx context.Context, period time.Duration, f func(context.Context)) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f(ctx)
		}
	}
}

func (a *Admitter) writeQueueStatuses(ctx context.Context) {
	cqs, lqs := a.queues.snapshot()
	for name, s := range cqs {
		var cq v1alpha1.ClusterQueue
		if err := a.cfg.Cache.Get(ctx, client.ObjectKey{Name: name}, &cq); err != nil {
			continue
		}
		want := cq.DeepCopy()
		workload.SetCondition(&want.Status.Conditions, v1alpha1.ClusterQueueActive, conditionStatus(s.active), s.reason, s.message, cq.Generation)
		want.Status.PendingWorkloads = s.counts.pending
		want.Status.ReservingWorkloads = s.counts.reserving
		want.Status.AdmittedWorkloads = s.counts.admitted
		want.Status.FlavorsReservation = s.flavors
		a.patchQueueStatus(ctx, &cq, want)
	}
	for key, s := range lqs {
		var lq v1alpha1.LocalQueue
		if err := a.cfg.Cache.Get(ctx, key, &lq); err != nil {
			continue
		}
		want := lq.DeepCopy()
		workload.SetCondition(&want.Status.Conditions, v1alpha1.ClusterQueueActive, conditionStatus(s.active), s.reason, s.message, lq.Generation)
		want.Status.PendingWorkloads = s.counts.pending
		want.Status.ReservingWorkloads = s.counts.reserving
		want.Status.AdmittedWorkloads = s.counts.admitted
		a.patchQueueStatus(ctx, &lq, want)
	}
}

// patchQueueStatus writes want's status when it differs from orig's. The
// admitter owns these fields, so a plain merge patch is enough; a stale
// cache at worst repeats a write.
func (a *Admitter) patchQueueStatus(ctx context.Context, orig, want client.Object) {
	if equality.Semantic.DeepEqual(statusOf(orig), statusOf(want)) {
		return
	}
	if err := a.cfg.Client.Status().Patch(ctx, want, client.MergeFrom(orig), client.FieldOwner(FieldOwner)); err != nil {
		a.log.V(1).Info("write queue status", "queue", client.ObjectKeyFromObject(orig).String(), "error", err.Error())
	}
}

func statusOf(obj client.Object) any {
	switch o := obj.(type) {
	case *v1alpha1.ClusterQueue:
		return o.Status
	case *v1alpha1.LocalQueue:
		return o.Status
	}
	return nil
}
