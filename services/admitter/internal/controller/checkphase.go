package controller

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/pkg/podset"
	"github.com/sluice-dev/sluice/services/admitter/internal/checks"
	"github.com/sluice-dev/sluice/services/admitter/internal/workload"
)

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
	delete(t.m, key)
}

func (a *Admitter) checkWorker(ctx context.Context) {
	for {
		key, shutdown := a.checkQ.Get()
		if shutdown {
			return
		}
		after := a.processChecks(ctx, key)
		a.checkQ.Done(key)
		if after > 0 && ctx.Err() == nil {
			a.checkQ.AddAfter(key, after)
		}
	}
}

// processChecks asks the checks that are due for the workload's current
// reservation, records their answers in at most one status write, and acts
// on them: admit when all are Ready, evict on Retry, deactivate on
// Rejected. It returns when to look again (0: not needed).
func (a *Admitter) processChecks(ctx context.Context, key types.NamespacedName) time.Duration {
	unlock := a.locks.lock(key)
	defer unlock()
	orig := a.store.get(key)
	if orig == nil || orig.Status.Admission == nil || isFinished(orig) {
		a.progress.forget(key)
		return 0
	}
	if !workload.IsActive(orig) {
		err := a.evict(ctx, orig, orig, v1alpha1.ReasonInactive, "the workload was deactivated", 0)
		return retryOnError(a, err, "evict inactive workload", key)
	}
	if isAdmitted(orig) {
		a.progress.forget(key)
		return 0
	}
	w, err := a.loadCatalog(ctx)
	if err != nil {
		a.log.Error(err, "check phase", "workload", key.String())
		return time.Second
	}
	prog := a.progress.get(key, orig.Status.Admission.ReservationID)
	now := time.Now()
	conflict := false
	if c := workload.Condition(orig, v1alpha1.WorkloadAdmitted); c != nil && c.Reason == v1alpha1.ReasonPodSetUpdateConflict {
		conflict = true
	}
	var due []string
	for _, st := range orig.Status.AdmissionChecks {
		ask := st.State == v1alpha1.CheckStatePending || (conflict && st.State == v1alpha1.CheckStateReady)
		if ask && !prog.due[st.Name].After(now) {
			due = append(due, st.Name)
		}
	}
	answers := a.ask(ctx, orig, due, w)

	wl := orig.DeepCopy()
	var retryAfter time.Duration
	var rejected, retried []string
	for _, name := range due {
		ans := answers[name]
		st := workload.CheckState(wl, name)
		applyAnswer(st, ans, metav1.NewTime(now))
		ac := w.checks[name]
		switch {
		case ans.State == v1alpha1.CheckStateRejected:
			rejected = append(rejected, name)
		case ans.State == v1alpha1.CheckStateRetry:
			retried = append(retried, name)
			retryAfter = max(retryAfter, ans.RetryAfter)
		case ans.State == v1alpha1.CheckStatePending || conflict:
			prog.due[name] = now.Add(nextAsk(ac, ans, prog.attempts[name]))
			prog.attempts[name]++
		default:
			prog.attempts[name] = 0
		}
	}

	switch {
	case len(rejected) > 0:
		err := a.reject(ctx, orig, wl, rejected)
		return retryOnError(a, err, "reject workload", key)
	case len(retried) > 0:
		msg := fmt.Sprintf("admission check %s answered Retry: %s", strings.Join(retried, ", "), checkMessages(wl, retried))
		err := a.evict(ctx, orig, wl, v1alpha1.ReasonAdmissionCheck, msg, retryAfter)
		return retryOnError(a, err, "evict workload", key)
	case allReady(wl):
		return a.admitOrReportConflict(ctx, orig, wl, w, prog, now)
	default:
		workload.SetCondition(&wl.Status.Conditions, v1alpha1.WorkloadAdmitted, metav1.ConditionFalse, v1alpha1.ReasonWaitingForChecks,
			waitingForChecksMessage(wl), wl.Generation)
		if err := a.patchStatus(ctx, orig, wl, "check-state"); err != nil {
			return retryOnError(a, err, "record check states", key)
		}
		return nextDue(prog, wl, now)
	}
}

// admitOrReportConflict merges the flavors and every check's updates; on
// success it writes the check states, pod set infos and Admitted=True in
// one write, otherwise it says what conflicts and asks the checks again
// later.
func (a *Admitter) admitOrReportConflict(ctx context.Context, orig, wl *v1alpha1.Workload, w *catalog, prog *progress, now time.Time) time.Duration {
	key := workload.Key(wl)
	infos, err := podset.MergeWorkload(wl, w.flavors)
	if err != nil {
		var conflict *podset.ConflictError
		msg := err.Error()
		if errors.As(err, &conflict) {
			msg = fmt.Sprintf("pod set %s: %s", conflict.PodSet, conflict.Error())
		}
		prev := workload.Condition(orig, v1alpha1.WorkloadAdmitted)
		workload.SetCondition(&wl.Status.Conditions, v1alpha1.WorkloadAdmitted, metav1.ConditionFalse, v1alpha1.ReasonPodSetUpdateConflict, msg, wl.Generation)
		if err := a.patchStatus(ctx, orig, wl, "check-conflict"); err != nil {
			return retryOnError(a, err, "record pod set update conflict", key)
		}
		if prev == nil || prev.Message != msg {
			a.cfg.Recorder.Eventf(wl, nil, "Warning", v1alpha1.ReasonPodSetUpdateConflict, "Admit",
				"not admitted: the admission checks' pod set updates conflict: %s", msg)
		}
		for _, st := range wl.Status.AdmissionChecks {
			if _, ok := prog.due[st.Name]; !ok || !prog.due[st.Name].After(now) {
				prog.due[st.Name] = now.Add(nextAsk(w.checks[st.Name], checks.Answer{}, prog.attempts[st.Name]))
				prog.attempts[st.Name]++
			}
		}
		if next := nextDue(prog, wl, now); next > 0 {
			return next
		}
		// No check to ask: the flavors themselves conflict with the pods.
		// Look again later in case a flavor changes.
		return checks.DefaultMaxBackoff / 10
	}
	wl.Status.PodSetInfos = infos
	workload.SetCondition(&wl.Status.Conditions, v1alpha1.WorkloadAdmitted, metav1.ConditionTrue, v1alpha1.ReasonAdmitted,
		"Admitted in ClusterQueue "+wl.Status.Admission.ClusterQueue+"; every admission check is Ready", wl.Generation)
	if err := a.patchStatus(ctx, orig, wl, "admit"); err != nil {
		return retryOnError(a, err, "admit workload", key)
	}
	a.progress.forget(key)
	a.summaries.add(wl.Status.Admission.ClusterQueue, true)
	return 0
}

// retryOnError logs err (unless it is a lost race) and asks for another
// look soon.
func retryOnError(a *Admitter, err error, what string, key types.NamespacedName) time.Duration {
	if err == nil {
		return 0
	}
	if !errors.Is(err, ErrStale) {
		a.log.Error(err, what, "workload", key.String())
	}
	return time.Second
}

// ask calls Evaluate for each named check in parallel.
func (a *Admitter) ask(ctx context.Context, wl *v1alpha1.Workload, names []string, w *catalog) map[string]checks.Answer {
	out := make(map[string]checks.Answer, len(names))
	if len(names) == 0 {
		return out
	}
	ctx = traceContext(ctx, wl)
	req := &checksv1.EvaluateRequest{
		EvaluationKey: workload.EvaluationKey(wl),
		Workload:      workload.ToChecks(wl, w.flavors),
	}
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
			ans := a.evaluate(ctx, ac, req)
			mu.Lock()
			out[name] = ans
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

func (a *Admitter) evaluate(ctx context.Context, ac *v1alpha1.AdmissionCheck, base *checksv1.EvaluateRequest) checks.Answer {
	params, err := checks.Parameters(ac)
	if err != nil {
		return checks.Answer{State: v1alpha1.CheckStatePending, Reason: "InvalidParameters", Message: err.Error(), NoAnswer: true, Final: true}
	}
	req := &checksv1.EvaluateRequest{
		CheckName:     ac.Name,
		Parameters:    params,
		EvaluationKey: base.EvaluationKey,
		Workload:      base.Workload,
	}
	resp, err := a.cfg.Checks.Evaluate(ctx, ac, req)
	ans := checks.Read(ac, req, resp, err)
	if err == nil && ans.NoAnswer {
		a.cfg.Metrics.CheckCallErrors.WithLabelValues(ac.Name, "Evaluate", "invalid_response").Inc()
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

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
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

// waitingForChecksMessage lists the checks that are not Ready yet, with
// what they said.
func waitingForChecksMessage(wl *v1alpha1.Workload) string {
	var parts []string
	for _, st := range wl.Status.AdmissionChecks {
		if st.State == v1alpha1.CheckStateReady {
			continue
		}
		msg := st.Message
		if msg == "" {
			msg = "no answer yet"
		}
		parts = append(parts, fmt.Sprintf("%s (%s: %s)", st.Name, st.State, msg))
	}
	sort.Strings(parts)
	return "waiting for admission checks: " + strings.Join(parts, "; ")
}

func checkMessages(wl *v1alpha1.Workload, names []string) string {
	var parts []string
	for _, name := range names {
		if st := workload.CheckState(wl, name); st != nil && st.Message != "" {
			parts = append(parts, fmt.Sprintf("%s: %s", name, st.Message))
		}
	}
	if len(parts) == 0 {
		return "no message"
	}
	return strings.Join(parts, "; ")
}
