// Package controller is the grouper's pod lifecycle: it submits the
// workloads of gated pods to the admitter (and moves them when their pods
// change queue), applies the admitter's decisions to the pods (one ungate
// patch per admitted pod; deletion of running pods on eviction and of
// every pod of a deleted Workload), reports stopped and finished pods, and
// releases them from sluice's finalizer.
//
// Decisions are levels: every snapshot replaces what the grouper holds,
// and every pod converges to it, so a lost message costs latency only.
// Pods are read from the manager's cache only; a workload's pods from the
// roster, which the pod events fill, and which holds the cache's objects
// without copying them: they are only read. Decisions arrive through
// the Sink methods and wake the pods of their workload through the
// controller's work queue, which bounds the concurrency of API writes and
// retries failures with backoff.
package controller

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	sluicev1 "github.com/sluice-dev/sluice/gen/sluice/v1"
	"github.com/sluice-dev/sluice/pkg/crashpoint"
	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/services/grouper/internal/metrics"
	"github.com/sluice-dev/sluice/services/grouper/internal/podpatch"
	"github.com/sluice-dev/sluice/services/grouper/internal/roster"
	"github.com/sluice-dev/sluice/services/grouper/internal/shard"
	"github.com/sluice-dev/sluice/services/grouper/internal/workload"
)

// Event reasons and actions on pods.
const (
	ReasonUngateFailed     = "UngateFailed"
	ReasonAdmissionInvalid = "AdmissionConflict"
	ReasonSubmitFailed     = "SubmitFailed"
	ReasonStopped          = "Stopped"
	ReasonEvictFailed      = "EvictFailed"

	actionUngate = "Ungate"
	actionSubmit = "Submit"
	actionEvict  = "Evict"
	actionDelete = "Delete"

	// disruptionReason is the DisruptionTarget condition's reason on pods
	// deleted for an eviction.
	disruptionReason = "EvictedBySluice"
)

const (
	// defaultCallTimeout bounds each admitter call.
	defaultCallTimeout = 10 * time.Second
	// retryMin and retryMax bound the per-pod backoff after a failure.
	// The maximum stays short: an admitted pod must not wait long for
	// its retry.
	retryMin = 100 * time.Millisecond
	retryMax = 30 * time.Second
	// recheckAfter is when a pod stuck on a problem it cannot fix itself
	// (an admission it cannot apply, a refused submission) is looked at
	// again; changes of the pod or its decision wake it earlier.
	recheckAfter = 5 * time.Minute
	// enqueueBuffer is the capacity of the decision-to-queue channel.
	enqueueBuffer = 1024
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
	views     *groupViews
	decisions *decisionStore
	pods      *podStates
	groups    *groupStates
	gangs     *gangs
	stops     *stopReports
	ungates   *ungatesInFlight
	started   *startedReports
	stopQ     workqueue.TypedRateLimitingInterface[workload.Key]
	// startedQ counts the started pods of admissions with a start-up
	// deadline, a workload at a time (see noteStarted).
	startedQ workqueue.TypedRateLimitingInterface[workload.Key]
	wake     chan event.TypedGenericEvent[*corev1.Pod]
	// groupGone wakes the empty-group check of a group that lost a pod.
	groupGone chan event.GenericEvent
	now       func() time.Time
}

// New returns a Reconciler; register it with SetupWithManager.
func New(opts Options) *Reconciler {
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = defaultCallTimeout
	}
	return &Reconciler{
		opts:      opts,
		roster:    roster.New(),
		views:     newGroupViews(),
		decisions: newDecisionStore(),
		pods:      newPodStates(),
		groups:    newGroupStates(),
		gangs:     newGangs(),
		stops:     newStopReports(),
		ungates:   newUngatesInFlight(),
		started:   newStartedReports(),
		stopQ: workqueue.NewTypedRateLimitingQueue(
			workqueue.NewTypedItemExponentialFailureRateLimiter[workload.Key](retryMin, retryMax)),
		startedQ: workqueue.NewTypedRateLimitingQueue(
			workqueue.NewTypedItemExponentialFailureRateLimiter[workload.Key](retryMin, retryMax)),
		wake:      make(chan event.TypedGenericEvent[*corev1.Pod], enqueueBuffer),
		groupGone: make(chan event.GenericEvent, enqueueBuffer),
		now:       time.Now,
	}
}

// SetupWithManager registers the controller: pod events and decisions
// feed one queue served by workers goroutines.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, workers int) error {
	err := ctrl.NewControllerManagedBy(mgr).
		Named("pods").
		Watches(&corev1.Pod{}, r.podEvents()).
		WatchesRawSource(source.Channel(r.wake, &handler.TypedEnqueueRequestForObject[*corev1.Pod]{})).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: workers,
			RateLimiter:             workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](retryMin, retryMax),
		}).
		Complete(r)
	if err != nil {
		return fmt.Errorf("set up pod controller: %w", err)
	}
	if err := r.setupEmptyGroups(mgr); err != nil {
		return err
	}
	if err := mgr.Add(manager.RunnableFunc(r.runStopChecks)); err != nil {
		return fmt.Errorf("set up stop checks: %w", err)
	}
	if err := mgr.Add(manager.RunnableFunc(r.runStartedReports)); err != nil {
		return fmt.Errorf("set up started reports: %w", err)
	}
	return nil
}

// Snapshot implements stream.Sink: decisions become the only ones in
// force, and every pod converges to them: the pods they concern are woken,
// and so is every gated pod without a decision, to be submitted again
// (the admitter may have lost a submission, and a repeat is free).
func (r *Reconciler) Snapshot(decisions []*admitterv1.Decision) {
	kept := make([]*admitterv1.Decision, 0, len(decisions))
	for _, d := range decisions {
		if d.GetAction() == admitterv1.Decision_ACTION_FORGET {
			continue
		}
		kept = append(kept, d)
	}
	r.decisions.replace(kept, r.now())
	r.stops.reset()
	r.started.reset()
	r.pods.resubmitAll()
	r.groups.resubmitAll()
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
		if _, decided := r.decisions.get(key); !decided {
			undecided = append(undecided, pod)
		}
	})
	for _, pod := range undecided {
		r.wake <- event.TypedGenericEvent[*corev1.Pod]{Object: pod}
	}
}

// Changes implements stream.Sink.
func (r *Reconciler) Changes(decisions []*admitterv1.Decision) {
	now := r.now()
	for _, d := range decisions {
		if d.GetAction() == admitterv1.Decision_ACTION_FORGET {
			r.decisions.forget(keyOf(d))
			r.stops.forget(keyOf(d))
			r.started.forget(keyOf(d))
			r.groups.forget(keyOf(d))
			r.views.forget(keyOf(d))
			r.gangs.forget(keyOf(d))
			r.wakeGated(keyOf(d))
			continue
		}
		r.decisions.put(d, now)
		r.dispatch(d)
	}
}

// dispatch wakes the pods d concerns. Pods an admission finds ungated
// already are counted and left alone, so a repeated decision costs no
// work. Pods not in the cache yet are woken by their own creation event
// and find the decision then.
func (r *Reconciler) dispatch(d *admitterv1.Decision) {
	key := keyOf(d)
	if !r.opts.Shard.Owns(key.Namespace, key.Name) {
		return
	}
	if stopping(d) {
		r.stopQ.Add(key)
	}
	if hasDeadline(d) {
		// Pods running already may be all the counts wait for.
		r.startedQ.Add(key)
	}
	for _, pod := range r.roster.Pods(key) {
		if d.GetAction() == admitterv1.Decision_ACTION_ADMIT && r.alreadyUngated(pod) {
			r.opts.Metrics.AlreadyUngated.Inc()
			continue
		}
		r.wake <- event.TypedGenericEvent[*corev1.Pod]{Object: pod}
	}
}

func (r *Reconciler) alreadyUngated(pod *corev1.Pod) bool {
	if !podpatch.HasGate(pod) {
		return true
	}
	return r.pods.load(client.ObjectKeyFromObject(pod), pod.UID).ungated
}

// Reconcile brings one pod forward: report and release it when it ended,
// apply its workload's decision, or submit its workload.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var pod corev1.Pod
	if err := r.opts.Client.Get(ctx, req.NamespacedName, &pod); err != nil {
		if apierrors.IsNotFound(err) {
			if key, ok := r.pods.forget(req.NamespacedName); ok {
				r.stopQ.Add(key) // the workload may have no running pod left
			}
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("get pod %s from cache: %w", req.NamespacedName, err)
	}
	key, ok := workload.KeyFor(&pod)
	if !ok || !r.opts.Shard.Owns(key.Namespace, key.Name) {
		return reconcile.Result{}, nil
	}
	st := r.pods.load(req.NamespacedName, pod.UID)
	st.workload = key
	defer func() { r.pods.store(req.NamespacedName, st) }()
	if workload.IsGroupMember(&pod) {
		return r.groupMember(ctx, &pod, key, &st)
	}
	entry, hasDecision := r.decisions.get(key)
	action := entry.decision.GetAction()
	if hasDecision && stopping(entry.decision) {
		// Whatever happens to this pod may be the last stop the workload
		// waits for.
		defer r.stopQ.Add(key)
	}

	switch {
	case pod.Status.Phase == corev1.PodSucceeded:
		return r.finish(ctx, &pod, key, &st, &admitterv1.Finish{Succeeded: true, Message: "pod succeeded"})
	case pod.Status.Phase == corev1.PodFailed:
		return r.finish(ctx, &pod, key, &st, &admitterv1.Finish{Succeeded: false, Message: failureMessage(&pod)})
	case pod.DeletionTimestamp != nil:
		return r.deleted(ctx, &pod, key, &st)
	}

	loss := gateLossOf(&pod, st.ungated)
	switch {
	case hasDecision && action == admitterv1.Decision_ACTION_DELETE:
		return r.remove(ctx, &pod, entry.decision, &st)
	case hasDecision && action == admitterv1.Decision_ACTION_EVICT:
		return r.evict(ctx, &pod, entry.decision, &st)
	case loss == gateRemoved:
		// Even under an admission: the pod runs without the node
		// selector and tolerations the admission sets.
		return r.stopUngated(ctx, &pod, &st)
	case loss == gateReleased:
		r.countReleased(&pod, &st)
		return r.noteStarted(key, entry)
	case !podpatch.HasGate(&pod) || st.ungated:
		return r.noteStarted(key, entry)
	case hasDecision && action == admitterv1.Decision_ACTION_ADMIT:
		return r.ungate(ctx, &pod, key, entry, &st)
	default:
		return r.submit(ctx, &pod, &st)
	}
}

// submit sends the pod's workload to the admitter, once per queue: when
// the pod moves to another LocalQueue while gated, the workload moves
// with it.
func (r *Reconciler) submit(ctx context.Context, pod *corev1.Pod, st *podState) (reconcile.Result, error) {
	if st.submitted && st.queue == pod.Labels[podkeys.QueueNameLabel] {
		return reconcile.Result{}, nil
	}
	wl, err := workload.ForSinglePod(pod)
	if err != nil {
		if !st.warned {
			r.warn(pod, ReasonSubmitFailed, actionSubmit, "not queued: %v", err)
			st.warned = true
		}
		return reconcile.Result{}, nil
	}
	log := r.opts.Log.WithValues("pod", client.ObjectKeyFromObject(pod), "workload", wl.GetRef().GetName())
	ctx, span := r.startSpan(ctx, pod, "grouper.SubmitWorkload", wl.GetRef())
	defer span.End()

	cctx, cancel := context.WithTimeout(ctx, r.opts.CallTimeout)
	defer cancel()
	resp, err := r.opts.Admitter.SubmitWorkload(cctx, &admitterv1.SubmitWorkloadRequest{Workload: wl})
	switch {
	case err == nil:
		result := metrics.ResultExisting
		if resp.GetCreated() {
			result = metrics.ResultCreated
		}
		r.opts.Metrics.Submissions.WithLabelValues(result).Inc()
	case status.Code(err) == grpccodes.AlreadyExists:
		r.opts.Metrics.Submissions.WithLabelValues(metrics.ResultExisting).Inc()
	default:
		r.opts.Metrics.Submissions.WithLabelValues(metrics.ResultError).Inc()
		recordError(span, err)
		if permanent(err) {
			r.warn(pod, ReasonSubmitFailed, actionSubmit, "the admitter refused the workload %s: %s",
				wl.GetRef().GetName(), status.Convert(err).Message())
			return reconcile.Result{RequeueAfter: recheckAfter}, nil
		}
		return reconcile.Result{}, fmt.Errorf("submit workload %s: %w", wl.GetRef().GetName(), err)
	}
	crashpoint.Hit("grouper/submit")
	if existing := resp.GetQueueName(); existing != "" && existing != wl.GetQueueName() {
		if err := r.moveQueue(ctx, wl); err != nil {
			return reconcile.Result{}, err
		}
	}
	st.submitted, st.queue = true, wl.GetQueueName()
	log.V(1).Info("workload submitted", "created", resp.GetCreated())
	return reconcile.Result{}, nil
}

// moveQueue tells the admitter the workload's pods now name another
// LocalQueue.
func (r *Reconciler) moveQueue(ctx context.Context, wl *sluicev1.Workload) error {
	cctx, cancel := context.WithTimeout(ctx, r.opts.CallTimeout)
	defer cancel()
	_, err := r.opts.Admitter.UpdateWorkload(cctx, &admitterv1.UpdateWorkloadRequest{Workload: wl.GetRef(), QueueName: wl.GetQueueName()})
	if err != nil {
		return fmt.Errorf("move workload %s to LocalQueue %s: %w", wl.GetRef().GetName(), wl.GetQueueName(), err)
	}
	return nil
}

// ungate applies an admission to a gated pod with one patch, if the pod
// still fits its pod set.
func (r *Reconciler) ungate(ctx context.Context, pod *corev1.Pod, key workload.Key, entry decisionEntry, st *podState) (reconcile.Result, error) {
	d := entry.decision
	if fits, res, err := r.singlePodFits(ctx, pod, key, d, st); !fits {
		return res, err
	}
	info, err := podSetInfoFor(d, workload.SinglePodSetName)
	if err == nil {
		var patch []byte
		patch, err = podpatch.Ungate(pod, info, &sluicev1.WorkloadRef{Namespace: key.Namespace, Name: key.Name, Uid: d.GetWorkload().GetUid()}, d.GetReservationId())
		if err == nil {
			return r.sendUngate(ctx, pod, key, entry, st, patch)
		}
	}
	// The admission cannot be applied as it is; only a new decision (or
	// a changed pod) can help.
	r.opts.Metrics.UngateErrors.Inc()
	r.warn(pod, ReasonAdmissionInvalid, actionUngate, "admission of workload %s cannot be applied: %v", key.Name, err)
	return reconcile.Result{RequeueAfter: recheckAfter}, nil
}

func (r *Reconciler) sendUngate(ctx context.Context, pod *corev1.Pod, key workload.Key, entry decisionEntry, st *podState, patch []byte) (reconcile.Result, error) {
	// The decision may have changed while the patch was built (a group
	// asks the admitter and the API server first): only the admission in
	// force may ungate, and the workload's stop check waits for the answer.
	if !r.ungates.begin(key, entry.decision, r.decisions) {
		r.opts.Metrics.UngatesSuperseded.Inc()
		return reconcile.Result{}, nil // the newer decision woke the pod
	}
	defer r.endUngate(key)
	ctx, span := r.startSpan(ctx, pod, "grouper.Ungate", &sluicev1.WorkloadRef{Namespace: key.Namespace, Name: key.Name})
	defer span.End()
	target := &corev1.Pod{}
	target.Namespace, target.Name = pod.Namespace, pod.Name
	err := r.opts.Client.Patch(ctx, target, client.RawPatch(types.JSONPatchType, patch))
	switch {
	case apierrors.IsNotFound(err):
		return reconcile.Result{}, nil
	case apierrors.IsInvalid(err):
		// A test of the patch failed: the pod changed since the cache saw
		// it. The retry builds the patch from the newer pod.
		recordError(span, err)
		return reconcile.Result{}, fmt.Errorf("ungate pod %s/%s, changed since it was read: %w", pod.Namespace, pod.Name, err)
	case err != nil:
		r.opts.Metrics.UngateErrors.Inc()
		recordError(span, err)
		r.warn(pod, ReasonUngateFailed, actionUngate, "ungate patch failed, retrying: %v", err)
		return reconcile.Result{}, fmt.Errorf("ungate pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	crashpoint.Hit("grouper/ungate")
	st.ungated = true
	// Known before the ungate counts as answered: a stop check must not
	// take the pod, gated in a cache that lags, for one that cannot run.
	r.pods.store(client.ObjectKeyFromObject(pod), *st)
	r.opts.Metrics.PodsUngated.Inc()
	r.opts.Metrics.DecisionToUngate.Observe(r.now().Sub(entry.received).Seconds())
	if at := entry.decision.GetAdmittedAt(); at != nil {
		r.opts.Metrics.AdmissionToUngate.WithLabelValues(entry.decision.GetClusterQueue()).
			Observe(max(r.now().Sub(at.AsTime()), 0).Seconds())
	}
	// No Event on success: one per pod would be a write per pod on the hot
	// path. The Workload's Admitted condition and the pod's podset label
	// say the same, and the metrics count it.
	return reconcile.Result{}, nil
}

// endUngate takes back an ungate in flight; a stop check it held up
// looks again.
func (r *Reconciler) endUngate(key workload.Key) {
	r.ungates.end(key)
	if e, ok := r.decisions.get(key); ok && stopping(e.decision) {
		r.stopQ.Add(key)
	}
}

// podSetInfoFor returns the info of pod set name in d; an admission that
// lacks it is applied with no changes beyond the gate.
func podSetInfoFor(d *admitterv1.Decision, name string) (*sluicev1.PodSetInfo, error) {
	infos := d.GetPodSetInfos()
	for _, info := range infos {
		if info.GetName() == name {
			return info, nil
		}
	}
	if len(infos) == 0 {
		return &sluicev1.PodSetInfo{Name: name}, nil
	}
	return nil, fmt.Errorf("pod_set_infos has no entry for pod set %q", name)
}

// evict deletes a running pod of an evicted workload, marking why first.
func (r *Reconciler) evict(ctx context.Context, pod *corev1.Pod, d *admitterv1.Decision, st *podState) (reconcile.Result, error) {
	if st.evicted || (podpatch.HasGate(pod) && !st.ungated) {
		// A gated pod holds nothing: it stays queued for the next
		// admission. One this grouper ungated is running, whatever the
		// cache shows yet.
		return reconcile.Result{}, nil
	}
	msg := d.GetMessage()
	if msg == "" {
		msg = "workload evicted"
	}
	return r.stopPod(ctx, pod, r.decidedStop(actionEvict, msg), st)
}

// remove deletes a pod of a deleted Workload, gated or not: the workload
// will never be submitted again.
func (r *Reconciler) remove(ctx context.Context, pod *corev1.Pod, d *admitterv1.Decision, st *podState) (reconcile.Result, error) {
	if st.evicted {
		return reconcile.Result{}, nil
	}
	msg := d.GetMessage()
	if msg == "" {
		msg = "the Workload was deleted"
	}
	return r.stopPod(ctx, pod, r.decidedStop(actionDelete, msg), st)
}

// stopCause is why sluice stops a pod: the message of the pod's
// DisruptionTarget condition, the one event that tells the stop, and the
// counter of such stops.
type stopCause struct {
	action    string
	message   string
	eventType string
	reason    string
	note      string
	counter   prometheus.Counter
}

// decidedStop is the cause of a stop the admitter decided (an eviction, a
// deleted Workload): a Normal Stopped event, counted as an eviction.
func (r *Reconciler) decidedStop(action, msg string) stopCause {
	return stopCause{
		action:    action,
		message:   msg,
		eventType: corev1.EventTypeNormal,
		reason:    ReasonStopped,
		note:      "Stopped: " + msg,
		counter:   r.opts.Metrics.PodsEvicted,
	}
}

// stopPod deletes pod with one event. A pod that may run gets the
// DisruptionTarget condition first, so its owner (and anyone reading it)
// can tell a stop by sluice from a failure.
func (r *Reconciler) stopPod(ctx context.Context, pod *corev1.Pod, cause stopCause, st *podState) (reconcile.Result, error) {
	target := &corev1.Pod{}
	target.Namespace, target.Name = pod.Namespace, pod.Name
	if (!podpatch.HasGate(pod) || st.ungated) && !disrupted(pod) {
		cond, err := podpatch.DisruptionTarget(disruptionReason, cause.message, r.now())
		if err != nil {
			return reconcile.Result{}, err
		}
		if err := r.opts.Client.Status().Patch(ctx, target, client.RawPatch(types.StrategicMergePatchType, cond)); err != nil {
			if apierrors.IsNotFound(err) {
				return reconcile.Result{}, nil
			}
			r.warn(pod, ReasonEvictFailed, cause.action, "marking the pod for eviction failed, retrying: %v", err)
			return reconcile.Result{}, fmt.Errorf("mark pod %s/%s disrupted: %w", pod.Namespace, pod.Name, err)
		}
		crashpoint.Hit("grouper/disrupt")
	}
	uid := pod.UID
	if err := r.opts.Client.Delete(ctx, target, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
		r.warn(pod, ReasonEvictFailed, cause.action, "deleting the pod failed, retrying: %v", err)
		return reconcile.Result{}, fmt.Errorf("delete pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	crashpoint.Hit("grouper/delete")
	st.evicted = true
	cause.counter.Inc()
	r.opts.Recorder.Eventf(pod, nil, cause.eventType, cause.reason, cause.action, "%s", cause.note)
	return reconcile.Result{}, nil
}

// disrupted reports whether sluice already marked the pod for deletion.
func disrupted(pod *corev1.Pod) bool {
	return disruption(pod) != nil
}

func disruption(pod *corev1.Pod) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		c := &pod.Status.Conditions[i]
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue && c.Reason == disruptionReason {
			return c
		}
	}
	return nil
}

// deleted handles a pod being deleted before it ended. A pod that never
// reached a node will never run: its workload ends and its finalizer goes.
// A pod on a node waits for the kubelet to record how it ended.
func (r *Reconciler) deleted(ctx context.Context, pod *corev1.Pod, key workload.Key, st *podState) (reconcile.Result, error) {
	switch {
	case podpatch.HasGate(pod):
		return r.finish(ctx, pod, key, st, &admitterv1.Finish{Message: "pod deleted before it was admitted"})
	case pod.Spec.NodeName == "":
		return r.finish(ctx, pod, key, st, &admitterv1.Finish{Message: "pod deleted before it was scheduled"})
	default:
		return reconcile.Result{}, nil
	}
}

// finish reports the end of the pod's workload, and once the admitter has
// it, removes sluice's finalizer.
func (r *Reconciler) finish(ctx context.Context, pod *corev1.Pod, key workload.Key, st *podState, fin *admitterv1.Finish) (reconcile.Result, error) {
	if !podpatch.HasFinalizer(pod) {
		return reconcile.Result{}, nil
	}
	// A pod without a queue name was never submitted: nothing to report.
	if !st.reported && pod.Labels[podkeys.QueueNameLabel] != "" {
		if err := r.report(ctx, pod, key, fin); err != nil {
			return reconcile.Result{}, err
		}
		crashpoint.Hit("grouper/report-finish")
		st.reported = true
	}
	return reconcile.Result{}, r.removeFinalizer(ctx, pod)
}

// removeFinalizer removes sluice's finalizer from pod with a guarded JSON
// patch.
func (r *Reconciler) removeFinalizer(ctx context.Context, pod *corev1.Pod) error {
	patch, found, err := podpatch.RemoveFinalizer(pod)
	if err != nil || !found {
		return err
	}
	target := &corev1.Pod{}
	target.Namespace, target.Name = pod.Namespace, pod.Name
	if err := r.opts.Client.Patch(ctx, target, client.RawPatch(types.JSONPatchType, patch)); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		// A failed test means the pod changed since the cache saw it;
		// the retry reads the newer pod.
		return fmt.Errorf("remove finalizer of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	crashpoint.Hit("grouper/remove-finalizer")
	r.opts.Metrics.FinalizersRemoved.Inc()
	return nil
}

// report tells the admitter the workload ended. A workload the admitter
// does not know (never created, or already gone) needs no report.
func (r *Reconciler) report(ctx context.Context, pod *corev1.Pod, key workload.Key, fin *admitterv1.Finish) error {
	ref := &sluicev1.WorkloadRef{Namespace: key.Namespace, Name: key.Name}
	ctx, span := r.startSpan(ctx, pod, "grouper.ReportProgress", ref)
	defer span.End()
	cctx, cancel := context.WithTimeout(ctx, r.opts.CallTimeout)
	defer cancel()
	_, err := r.opts.Admitter.ReportProgress(cctx, &admitterv1.ReportProgressRequest{Workload: ref, Finish: fin})
	if err != nil && status.Code(err) != grpccodes.NotFound {
		r.opts.Metrics.Reports.WithLabelValues(metrics.ResultError).Inc()
		recordError(span, err)
		return fmt.Errorf("report finish of workload %s: %w", key, err)
	}
	r.opts.Metrics.Reports.WithLabelValues(metrics.ResultOK).Inc()
	return nil
}

// startSpan continues the pod's trace (its sluice.dev/traceparent
// annotation) with a span for one step; the gRPC client carries it on.
func (r *Reconciler) startSpan(ctx context.Context, pod *corev1.Pod, name string, ref *sluicev1.WorkloadRef) (context.Context, trace.Span) {
	if tp := pod.Annotations[podkeys.TraceparentAnnotation]; tp != "" && r.opts.Propagator != nil {
		ctx = r.opts.Propagator.Extract(ctx, propagation.MapCarrier{"traceparent": tp})
	}
	return r.opts.Tracer.Start(ctx, name, trace.WithAttributes(
		attribute.String("k8s.namespace.name", pod.Namespace),
		attribute.String("k8s.pod.name", pod.Name),
		attribute.String("sluice.workload", ref.GetName()),
	))
}

func (r *Reconciler) warn(pod *corev1.Pod, reason, action, format string, args ...any) {
	r.opts.Recorder.Eventf(pod, nil, corev1.EventTypeWarning, reason, action, format, args...)
}

func recordError(span trace.Span, err error) {
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}

// permanent reports whether an admitter error will not go away by
// retrying the same request.
func permanent(err error) bool {
	switch status.Code(err) {
	case grpccodes.InvalidArgument, grpccodes.FailedPrecondition, grpccodes.PermissionDenied,
		grpccodes.Unimplemented, grpccodes.OutOfRange:
		return true
	}
	return false
}

// failureMessage says why a Failed pod failed; for a pod sluice stopped,
// why it was stopped.
func failureMessage(pod *corev1.Pod) string {
	if c := disruption(pod); c != nil {
		return "pod stopped by sluice: " + c.Message
	}
	msg := "pod failed"
	if pod.Status.Reason != "" {
		msg += ": " + pod.Status.Reason
	}
	if pod.Status.Message != "" {
		msg += ": " + pod.Status.Message
	}
	return msg
}
