// Package controller wires the admitter together. The Admitter keeps the
// store of Workloads from the informers and its own writes, and hands every
// change to the parts that act on it: the scheduler (queues, usage and
// scheduling cycles), the check phase, the lifecycle Writer (every Workload
// write, deletions included), the Release tracker, the prober and the
// queue status reporter. It publishes the decisions in force on the stream
// only after they are persisted, and serves the calls the gRPC server
// forwards — only while it leads.
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
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/services/admitter/internal/changewatch"
	"github.com/sluice-dev/sluice/services/admitter/internal/checkphase"
	"github.com/sluice-dev/sluice/services/admitter/internal/checks"
	"github.com/sluice-dev/sluice/services/admitter/internal/deadline"
	"github.com/sluice-dev/sluice/services/admitter/internal/lifecycle"
	"github.com/sluice-dev/sluice/services/admitter/internal/metrics"
	"github.com/sluice-dev/sluice/services/admitter/internal/probe"
	"github.com/sluice-dev/sluice/services/admitter/internal/queuestatus"
	"github.com/sluice-dev/sluice/services/admitter/internal/releases"
	"github.com/sluice-dev/sluice/services/admitter/internal/scheduler"
	"github.com/sluice-dev/sluice/services/admitter/internal/startup"
	"github.com/sluice-dev/sluice/services/admitter/internal/store"
	"github.com/sluice-dev/sluice/services/admitter/internal/stream"
	"github.com/sluice-dev/sluice/services/admitter/internal/workload"
)

// FieldOwner is the field manager of every write the admitter makes.
const FieldOwner = lifecycle.FieldOwner

// Defaults for Config.
const (
	DefaultWriteConcurrency = 32
	DefaultCheckWorkers     = checkphase.DefaultWorkers
	DefaultReleaseWorkers   = releases.DefaultWorkers
	DefaultStatusInterval   = queuestatus.DefaultInterval
	DefaultProbeInterval    = probe.DefaultInterval
	DefaultEventInterval    = queuestatus.DefaultEventInterval
)

// ErrNotLeader is returned by calls made to an admitter that does not lead.
var ErrNotLeader = errors.New("this admitter is not the leader")

// ErrStale reports a write lost to a newer version of the workload; the
// caller may retry.
var ErrStale = lifecycle.ErrStale

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
	// Log is the admitter's logger; every part logs through the context.
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
	// ReleaseWait is how long a deleted Workload waits for providers that
	// fail its Releases before they are handed over to their
	// AdmissionChecks' status.owedReleases (see releases.Tracker.HandOver).
	ReleaseWait time.Duration
	// StatusInterval is the least time between two status writes of one
	// ClusterQueue or LocalQueue.
	StatusInterval time.Duration
	// ProbeInterval is how often providers are asked for their identity
	// and readiness.
	ProbeInterval time.Duration
	// EventInterval is how often the Normal events that summarise the
	// admissions of each ClusterQueue are emitted.
	EventInterval time.Duration
	// StartDefault is the start-up deadline of ClusterQueues without
	// their own waitForPodsReady; its zero value sets none.
	StartDefault startup.Policy
	// ReplacementWindow is the replacement window of ClusterQueues without
	// their own podGroupReplacementWindow (see lifecycle.Writer.NoPods);
	// zero gives a group's quota back as soon as it has no pod.
	ReplacementWindow time.Duration
	// FairSharing is the fair-sharing setting the scheduler runs with.
	FairSharing scheduler.FairSharing
}

// Admitter is the wiring of the admitter's parts. Create it with New,
// register its informer handlers with Watch, and run it (as a
// leader-election runnable) with Start.
type Admitter struct {
	cfg   Config
	store *store.Store

	sched     *scheduler.Scheduler
	writer    *lifecycle.Writer
	phase     *checkphase.Orchestrator
	releases  *releases.Tracker
	prober    *probe.Prober
	reporter  *queuestatus.Reporter
	deadlines *deadline.Watcher
	changes   *changewatch.Manager
	policies  *policies

	leading  atomic.Bool
	leaderMu sync.Mutex // orders becoming leader against decision publishing

	trigger chan struct{}
	timerMu sync.Mutex
	timerAt time.Time
	timer   *time.Timer
}

// New returns an Admitter that does nothing until Watch and Start.
func New(cfg Config) *Admitter {
	if cfg.WriteConcurrency <= 0 {
		cfg.WriteConcurrency = DefaultWriteConcurrency
	}
	if cfg.OnLeading == nil {
		cfg.OnLeading = func() {}
	}
	a := &Admitter{
		cfg:      cfg,
		store:    store.New(),
		sched:    scheduler.New(scheduler.WithFairSharing(cfg.FairSharing)),
		trigger:  make(chan struct{}, 1),
		policies: newPolicies(cfg.StartDefault),
	}
	locks := store.NewLocks()
	a.reporter = queuestatus.New(queuestatus.Config{
		Client: cfg.Client, Reader: cfg.Cache, Recorder: cfg.Recorder, Metrics: cfg.Metrics,
		Statuses: a.sched.Statuses, CohortStatuses: a.sched.CohortStatuses, Interval: cfg.StatusInterval, EventInterval: cfg.EventInterval,
	})
	a.releases = releases.New(releases.Config{
		Checks: cfg.Checks, Check: a.sched.Check, Workers: cfg.ReleaseWorkers,
		Client: cfg.Client, Recorder: cfg.Recorder, Metrics: cfg.Metrics, Wait: cfg.ReleaseWait,
		Changed: func(key types.NamespacedName) { a.writer.WatchDeletion(key) },
	})
	a.writer = lifecycle.New(lifecycle.Config{
		Client: cfg.Client, APIReader: cfg.APIReader, Store: a.store, Locks: locks,
		Recorder: cfg.Recorder, Metrics: cfg.Metrics, Releases: a.releases,
		Observe: a.record, Requeue: a.triggerCycle, Reserved: a.reporter.Reserved,
		StartPolicy: a.policies.get, ReplacementWindow: a.replacementWindow,
	})
	a.deadlines = deadline.New(deadline.Config{Store: a.store, Writer: a.writer, Policy: a.policies.get})
	a.phase = checkphase.New(checkphase.Config{
		Store: a.store, Locks: locks, Writer: a.writer, Checks: cfg.Checks, Metrics: cfg.Metrics,
		Recorder: cfg.Recorder, Catalog: a.sched.Catalog, Workers: cfg.CheckWorkers,
	})
	a.changes = changewatch.New(changewatch.Config{
		Conns:   cfg.Checks,
		Checks:  func() map[string]*v1alpha1.AdmissionCheck { _, acs := a.sched.Catalog(); return acs },
		Opened:  a.recheckAll,
		Changed: a.recheckKey,
		Metrics: cfg.Metrics,
	})
	a.prober = probe.New(probe.Config{
		Client: cfg.Client, Reader: cfg.Cache, Checks: cfg.Checks, Recorder: cfg.Recorder, Interval: cfg.ProbeInterval,
	})
	return a
}

// Tidy forgets, on a timer until ctx ends, what the admitter remembers of
// deleted workloads. It runs on every replica: a standby's store follows
// the informer too.
func (a *Admitter) Tidy(ctx context.Context) { a.store.Run(ctx) }

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

// Watch registers the informer handlers that keep the store and the
// scheduler up to date and trigger the loops. Call it before the cache
// starts.
func (a *Admitter) Watch(ctx context.Context) error {
	handlers := []struct {
		obj client.Object
		h   toolscache.ResourceEventHandlerFuncs
	}{
		{&v1alpha1.Workload{}, toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { a.observe(obj) },
			UpdateFunc: func(_, obj any) { a.observe(obj) },
			DeleteFunc: a.observeDelete,
		}},
		{&v1alpha1.ClusterQueue{}, a.schedulerHandler(
			func(obj any) {
				cq := obj.(*v1alpha1.ClusterQueue)
				a.sched.SetClusterQueue(cq)
				a.setPolicy(cq.Name, cq)
			},
			func(obj any) {
				name := obj.(*v1alpha1.ClusterQueue).Name
				a.sched.DeleteClusterQueue(name)
				a.setPolicy(name, nil)
			})},
		{&v1alpha1.Cohort{}, a.schedulerHandler(
			func(obj any) { a.sched.SetCohort(obj.(*v1alpha1.Cohort)) },
			func(obj any) { a.sched.DeleteCohort(obj.(*v1alpha1.Cohort).Name) })},
		{&v1alpha1.LocalQueue{}, a.schedulerHandler(
			func(obj any) { a.sched.SetLocalQueue(obj.(*v1alpha1.LocalQueue)) },
			func(obj any) { a.sched.DeleteLocalQueue(client.ObjectKeyFromObject(obj.(*v1alpha1.LocalQueue))) })},
		{&v1alpha1.ResourceFlavor{}, a.schedulerHandler(
			func(obj any) { a.sched.SetFlavor(obj.(*v1alpha1.ResourceFlavor)) },
			func(obj any) { a.sched.DeleteFlavor(obj.(*v1alpha1.ResourceFlavor).Name) })},
		{&corev1.Namespace{}, a.schedulerHandler(
			func(obj any) { ns := obj.(*corev1.Namespace); a.sched.SetNamespace(ns.Name, ns.Labels) },
			func(obj any) { a.sched.DeleteNamespace(obj.(*corev1.Namespace).Name) })},
		{&v1alpha1.AdmissionCheck{}, toolscache.ResourceEventHandlerFuncs{
			AddFunc: func(obj any) {
				ac := obj.(*v1alpha1.AdmissionCheck)
				a.sched.SetCheck(ac)
				a.releases.SetCheck(ac)
				a.prober.Enqueue(ac.Name)
				a.changes.Trigger()
				a.triggerCycle()
			},
			UpdateFunc: func(oldObj, obj any) {
				ac := obj.(*v1alpha1.AdmissionCheck)
				a.sched.SetCheck(ac)
				a.releases.SetCheck(ac)
				if oldObj.(*v1alpha1.AdmissionCheck).Generation != ac.Generation {
					a.prober.Enqueue(ac.Name)
				}
				a.changes.Trigger()
				a.triggerCycle()
			},
			DeleteFunc: func(obj any) {
				if ac, ok := unwrapDeleted(obj).(*v1alpha1.AdmissionCheck); ok {
					a.sched.DeleteCheck(ac.Name)
					a.releases.DeleteCheck(ac.Name)
				}
				a.changes.Trigger()
				a.triggerCycle()
			},
		}},
		{&corev1.Secret{}, toolscache.ResourceEventHandlerFuncs{
			AddFunc: a.secretChanged,
			UpdateFunc: func(oldObj, obj any) {
				if oldObj.(*corev1.Secret).ResourceVersion != obj.(*corev1.Secret).ResourceVersion {
					a.secretChanged(obj)
				}
			},
			DeleteFunc: func(obj any) { a.secretChanged(unwrapDeleted(obj)) },
		}},
	}
	// New Workloads read their WorkloadPriorityClass from the cache; the
	// informer starts with the others, so the first submission need not
	// wait for it.
	if _, err := a.cfg.Cache.GetInformer(ctx, &v1alpha1.WorkloadPriorityClass{}); err != nil {
		return fmt.Errorf("WorkloadPriorityClass informer: %w", err)
	}
	for _, h := range handlers {
		inf, err := a.cfg.Cache.GetInformer(ctx, h.obj)
		if err != nil {
			return fmt.Errorf("%T informer: %w", h.obj, err)
		}
		if _, err := inf.AddEventHandler(h.h); err != nil {
			return fmt.Errorf("%T informer handler: %w", h.obj, err)
		}
	}
	return nil
}

// secretChanged probes again every AdmissionCheck whose spec.tls names the
// Secret (the informer sees only sluice's namespace), so that its Active
// condition follows a Secret that is created, rotated, fixed or deleted.
// Calls need no telling: each reads its Secrets from the cache; a
// WatchChanges stream moves to the connection the new material makes.
func (a *Admitter) secretChanged(obj any) {
	secret, ok := obj.(*corev1.Secret)
	if !ok {
		return
	}
	a.changes.Trigger()
	_, acs := a.sched.Catalog()
	for name, ac := range acs {
		if checks.UsesSecret(ac, secret.Name) {
			a.prober.Enqueue(name)
		}
	}
}

// schedulerHandler tells the scheduler of an object's changes and asks
// for a cycle.
func (a *Admitter) schedulerHandler(set, del func(any)) toolscache.ResourceEventHandlerFuncs {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { set(obj); a.triggerCycle() },
		UpdateFunc: func(_, obj any) { set(obj); a.triggerCycle() },
		DeleteFunc: func(obj any) {
			if obj = unwrapDeleted(obj); obj != nil {
				del(obj)
			}
			a.triggerCycle()
		},
	}
}

// unwrapDeleted returns the object of a delete event, whether or not the
// informer missed the deletion itself.
func unwrapDeleted(obj any) any {
	if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		return tomb.Obj
	}
	return obj
}

// observe records an object from the informer.
func (a *Admitter) observe(obj any) {
	if wl, ok := obj.(*v1alpha1.Workload); ok {
		a.record(wl)
	}
}

func (a *Admitter) observeDelete(obj any) {
	wl, ok := unwrapDeleted(obj).(*v1alpha1.Workload)
	if !ok {
		return
	}
	key := workload.Key(wl)
	a.sched.Forget(key, wl.UID)
	prev := a.store.Remove(key, wl.UID)
	if prev == nil {
		return
	}
	a.forgetDecision(prev)
	a.phase.Forget(key)
	a.writer.Forget(key)
	a.releases.Forget(key)
	a.triggerCycle()
}

// record stores wl (a newer version of a workload, from the informer or
// from a write) and hands it to every part that reacts to it.
func (a *Admitter) record(wl *v1alpha1.Workload) {
	prev, applied := a.store.Upsert(wl)
	if !applied {
		return
	}
	a.sched.Observe(wl)
	a.syncDecision(wl)
	if !a.leading.Load() {
		return
	}
	key := workload.Key(wl)
	switch {
	case !checkphase.Needed(wl):
		a.phase.Forget(key)
	case prev == nil || prev.UID != wl.UID || workload.ReservationID(prev) != workload.ReservationID(wl) || !checkphase.Needed(prev):
		a.phase.Enqueue(key)
	}
	a.releases.Enqueue(wl)
	a.writer.WatchDeletion(key)
	a.watchDeadline(wl)
	a.triggerCycle()
}

// Start runs the admitter's loops once this process leads: it loads every
// Workload from the synced cache, publishes the decisions in force, and
// then schedules, checks, releases and reports until ctx ends.
func (a *Admitter) Start(ctx context.Context) error {
	ctx = ctrl.LoggerInto(ctx, a.cfg.Log)
	if !a.cfg.Cache.WaitForCacheSync(ctx) {
		return errors.New("informer caches did not sync")
	}
	var list v1alpha1.WorkloadList
	if err := a.cfg.Cache.List(ctx, &list); err != nil {
		return fmt.Errorf("list workloads: %w", err)
	}
	for i := range list.Items {
		if _, applied := a.store.Upsert(&list.Items[i]); applied {
			a.sched.Observe(&list.Items[i])
		}
	}
	if err := a.loadPolicies(ctx); err != nil {
		return err
	}
	a.becomeLeader()
	a.cfg.Log.Info("leading", "workloads", len(list.Items), "revision", a.cfg.Stream.Revision())
	for _, wl := range a.store.List() {
		if checkphase.Needed(wl) {
			a.phase.Enqueue(workload.Key(wl))
		}
		a.writer.WatchDeletion(workload.Key(wl))
		// Deadlines are read from the objects: every admitted workload's
		// is computed again, and one that passed meanwhile acts at once.
		a.watchDeadline(wl)
	}
	for i := range list.Items {
		// Finished (retired) workloads may still owe Releases too.
		a.releases.Enqueue(&list.Items[i])
	}
	a.triggerCycle()
	a.cfg.OnLeading()

	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { a.cycleLoop(ctx); return nil })
	g.Go(func() error { a.phase.Run(ctx); return nil })
	g.Go(func() error { a.releases.Run(ctx); return nil })
	g.Go(func() error { a.writer.Run(ctx); return nil })
	g.Go(func() error { a.prober.Run(ctx); return nil })
	g.Go(func() error { a.reporter.Run(ctx); return nil })
	g.Go(func() error { a.deadlines.Run(ctx); return nil })
	g.Go(func() error { a.changes.Run(ctx); return nil })
	err := g.Wait()
	a.leading.Store(false)
	return err
}

// Submit creates the Workload (see lifecycle.Writer.Submit).
func (a *Admitter) Submit(ctx context.Context, wl *v1alpha1.Workload) (*v1alpha1.Workload, bool, error) {
	if !a.leading.Load() {
		return nil, false, ErrNotLeader
	}
	return a.writer.Submit(ctx, wl)
}

// UpdateQueue moves a workload to another LocalQueue (see
// lifecycle.Writer.UpdateQueue).
func (a *Admitter) UpdateQueue(ctx context.Context, key types.NamespacedName, uid types.UID, queue string) (bool, error) {
	if !a.leading.Load() {
		return false, ErrNotLeader
	}
	return a.writer.UpdateQueue(ctx, key, uid, queue)
}

// CheckJoin says whether pod j may join its pod set of the workload key
// (see workload.CheckJoin); it writes nothing. A workload of another
// uid than the caller's is stale news: retry once the decisions catch up.
func (a *Admitter) CheckJoin(ctx context.Context, key types.NamespacedName, uid types.UID, j workload.Join) error {
	if !a.leading.Load() {
		return ErrNotLeader
	}
	wl, err := a.writer.StoredOrRead(ctx, key)
	if err != nil {
		return err
	}
	if uid != "" && wl.UID != uid {
		return fmt.Errorf("%w: workload %s is now uid %s, not %s", ErrStale, key, wl.UID, uid)
	}
	return workload.CheckJoin(wl, j)
}

// ReportProgress records what the grouper says of a workload's pods (see
// lifecycle.Writer.ReportProgress).
func (a *Admitter) ReportProgress(ctx context.Context, key types.NamespacedName, p lifecycle.Progress) error {
	if !a.leading.Load() {
		return ErrNotLeader
	}
	return a.writer.ReportProgress(ctx, key, p)
}

// NoPods acts on the grouper's word that a pod group has no pod left, and
// returns the end of the replacement window it keeps open (see
// lifecycle.Writer.NoPods).
func (a *Admitter) NoPods(ctx context.Context, key types.NamespacedName, uid types.UID) (time.Time, error) {
	if !a.leading.Load() {
		return time.Time{}, ErrNotLeader
	}
	return a.writer.NoPods(ctx, key, uid)
}
