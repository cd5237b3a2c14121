// Package controller is the admitter's control loop: it keeps every
// Workload in memory (from informer caches and its own writes), runs
// batched scheduling cycles that reserve quota, drives the admission-check
// phase, evicts, finishes and lets deleted workloads go, owes and sends
// the checks' Release calls, publishes the decisions in force on the
// stream only after they are persisted, and keeps ClusterQueue,
// LocalQueue and AdmissionCheck status up to date. It is the only writer
// of Workloads.
package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/services/admitter/internal/checks"
	"github.com/sluice-dev/sluice/services/admitter/internal/metrics"
	"github.com/sluice-dev/sluice/services/admitter/internal/stream"
)

// FieldOwner is the field manager of every write the admitter makes.
const FieldOwner = "sluice-admitter"

// Defaults for Config.
const (
	DefaultWriteConcurrency = 32
	DefaultCheckWorkers     = 16
	DefaultStatusInterval   = time.Second
	DefaultProbeInterval    = 30 * time.Second
	DefaultEventInterval    = 10 * time.Second
	// pendingMessageInterval is the least time between two writes of a
	// waiting workload's message when only the message changes (the
	// amount missing moves with every admission and finish).
	pendingMessageInterval = 10 * time.Second
)

// Config is what the Admitter needs.
type Config struct {
	// Client writes (with FieldOwner) and reads from the informer cache.
	Client client.Client
	// APIReader reads from the API server, for the rare cases the cache
	// cannot answer (a conflict, an object created by someone else).
	APIReader client.Reader
	// Cache is the informer cache the client reads from.
	Cache cache.Cache
	// Recorder emits Events.
	Recorder events.EventRecorder
	// Stream receives the decisions.
	Stream *stream.Broadcaster
	// Checks calls admission-check providers.
	Checks *checks.Pool
	// Metrics are the admitter's collectors.
	Metrics *metrics.Metrics
	// Log is the admitter's logger.
	Log logr.Logger
	// OnLeading is called once the admitter leads and serves.
	OnLeading func()

	// WriteConcurrency bounds the concurrent writes of a cycle.
	WriteConcurrency int
	// CheckWorkers is the number of workloads whose checks are evaluated
	// at once.
	CheckWorkers int
	// ReleaseWorkers bounds the Release calls in flight.
	ReleaseWorkers int
	// StatusInterval is the least time between two status writes of one
	// ClusterQueue or LocalQueue.
	StatusInterval time.Duration
	// ProbeInterval is how often providers are asked for their identity
	// and readiness.
	ProbeInterval time.Duration
	// EventInterval is how often the Normal events that summarise the
	// admissions of each ClusterQueue are emitted.
	EventInterval time.Duration
}

// Admitter is the admitter's control loop. Create it with New, register
// its informer handlers with Watch, and run it (as a leader-election
// runnable) with Start.
type Admitter struct {
	cfg   Config
	log   logr.Logger
	store *store
	locks *keyLocks

	leading  atomic.Bool
	leaderMu sync.Mutex // orders becoming leader against decision publishing

	trigger   chan struct{}
	timerMu   sync.Mutex
	timerAt   time.Time
	timer     *time.Timer
	checkQ    workqueue.TypedDelayingInterface[types.NamespacedName]
	probeQ    workqueue.TypedDelayingInterface[string]
	deletionQ workqueue.TypedRateLimitingInterface[types.NamespacedName]
	releases  *releases
	deletions *stoppedSet
	progress  *progressTracker
	queues    *queueStatus
	summaries *summaries

	pendingMu     sync.Mutex
	pendingWrites map[types.NamespacedName]time.Time
}

// New returns an Admitter that does nothing until Watch and Start.
func New(cfg Config) *Admitter {
	if cfg.WriteConcurrency <= 0 {
		cfg.WriteConcurrency = DefaultWriteConcurrency
	}
	if cfg.CheckWorkers <= 0 {
		cfg.CheckWorkers = DefaultCheckWorkers
	}
	if cfg.ReleaseWorkers <= 0 {
		cfg.ReleaseWorkers = DefaultReleaseWorkers
	}
	if cfg.StatusInterval <= 0 {
		cfg.StatusInterval = DefaultStatusInterval
	}
	if cfg.ProbeInterval <= 0 {
		cfg.ProbeInterval = DefaultProbeInterval
	}
	if cfg.EventInterval <= 0 {
		cfg.EventInterval = DefaultEventInterval
	}
	if cfg.OnLeading == nil {
		cfg.OnLeading = func() {}
	}
	return &Admitter{
		cfg:     cfg,
		log:     cfg.Log,
		store:   newStore(),
		locks:   newKeyLocks(),
		trigger: make(chan struct{}, 1),
		checkQ:  workqueue.NewTypedDelayingQueue[types.NamespacedName](),
		probeQ:  workqueue.NewTypedDelayingQueue[string](),
		deletionQ: workqueue.NewTypedRateLimitingQueue(
			workqueue.NewTypedItemExponentialFailureRateLimiter[types.NamespacedName](100*time.Millisecond, 30*time.Second)),
		releases:      newReleases(),
		deletions:     newStoppedSet(),
		progress:      newProgressTracker(),
		queues:        newQueueStatus(),
		summaries:     newSummaries(),
		pendingWrites: map[types.NamespacedName]time.Time{},
	}
}

// Leading reports whether this admitter is the leader and serves.
func (a *Admitter) Leading() bool { return a.leading.Load() }

// Ready is a readiness check: nil only while leading.
func (a *Admitter) Ready(context.Context) error {
	if !a.leading.Load() {
		return errors.New("not the leader")
	}
	return nil
}

// NeedLeaderElection makes the manager start the Admitter only on the
// leader.
func (a *Admitter) NeedLeaderElection() bool { return true }

// Watch registers the informer handlers that keep the store and trigger
// the loops. Call it before the cache starts.
func (a *Admitter) Watch(ctx context.Context) error {
	wlInformer, err := a.cfg.Cache.GetInformer(ctx, &v1alpha1.Workload{})
	if err != nil {
		return fmt.Errorf("workload informer: %w", err)
	}
	if _, err := wlInformer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { a.observe(obj) },
		UpdateFunc: func(_, obj any) { a.observe(obj) },
		DeleteFunc: a.observeDelete,
	}); err != nil {
		return fmt.Errorf("workload informer handler: %w", err)
	}
	cycleOnChange := toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { a.triggerCycle() },
		UpdateFunc: func(any, any) { a.triggerCycle() },
		DeleteFunc: func(any) { a.triggerCycle() },
	}
	for _, obj := range []client.Object{&v1alpha1.ClusterQueue{}, &v1alpha1.LocalQueue{}, &v1alpha1.ResourceFlavor{}, &corev1.Namespace{}} {
		inf, err := a.cfg.Cache.GetInformer(ctx, obj)
		if err != nil {
			return fmt.Errorf("%T informer: %w", obj, err)
		}
		if _, err := inf.AddEventHandler(cycleOnChange); err != nil {
			return fmt.Errorf("%T informer handler: %w", obj, err)
		}
	}
	acInformer, err := a.cfg.Cache.GetInformer(ctx, &v1alpha1.AdmissionCheck{})
	if err != nil {
		return fmt.Errorf("admission check informer: %w", err)
	}
	if _, err := acInformer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if ac, ok := obj.(*v1alpha1.AdmissionCheck); ok {
				a.probeQ.Add(ac.Name)
			}
			a.triggerCycle()
		},
		UpdateFunc: func(oldObj, obj any) {
			oldAC, ok1 := oldObj.(*v1alpha1.AdmissionCheck)
			ac, ok2 := obj.(*v1alpha1.AdmissionCheck)
			if ok1 && ok2 && oldAC.Generation != ac.Generation {
				a.probeQ.Add(ac.Name)
			}
			a.triggerCycle()
		},
		DeleteFunc: func(any) { a.triggerCycle() },
	}); err != nil {
		return fmt.Errorf("admission check informer handler: %w", err)
	}
	return nil
}

// observe records an object from the informer.
func (a *Admitter) observe(obj any) {
	wl, ok := obj.(*v1alpha1.Workload)
	if !ok {
		return
	}
	a.record(wl)
}

func (a *Admitter) observeDelete(obj any) {
	if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	wl, ok := obj.(*v1alpha1.Workload)
	if !ok {
		return
	}
	key := types.NamespacedName{Namespace: wl.Namespace, Name: wl.Name}
	prev := a.store.remove(key, wl.UID)
	if prev == nil {
		return
	}
	a.forgetDecision(prev)
	a.progress.forget(key)
	a.forgetPendingWrite(key)
	a.releases.forget(key)
	a.deletions.forget(key)
	a.triggerCycle()
}

// record stores wl (a newer version of a workload, from the informer or
// from a write) and reacts to it.
func (a *Admitter) record(wl *v1alpha1.Workload) {
	prev, applied := a.store.upsert(wl)
	if !applied {
		return
	}
	a.syncDecision(wl)
	if !a.leading.Load() {
		return
	}
	if needsCheckPhase(wl) && (prev == nil || prev.UID != wl.UID || reservationID(prev) != reservationID(wl) || !needsCheckPhase(prev)) {
		a.checkQ.Add(types.NamespacedName{Namespace: wl.Namespace, Name: wl.Name})
	}
	a.releases.enqueue(wl)
	a.watchDeletion(wl)
	a.triggerCycle()
}

func (a *Admitter) forgetPendingWrite(key types.NamespacedName) {
	a.pendingMu.Lock()
	delete(a.pendingWrites, key)
	a.pendingMu.Unlock()
}

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

// Start runs the admitter's loops once this process leads: it loads every
// Workload from the synced cache, publishes the decisions in force, and
// then schedules, checks and reports status until ctx ends.
func (a *Admitter) Start(ctx context.Context) error {
	if !a.cfg.Cache.WaitForCacheSync(ctx) {
		return errors.New("informer caches did not sync")
	}
	var list v1alpha1.WorkloadList
	if err := a.cfg.Cache.List(ctx, &list); err != nil {
		return fmt.Errorf("list workloads: %w", err)
	}
	for i := range list.Items {
		a.store.upsert(&list.Items[i])
	}
	a.becomeLeader()
	a.log.Info("leading", "workloads", len(list.Items), "revision", a.cfg.Stream.Revision())
	for _, wl := range a.store.list() {
		if needsCheckPhase(wl) {
			a.checkQ.Add(types.NamespacedName{Namespace: wl.Namespace, Name: wl.Name})
		}
		a.releases.enqueue(wl)
		a.watchDeletion(wl)
	}
	var acs v1alpha1.AdmissionCheckList
	if err := a.cfg.Cache.List(ctx, &acs); err != nil {
		return fmt.Errorf("list admission checks: %w", err)
	}
	for _, ac := range acs.Items {
		a.probeQ.Add(ac.Name)
	}
	a.triggerCycle()
	a.cfg.OnLeading()

	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { a.cycleLoop(ctx); return nil })
	for range a.cfg.CheckWorkers {
		g.Go(func() error { a.checkWorker(ctx); return nil })
	}
	for range a.cfg.ReleaseWorkers {
		g.Go(func() error { a.releaseWorker(ctx); return nil })
	}
	g.Go(func() error { a.deletionWorker(ctx); return nil })
	g.Go(func() error { a.probeWorker(ctx); return nil })
	g.Go(func() error { every(ctx, a.cfg.ProbeInterval, a.probeAll); return nil })
	g.Go(func() error { every(ctx, a.cfg.StatusInterval, a.writeQueueStatuses); return nil })
	g.Go(func() error { every(ctx, a.cfg.EventInterval, a.emitSummaries); return nil })
	g.Go(func() error {
		<-ctx.Done()
		a.checkQ.ShutDown()
		a.probeQ.ShutDown()
		a.releases.q.ShutDown()
		a.deletionQ.ShutDown()
		return nil
	})
	err := g.Wait()
	a.leading.Store(false)
	return err
}

func (a *Admitter) cycleLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.trigger:
		}
		a.cycle(ctx)
	}
}
