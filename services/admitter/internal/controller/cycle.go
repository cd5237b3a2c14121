package controller

import (
	"context"
	"errors"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/services/admitter/internal/lifecycle"
	"github.com/sluice-dev/sluice/services/admitter/internal/scheduler"
	"github.com/sluice-dev/sluice/services/admitter/internal/workload"
)

// triggerCycle asks for a scheduling cycle; requests made while one is
// due coalesce.
func (a *Admitter) triggerCycle() {
	select {
	case a.trigger <- struct{}{}:
	default:
	}
}

// triggerCycleAt asks for a scheduling cycle at t (the earliest of the
// times asked for wins).
func (a *Admitter) triggerCycleAt(t time.Time) {
	a.timerMu.Lock()
	defer a.timerMu.Unlock()
	if a.timer != nil && !a.timerAt.After(t) && a.timerAt.After(time.Now()) {
		return
	}
	if a.timer != nil {
		a.timer.Stop()
	}
	a.timerAt = t
	a.timer = time.AfterFunc(time.Until(t), a.triggerCycle)
}

func (a *Admitter) cycleLoop(ctx context.Context) {
	// Settling a write whose outcome is unknown outlives the cycle that
	// made it, but not the loop.
	var settling sync.WaitGroup
	defer settling.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.trigger:
		}
		a.cycle(ctx, &settling)
	}
}

// cycle runs one scheduling cycle and writes what it decided: the
// reservations and evictions with bounded concurrency; the waiting
// messages go to the writer's own workers. The next cycle waits for the
// writes: the events that come meanwhile (workloads created, finished,
// evicted) are answered together by it, and a head that does not fit now
// is not made to preempt while quota is about to be freed anyway. A cycle
// reserves for at most scheduler.MaxReservationsPerCycle, so the wait
// stays bounded however deep the queues.
func (a *Admitter) cycle(ctx context.Context, settling *sync.WaitGroup) {
	start := time.Now()
	a.syncQueues(ctx)
	plan := a.sched.Cycle(start)
	a.cfg.Metrics.CycleDuration.Observe(time.Since(start).Seconds())
	if !plan.Wake.IsZero() {
		a.triggerCycleAt(plan.Wake)
	}
	for _, w := range plan.Waiting {
		a.writer.Tell(w.Workload, w.Message)
	}
	// The writes get ctx itself, not a context of the group's, which Wait
	// would cancel: settling a reservation outlives the cycle.
	var g errgroup.Group
	g.SetLimit(a.cfg.WriteConcurrency)
	for _, r := range plan.Reservations {
		g.Go(func() error { a.reserve(ctx, r, settling); return nil })
	}
	for _, ev := range plan.Evictions {
		g.Go(func() error { a.evict(ctx, ev); return nil })
	}
	_ = g.Wait()
	if len(plan.Reservations)+len(plan.Evictions) > 0 {
		a.cfg.Metrics.CycleWritesDuration.Observe(time.Since(start).Seconds())
	}
	if plan.More {
		a.triggerCycle()
	}
}

// reserve writes reservation r; one whose outcome is unknown is settled
// in the background, under ctx.
func (a *Admitter) reserve(ctx context.Context, r scheduler.Reservation, settling *sync.WaitGroup) {
	id := workload.NewReservationID()
	err := a.writer.Reserve(ctx, r, id)
	switch {
	case err == nil:
	case notWritten(err):
		a.sched.Unassume(r.Workload)
		a.triggerCycle()
		if !errors.Is(err, lifecycle.ErrStale) && !errors.Is(err, lifecycle.ErrMoved) {
			ctrl.LoggerFrom(ctx).Error(err, "reserve quota", "workload", r.Workload.Namespace+"/"+r.Workload.Name)
		}
	default:
		// The write may have landed, or still land: giving the quota
		// back before knowing could book it twice.
		settling.Add(1)
		go func() {
			defer settling.Done()
			a.settle(ctx, r, id, err)
		}()
	}
}

// evict writes eviction ev.
func (a *Admitter) evict(ctx context.Context, ev scheduler.Eviction) {
	err := a.writer.EvictVersion(ctx, ev.Workload, ev.Reason, ev.Message)
	switch {
	case err == nil:
	case errors.Is(err, lifecycle.ErrMoved), errors.Is(err, lifecycle.ErrStale):
		// A newer version of the workload comes, and with it the next
		// look: the scheduler hands it out again if it still should be
		// evicted (a victim of preemption through its preemptor, which
		// waits parked).
		a.sched.RetryEviction(ev.Workload)
		a.triggerCycle()
	default:
		ctrl.LoggerFrom(ctx).Error(err, "evict", "workload", ev.Workload.Namespace+"/"+ev.Workload.Name, "reason", ev.Reason)
		a.sched.RetryEviction(ev.Workload)
		a.triggerCycleAt(time.Now().Add(time.Second))
	}
}

// syncQueues hands the scheduler the queues, flavors and checks as the
// cache holds them now. The informer updates its cache before it runs the
// handlers that tell the scheduler, so without this a cycle started by a
// workload right after a queue changed could plan against the old queue.
// The reads share the cache's objects (no copies), and the scheduler
// ignores versions it has seen, so this costs a pass over the queues.
func (a *Admitter) syncQueues(ctx context.Context) {
	var cqs v1alpha1.ClusterQueueList
	if err := a.cfg.Cache.List(ctx, &cqs, client.UnsafeDisableDeepCopy); err == nil {
		for i := range cqs.Items {
			a.sched.SetClusterQueue(&cqs.Items[i])
		}
	}
	var cohorts v1alpha1.CohortList
	if err := a.cfg.Cache.List(ctx, &cohorts, client.UnsafeDisableDeepCopy); err == nil {
		for i := range cohorts.Items {
			a.sched.SetCohort(&cohorts.Items[i])
		}
	}
	var lqs v1alpha1.LocalQueueList
	if err := a.cfg.Cache.List(ctx, &lqs, client.UnsafeDisableDeepCopy); err == nil {
		for i := range lqs.Items {
			a.sched.SetLocalQueue(&lqs.Items[i])
		}
	}
	var rfs v1alpha1.ResourceFlavorList
	if err := a.cfg.Cache.List(ctx, &rfs, client.UnsafeDisableDeepCopy); err == nil {
		for i := range rfs.Items {
			a.sched.SetFlavor(&rfs.Items[i])
		}
	}
	var acs v1alpha1.AdmissionCheckList
	if err := a.cfg.Cache.List(ctx, &acs, client.UnsafeDisableDeepCopy); err == nil {
		for i := range acs.Items {
			a.sched.SetCheck(&acs.Items[i])
		}
	}
}
