// Package checkphase drives the admission-check phase of workloads that
// hold quota: it asks each due check's provider (outside the workload's
// lock, so progress reports never wait for a slow provider), records the
// answers in at most one status write, and acts on them through the
// lifecycle Writer — admit when every check is Ready and their updates
// merge, evict on Retry, reject on Rejected, give the reservation up when
// the updates conflict. When to ask a check again lives in memory: after a
// restart every check is asked again at once, with the same evaluation key.
//
// A check whose provider says its answer changed (WatchChanges) is asked
// again at once (Recheck), even for an admitted workload: one that no
// longer answers Ready evicts it (see revisit).
package checkphase

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/pkg/podset"
	"github.com/sluice-dev/sluice/services/admitter/internal/checks"
	"github.com/sluice-dev/sluice/services/admitter/internal/lifecycle"
	"github.com/sluice-dev/sluice/services/admitter/internal/metrics"
	"github.com/sluice-dev/sluice/services/admitter/internal/shrink"
	"github.com/sluice-dev/sluice/services/admitter/internal/store"
	"github.com/sluice-dev/sluice/services/admitter/internal/workload"
)

// DefaultWorkers is how many workloads' checks are evaluated at once.
const DefaultWorkers = 16

// Config is what an Orchestrator needs.
type Config struct {
	Store    *store.Store
	Locks    *store.Locks
	Writer   *lifecycle.Writer
	Checks   *checks.Pool
	Metrics  *metrics.Metrics
	Recorder events.EventRecorder
	// Catalog returns the ResourceFlavors and AdmissionChecks by name.
	Catalog func() (map[string]*v1alpha1.ResourceFlavor, map[string]*v1alpha1.AdmissionCheck)
	// Workers is how many workloads' checks are evaluated at once.
	Workers int
}

// Orchestrator runs the check phase.
type Orchestrator struct {
	cfg      Config
	q        workqueue.TypedDelayingInterface[types.NamespacedName]
	progress *progressTracker
	rechecks *rechecks
}

// New returns an Orchestrator that asks nothing until Run.
func New(cfg Config) *Orchestrator {
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	return &Orchestrator{cfg: cfg, q: workqueue.NewTypedDelayingQueue[types.NamespacedName](), progress: newProgressTracker(), rechecks: newRechecks()}
}

// Needed reports whether the check phase has something to do for wl:
// checks to ask, or an inactive workload still holding quota.
func Needed(wl *v1alpha1.Workload) bool {
	return workload.InCheckPhase(wl) ||
		(wl.Status.Admission != nil && !workload.IsActive(wl) && !workload.IsFinished(wl) && !workload.IsEvicting(wl) && !workload.IsDeleting(wl))
}

// Enqueue asks for a look at the workload's checks.
func (o *Orchestrator) Enqueue(key types.NamespacedName) { o.q.Add(key) }

// Recheck asks the named checks of the workload again now, whatever their
// state and whether or not the workload is admitted: their provider said
// the answer may have changed. A check the workload does not have is
// ignored. It survives Forget: the recheck must not be lost to the
// admission of an answer given before the change.
func (o *Orchestrator) Recheck(key types.NamespacedName, names ...string) {
	o.rechecks.add(key, names)
	o.q.Add(key)
}

// Forget drops what is remembered of the workload's checks.
func (o *Orchestrator) Forget(key types.NamespacedName) { o.progress.forget(key) }

// Run evaluates checks until ctx ends.
func (o *Orchestrator) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for range o.cfg.Workers {
		wg.Go(func() { o.work(ctx) })
	}
	<-ctx.Done()
	o.q.ShutDown()
	wg.Wait()
}

// Limits of AdmissionCheckState fields in the API.
const (
	maxCheckReason  = 256
	maxCheckMessage = 32768
)

// progressTracker remembers, per workload reservation, when each check is
// to be asked next and how many times in a row it gave no final answer.
// It lives in memory only: after a restart every check is asked again at
// once, with the same evaluation key.
type progressTracker struct {
	mu sync.Mutex
	m  map[types.NamespacedName]*progress
}

type progress struct {
	reservation string
	due         map[string]time.Time
	attempts    map[string]int
}

func newProgressTracker() *progressTracker {
	return &progressTracker{m: map[types.NamespacedName]*progress{}}
}

func (t *progressTracker) get(key types.NamespacedName, reservation string) *progress {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.m[key]
	if p == nil || p.reservation != reservation {
		p = &progress{reservation: reservation, due: map[string]time.Time{}, attempts: map[string]int{}}
		t.m[key] = p
	}
	return p
}

func (t *progressTracker) forget(key types.NamespacedName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	shrink.Delete(&t.m, key)
}

func (o *Orchestrator) work(ctx context.Context) {
	for {
		key, shutdown := o.q.Get()
		if shutdown {
			return
		}
		after := o.process(ctx, key)
		o.q.Done(key)
		if after > 0 && ctx.Err() == nil {
			o.q.AddAfter(key, after)
		}
	}
}

// processChecks asks the checks that are due for the workload's current
// reservation, records their answers in at most one status write, and acts
// on them: admit when all are Ready, evict on Retry, deactivate on
// Rejected, give the reservation up when the updates conflict. The
// providers are called without holding the workload's lock, so progress
// reports never wait for a slow provider; answers for a reservation that
// is gone by then are dropped. It returns when to look again (0: not
// needed).
func (o *Orchestrator) process(ctx context.Context, key types.NamespacedName) time.Duration {
	orig, due, w, after := o.dueChecks(ctx, key)
	if orig == nil {
		return after
	}
	answers := o.ask(ctx, orig, due, w)

	unlock := o.cfg.Locks.Lock(key)
	defer unlock()
	cur := o.cfg.Store.Get(key)
	if cur == nil || cur.UID != orig.UID || workload.ReservationID(cur) != workload.ReservationID(orig) || !workload.IsActive(cur) {
		// The reservation moved on while the providers answered; whatever
		// changed it queued another look.
		return 0
	}
	if workload.IsAdmitted(orig) {
		if !workload.IsAdmitted(cur) || workload.IsEvicting(cur) || workload.IsDeleting(cur) {
			return 0 // evicted or deleted meanwhile: nothing left to revoke
		}
		return o.revisit(ctx, cur, due, answers, w)
	}
	if !workload.InCheckPhase(cur) {
		return 0
	}
	prog := o.progress.get(key, workload.ReservationID(cur))
	now := time.Now()
	wl := cur.DeepCopy()
	var retryAfter time.Duration
	var rejected, retried []string
	for _, name := range due {
		ans := answers[name]
		st := workload.CheckState(wl, name)
		if st == nil {
			continue
		}
		retryCount := int(ptr.Deref(st.RetryCount, 0))
		applyAnswer(st, ans, metav1.NewTime(now))
		ac := w.checks[name]
		switch ans.State {
		case v1alpha1.CheckStateRejected:
			rejected = append(rejected, name)
		case v1alpha1.CheckStateRetry:
			retried = append(retried, name)
			wait := ans.RetryAfter
			if wait <= 0 {
				// No word from the provider: back off by the check's
				// retry settings, so a provider answering Retry at once
				// does not spin the workload through reserve and release.
				wait = checks.Backoff(orEmpty(ac), retryCount)
			}
			retryAfter = max(retryAfter, wait)
		case v1alpha1.CheckStatePending:
			prog.due[name] = now.Add(nextAsk(ac, ans, prog.attempts[name]))
			prog.attempts[name]++
		default:
			prog.attempts[name] = 0
		}
	}

	switch {
	case len(rejected) > 0:
		err := o.cfg.Writer.Reject(ctx, cur, wl, rejected)
		return retryOnError(ctx, err, "reject workload", key)
	case len(retried) > 0:
		msg := fmt.Sprintf("admission check %s answered Retry: %s", strings.Join(retried, ", "), lifecycle.CheckMessages(wl, retried))
		err := o.cfg.Writer.Evict(ctx, cur, wl, lifecycle.Eviction{Reason: v1alpha1.ReasonAdmissionCheck, Message: msg, RequeueAfter: retryAfter})
		return retryOnError(ctx, err, "evict workload", key)
	case allReady(wl):
		return o.admitOrRelease(ctx, cur, wl, w)
	default:
		workload.SetCondition(&wl.Status.Conditions, v1alpha1.WorkloadAdmitted, metav1.ConditionFalse, v1alpha1.ReasonWaitingForChecks,
			lifecycle.WaitingForChecksMessage(wl), wl.Generation)
		if err := o.cfg.Writer.PatchStatus(ctx, cur, wl, "check-state"); err != nil {
			return retryOnError(ctx, err, "record check states", key)
		}
		return nextDue(prog, wl, now)
	}
}

// dueChecks reads, under the workload's lock, the version the check phase
// works from and the checks due to be asked. A nil workload means there is
// nothing to ask; after then says when to look again. An inactive
// workload still holding quota is evicted here.
func (o *Orchestrator) dueChecks(ctx context.Context, key types.NamespacedName) (*v1alpha1.Workload, []string, *catalog, time.Duration) {
	unlock := o.cfg.Locks.Lock(key)
	defer unlock()
	orig := o.cfg.Store.Get(key)
	rechecked := o.rechecks.take(key)
	if orig == nil || orig.Status.Admission == nil || workload.IsFinished(orig) || workload.IsEvicting(orig) || workload.IsDeleting(orig) {
		o.progress.forget(key)
		o.rechecks.forget(key)
		return nil, nil, nil, 0
	}
	if !workload.IsActive(orig) {
		err := o.cfg.Writer.Evict(ctx, orig, orig, lifecycle.Eviction{Reason: v1alpha1.ReasonInactive, Message: "the workload was deactivated"})
		return nil, nil, nil, retryOnError(ctx, err, "evict inactive workload", key)
	}
	if workload.IsAdmitted(orig) {
		o.progress.forget(key)
		due := admittedDue(orig, rechecked)
		if len(due) == 0 {
			return nil, nil, nil, 0
		}
		w := &catalog{}
		w.flavors, w.checks = o.cfg.Catalog()
		return orig, due, w, 0
	}
	w := &catalog{}
	w.flavors, w.checks = o.cfg.Catalog()
	prog := o.progress.get(key, workload.ReservationID(orig))
	now := time.Now()
	var due []string
	for _, st := range orig.Status.AdmissionChecks {
		if rechecked[st.Name] || (st.State == v1alpha1.CheckStatePending && !prog.due[st.Name].After(now)) {
			due = append(due, st.Name)
		}
	}
	if len(due) == 0 && !allReady(orig) {
		return nil, nil, nil, nextDue(prog, orig, now)
	}
	return orig, due, w, 0
}

// catalog is the ResourceFlavors and AdmissionChecks by name.
type catalog struct {
	flavors map[string]*v1alpha1.ResourceFlavor
	checks  map[string]*v1alpha1.AdmissionCheck
}

func orEmpty(ac *v1alpha1.AdmissionCheck) *v1alpha1.AdmissionCheck {
	if ac == nil {
		return &v1alpha1.AdmissionCheck{}
	}
	return ac
}

// admitOrRelease merges the flavors and every check's updates; on success
// it writes the check states, pod set infos and Admitted=True in one
// write. When the updates conflict, no answer can change without a new
// reservation (Ready answers are final for theirs), so the reservation is
// given up with the conflict in its conditions, and the workload queues
// again after a backoff, when the checks are asked afresh.
func (o *Orchestrator) admitOrRelease(ctx context.Context, orig, wl *v1alpha1.Workload, w *catalog) time.Duration {
	key := workload.Key(wl)
	infos, err := podset.MergeWorkload(wl, w.flavors)
	if err != nil {
		msg := lifecycle.ConflictMessage(err)
		var wait time.Duration
		for _, st := range wl.Status.AdmissionChecks {
			wait = max(wait, checks.Backoff(orEmpty(w.checks[st.Name]), int(lifecycle.RequeueCount(wl))))
		}
		o.cfg.Recorder.Eventf(wl, nil, "Warning", v1alpha1.ReasonPodSetUpdateConflict, "Admit",
			"not admitted: the admission checks' pod set updates conflict: %s", msg)
		err := o.cfg.Writer.Release(ctx, orig, wl, lifecycle.Eviction{Reason: v1alpha1.ReasonPodSetUpdateConflict, Message: msg, RequeueAfter: wait})
		return retryOnError(ctx, err, "release conflicting workload", key)
	}
	if err := o.cfg.Writer.Admit(ctx, orig, wl, infos); err != nil {
		return retryOnError(ctx, err, "admit workload", key)
	}
	o.progress.forget(key)
	return 0
}

// retryOnError logs err (unless it is a lost race) and asks for another
// look soon.
func retryOnError(ctx context.Context, err error, what string, key types.NamespacedName) time.Duration {
	if err == nil {
		return 0
	}
	if !errors.Is(err, lifecycle.ErrStale) {
		ctrl.LoggerFrom(ctx).Error(err, what, "workload", key.String())
	}
	return time.Second
}

// ask calls Evaluate for each named check in parallel.
func (o *Orchestrator) ask(ctx context.Context, wl *v1alpha1.Workload, names []string, w *catalog) map[string]checks.Answer {
	out := make(map[string]checks.Answer, len(names))
	if len(names) == 0 {
		return out
	}
	ctx = traceContext(ctx, wl)
	subject := workload.ToChecks(wl, w.flavors)
	reservation := workload.ReservationID(wl)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, name := range names {
		ac := w.checks[name]
		if ac == nil {
			out[name] = checks.Answer{State: v1alpha1.CheckStatePending, Reason: "NoAnswer", NoAnswer: true,
				Message: fmt.Sprintf("admission check %s doesn't exist", name)}
			continue
		}
		wg.Go(func() {
			ans := o.evaluate(ctx, ac, evaluateRequest(wl, ac, reservation, subject))
			mu.Lock()
			out[name] = ans
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// evaluateRequest is the request about wl's reservation for check ac,
// without parameters. admitted is set only for a provider that declares
// CONTRACT_REVISION_3 or later: no provider is sent a field of a revision
// later than the one it declares.
func evaluateRequest(wl *v1alpha1.Workload, ac *v1alpha1.AdmissionCheck, reservation string, subject *checksv1.Workload) *checksv1.EvaluateRequest {
	req := &checksv1.EvaluateRequest{
		CheckName:     ac.Name,
		EvaluationKey: workload.EvaluationKey(wl.UID, reservation, ac.Name),
		Workload:      subject,
	}
	if checks.Revision(ac) >= checksv1.ContractRevision_CONTRACT_REVISION_3 {
		req.Admitted = workload.IsAdmitted(wl)
	}
	return req
}

// evaluate asks ac's provider for req, adding the check's parameters.
func (o *Orchestrator) evaluate(ctx context.Context, ac *v1alpha1.AdmissionCheck, req *checksv1.EvaluateRequest) checks.Answer {
	params, err := checks.Parameters(ac)
	if err != nil {
		return checks.Answer{State: v1alpha1.CheckStatePending, Reason: "InvalidParameters", Message: err.Error(), NoAnswer: true, Final: true}
	}
	req.Parameters = params
	resp, err := o.cfg.Checks.Evaluate(ctx, ac, req)
	ans := checks.Read(ac, req, resp, err)
	if err == nil && ans.NoAnswer {
		o.cfg.Metrics.CheckCallErrors.WithLabelValues(ac.Name, "Evaluate", "invalid_response").Inc()
	}
	return ans
}

// traceContext continues the workload's trace (its traceparent annotation)
// for the calls made about it.
func traceContext(ctx context.Context, wl *v1alpha1.Workload) context.Context {
	tp := wl.Annotations[podkeys.TraceparentAnnotation]
	if tp == "" {
		return ctx
	}
	return otel.GetTextMapPropagator().Extract(ctx, propagation.MapCarrier{"traceparent": tp})
}

// applyAnswer records ans in st, moving the transition time only when the
// state changes.
func applyAnswer(st *v1alpha1.AdmissionCheckState, ans checks.Answer, now metav1.Time) {
	if st.State != ans.State {
		st.LastTransitionTime = now
	}
	st.State = ans.State
	st.Reason = truncate(ans.Reason, maxCheckReason)
	st.Message = truncate(ans.Message, maxCheckMessage)
	st.PodSetUpdates = nil
	st.RequeueAfterSeconds = nil
	switch ans.State {
	case v1alpha1.CheckStateReady:
		st.PodSetUpdates = ans.Updates
	case v1alpha1.CheckStateRetry:
		st.RequeueAfterSeconds = ptr.To(int32(ans.RetryAfter.Round(time.Second) / time.Second))
	}
}

// truncate cuts s to at most n bytes without splitting a UTF-8 character
// (the API server refuses invalid UTF-8).
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// nextAsk is how long to wait before asking a check again: the provider's
// retry_after for a Pending answer, else the check's backoff (the longest
// one for failures that repeating cannot fix).
func nextAsk(ac *v1alpha1.AdmissionCheck, ans checks.Answer, attempt int) time.Duration {
	if ac == nil {
		return checks.Backoff(&v1alpha1.AdmissionCheck{}, attempt)
	}
	switch {
	case ans.Final:
		return checks.MaxBackoff(ac)
	case !ans.NoAnswer && ans.RetryAfter > 0:
		return ans.RetryAfter
	default:
		return checks.Backoff(ac, attempt)
	}
}

// nextDue is the wait until the earliest check still to be asked.
func nextDue(prog *progress, wl *v1alpha1.Workload, now time.Time) time.Duration {
	var next time.Duration
	for _, st := range wl.Status.AdmissionChecks {
		t, ok := prog.due[st.Name]
		if !ok {
			continue
		}
		d := max(t.Sub(now), 10*time.Millisecond)
		if next == 0 || d < next {
			next = d
		}
	}
	return next
}

func allReady(wl *v1alpha1.Workload) bool {
	for _, st := range wl.Status.AdmissionChecks {
		if st.State != v1alpha1.CheckStateReady {
			return false
		}
	}
	return true
}
