// Package controller routes the grouper's work: pod events and the
// admitter's decisions wake pods, and each pod goes down the path of its
// kind, a single pod's (package single) or a pod group's (package
// groups); the workloads of stop decisions go to the stop checks (package
// stops), and those of admissions with a start-up deadline to the started
// counts (package started).
//
// Decisions are levels: every snapshot replaces what the grouper holds,
// and every pod converges to it, so a lost message costs latency only.
// Pods are read from the manager's cache only; a workload's pods from the
// roster, which the pod events fill, and which holds the cache's objects
// without copying them: they are only read. Decisions arrive through
// the Sink methods and wake the pods of their workload through the
// controller's work queue, which bounds the concurrency of API writes,
// retries failures with backoff, and serves first the pods whose handling
// moves quota: an ungate or eviction, or the end of a pod.
package controller

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	"github.com/sluice-dev/sluice/services/grouper/internal/act"
	"github.com/sluice-dev/sluice/services/grouper/internal/decisions"
	"github.com/sluice-dev/sluice/services/grouper/internal/groups"
	"github.com/sluice-dev/sluice/services/grouper/internal/keyqueue"
	"github.com/sluice-dev/sluice/services/grouper/internal/metrics"
	"github.com/sluice-dev/sluice/services/grouper/internal/podpatch"
	"github.com/sluice-dev/sluice/services/grouper/internal/podstate"
	"github.com/sluice-dev/sluice/services/grouper/internal/roster"
	"github.com/sluice-dev/sluice/services/grouper/internal/shard"
	"github.com/sluice-dev/sluice/services/grouper/internal/single"
	"github.com/sluice-dev/sluice/services/grouper/internal/started"
	"github.com/sluice-dev/sluice/services/grouper/internal/stops"
	"github.com/sluice-dev/sluice/services/grouper/internal/workload"
)

const (
	// defaultCallTimeout bounds each admitter call.
	defaultCallTimeout = 10 * time.Second
	// enqueueBuffer is the capacity of each channel into the work queue.
	enqueueBuffer = 1024
	// urgentPriority is the work queue priority of the pods whose handling
	// moves quota: those a decision concerns (an ungate, an eviction) and
	// those that ended or are being deleted (a finish frees quota). While a
	// burst of new pods waits to be submitted, quota reserved or freed must
	// not wait behind it doing no work.
	urgentPriority = 10
)

// Options configure a Reconciler.
type Options struct {
	// Client writes pods; its reads come from the manager's cache.
	Client client.Client
	// APIReader reads from the API server where the cache may lag.
	APIReader client.Reader
	// Admitter is the admitter's API.
	Admitter admitterv1.AdmitterServiceClient
	// Recorder emits events on pods.
	Recorder events.EventRecorder
	// Metrics are updated as pods move.
	Metrics *metrics.Metrics
	// Shard is the share of workloads this replica handles.
	Shard shard.Shard
	// Tracer starts the spans of submissions and ungates.
	Tracer trace.Tracer
	// Propagator reads the trace context from the pod's annotation.
	Propagator propagation.TextMapPropagator
	// CallTimeout bounds each admitter call; zero means 10s.
	CallTimeout time.Duration
	// Log is the base logger.
	Log logr.Logger
}

// Reconciler handles managed pods. It is also the stream.Sink of the
// decision stream.
type Reconciler struct {
	opts      Options
	roster    *roster.Roster
	decisions *decisions.Store
	pods      *podstate.Store
	// reports is what was reported of the decisions in force.
	reports *decisions.Reports
	single  *single.Path
	groups  *groups.Path
	stops   *stops.Checks
	// started counts the started pods of admissions with a start-up
	// deadline, a workload at a time.
	started *started.Counts
	// wake and urgent feed pods to the work queue, urgent ones first.
	wake, urgent chan event.TypedGenericEvent[*corev1.Pod]
	// groupGone wakes the empty-group check of a group that lost a pod.
	groupGone chan event.GenericEvent
	// rosterSynced reports whether the roster has every pod of the cache's
	// first list (see followPods).
	rosterSynced func() bool
	now          func() time.Time
}

// New returns a Reconciler; register it with SetupWithManager.
func New(opts Options) *Reconciler {
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = defaultCallTimeout
	}
	r := &Reconciler{
		opts:      opts,
		roster:    roster.New(),
		decisions: decisions.NewStore(),
		pods:      podstate.NewStore(),
		reports:   decisions.NewReports(),
		wake:      make(chan event.TypedGenericEvent[*corev1.Pod], enqueueBuffer),
		urgent:    make(chan event.TypedGenericEvent[*corev1.Pod], enqueueBuffer),
		groupGone: make(chan event.GenericEvent, enqueueBuffer),
		now:       time.Now,
	}
	ungates := decisions.NewUngates()
	evs := act.Events{Recorder: opts.Recorder}
	spans := act.Spans{Tracer: opts.Tracer, Propagator: opts.Propagator}
	admitter := act.Admitter{Client: opts.Admitter, Timeout: opts.CallTimeout, Metrics: opts.Metrics, Spans: spans}
	r.stops = stops.New(stops.Config{
		Decisions: r.decisions, Ungates: ungates, Reports: r.reports, PodStates: r.pods, Roster: r.roster,
		APIReader: opts.APIReader, Admitter: admitter, Wake: r.wakeUrgent, Shard: opts.Shard, Log: opts.Log,
	})
	r.started = started.New(started.Config{Decisions: r.decisions, Reports: r.reports, Roster: r.roster, Admitter: admitter, Log: opts.Log})
	ungater := &act.Ungater{
		Client: opts.Client, Spans: spans, Events: evs, Metrics: opts.Metrics,
		Decisions: r.decisions, InFlight: ungates, PodStates: r.pods, StopCheck: r.stops.Add, Now: r.now,
	}
	pods := act.Pods{Client: opts.Client, Events: evs, Metrics: opts.Metrics, Now: r.now, Log: opts.Log}
	misfits := act.Misfits{APIReader: opts.APIReader, Events: evs, Metrics: opts.Metrics, Log: opts.Log}
	r.single = &single.Path{
		Admitter: admitter, Ungater: ungater, Pods: pods, Misfits: misfits, Events: evs,
		NoteStarted: r.started.Note, Log: opts.Log,
	}
	r.groups = groups.New(groups.Config{
		Admitter: admitter, Ungater: ungater, Pods: pods, Misfits: misfits, Events: evs,
		Client: opts.Client, APIReader: opts.APIReader, Metrics: opts.Metrics, Roster: r.roster, Shard: opts.Shard,
		Wake: r.wakePod, NoteStarted: r.started.Note, Log: opts.Log, Now: r.now,
	})
	return r
}

// SetupWithManager registers the controller: pod events and decisions
// feed one queue served by workers goroutines, the pods whose handling
// moves quota ahead of the others (see urgentPriority).
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, workers int) error {
	if err := r.followPods(ctx, mgr.GetCache()); err != nil {
		return err
	}
	err := ctrl.NewControllerManagedBy(mgr).
		Named("pods").
		WatchesRawSource(source.Channel(r.wake, &handler.TypedEnqueueRequestForObject[*corev1.Pod]{})).
		WatchesRawSource(source.Channel(r.urgent, enqueueAt(urgentPriority))).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: workers,
			RateLimiter:             keyqueue.Backoff[reconcile.Request](),
		}).
		Complete(r)
	if err != nil {
		return fmt.Errorf("set up pod controller: %w", err)
	}
	if err := r.groups.SetupEmptyGroups(mgr, r.groupGone); err != nil {
		return err
	}
	if err := mgr.Add(manager.RunnableFunc(r.stops.Run)); err != nil {
		return fmt.Errorf("set up stop checks: %w", err)
	}
	if err := mgr.Add(manager.RunnableFunc(r.started.Run)); err != nil {
		return fmt.Errorf("set up started reports: %w", err)
	}
	return nil
}

// wakePod has pod reconciled.
func (r *Reconciler) wakePod(pod *corev1.Pod) {
	r.wake <- event.TypedGenericEvent[*corev1.Pod]{Object: pod}
}

// wakeUrgent has pod reconciled ahead of the pods woken by wakePod.
func (r *Reconciler) wakeUrgent(pod *corev1.Pod) {
	r.urgent <- event.TypedGenericEvent[*corev1.Pod]{Object: pod}
}

// enqueueAt queues the pods of generic events at priority: ahead of
// those of a lower one, in the order they came among their own.
func enqueueAt(priority int) handler.TypedEventHandler[*corev1.Pod, reconcile.Request] {
	return handler.TypedFuncs[*corev1.Pod, reconcile.Request]{
		GenericFunc: func(_ context.Context, e event.TypedGenericEvent[*corev1.Pod], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(e.Object)}
			if pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request]); ok {
				pq.AddWithOpts(priorityqueue.AddOpts{Priority: &priority}, req)
				return
			}
			q.Add(req)
		},
	}
}

// Snapshot implements stream.Sink: decisions become the only ones in
// force, and every pod converges to them: the pods they concern are woken,
// and so is every gated pod without a decision, to be submitted again
// (the admitter may have lost a submission, and a repeat is free).
func (r *Reconciler) Snapshot(ds []*admitterv1.Decision) {
	kept := make([]*admitterv1.Decision, 0, len(ds))
	for _, d := range ds {
		if d.GetAction() == admitterv1.Decision_ACTION_FORGET {
			continue
		}
		kept = append(kept, d)
	}
	r.decisions.Replace(kept, r.now())
	r.reports.Reset()
	r.pods.ResubmitAll()
	r.groups.ResubmitAll()
	r.opts.Log.V(1).Info("decision snapshot applied", "decisions", len(kept))
	for _, d := range kept {
		r.dispatch(d)
	}
	r.wakeUndecided()
}

// wakeUndecided wakes every gated pod whose workload has no decision.
func (r *Reconciler) wakeUndecided() {
	var undecided []*corev1.Pod
	r.roster.Each(func(key workload.Key, pod *corev1.Pod) {
		if !r.opts.Shard.Owns(key.Namespace, key.Name) || !podpatch.HasGate(pod) {
			return
		}
		if _, decided := r.decisions.Get(key); !decided {
			undecided = append(undecided, pod)
		}
	})
	for _, pod := range undecided {
		r.wakePod(pod)
	}
}

// Changes implements stream.Sink.
func (r *Reconciler) Changes(ds []*admitterv1.Decision) {
	now := r.now()
	for _, d := range ds {
		if d.GetAction() == admitterv1.Decision_ACTION_FORGET {
			key := decisions.KeyOf(d)
			r.decisions.Forget(key)
			r.reports.Forget(key)
			r.groups.Forget(key)
			r.groups.WakeGated(key)
			continue
		}
		r.decisions.Put(d, now)
		r.dispatch(d)
	}
}

// dispatch wakes the pods d concerns. Pods an admission finds ungated
// already are counted and left alone, so a repeated decision costs no
// work. Pods not in the cache yet are woken by their own creation event
// and find the decision then.
func (r *Reconciler) dispatch(d *admitterv1.Decision) {
	key := decisions.KeyOf(d)
	if !r.opts.Shard.Owns(key.Namespace, key.Name) {
		return
	}
	if decisions.Stopping(d) {
		r.stops.Add(key)
	}
	if decisions.HasDeadline(d) {
		// Pods running already may be all the counts wait for.
		r.started.Add(key)
	}
	for _, pod := range r.roster.Pods(key) {
		if d.GetAction() == admitterv1.Decision_ACTION_ADMIT && r.pods.AlreadyUngated(pod) {
			r.opts.Metrics.AlreadyUngated.Inc()
			continue
		}
		r.wakeUrgent(pod)
	}
}

// Reconcile brings one pod forward down the path of its kind, a pod
// group's or a single pod's, under its workload's decision in force.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var pod corev1.Pod
	if err := r.opts.Client.Get(ctx, req.NamespacedName, &pod); err != nil {
		if apierrors.IsNotFound(err) {
			if key, ok := r.pods.Forget(req.NamespacedName); ok {
				r.stops.Add(key) // the workload may have no running pod left
			}
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("get pod %s from cache: %w", req.NamespacedName, err)
	}
	key, ok := workload.KeyFor(&pod)
	if !ok || !r.opts.Shard.Owns(key.Namespace, key.Name) {
		return reconcile.Result{}, nil
	}
	st := r.pods.Load(req.NamespacedName, pod.UID)
	st.Workload = key
	defer func() { r.pods.Store(req.NamespacedName, st) }()
	entry, decided := r.decisions.Get(key)
	if decided && decisions.Stopping(entry.Decision) {
		// Whatever happens to this pod may be the last stop the workload
		// waits for.
		defer r.stops.Add(key)
	}
	if workload.IsGroupMember(&pod) {
		return r.groups.Reconcile(ctx, &pod, key, entry, decided, &st)
	}
	return r.single.Reconcile(ctx, &pod, key, entry, decided, &st)
}
