package lifecycle

import (
	"context"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/crashpoint"
	"github.com/sluice-dev/sluice/services/admitter/internal/shrink"
	"github.com/sluice-dev/sluice/services/admitter/internal/startup"
	"github.com/sluice-dev/sluice/services/admitter/internal/workload"
)

// startedReports remembers, per workload, the last started counts the
// grouper reported for its current reservation, for the message of a
// missed deadline. It lives in memory only: after a restart the message
// says nothing was reported until the grouper reports again.
type startedReports struct {
	mu sync.Mutex
	m  map[types.NamespacedName]startedReport
}

type startedReport struct {
	reservation string
	counts      startup.Counts
}

func newStartedReports() *startedReports {
	return &startedReports{m: map[types.NamespacedName]startedReport{}}
}

func (s *startedReports) put(key types.NamespacedName, reservation string, c startup.Counts) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[key] = startedReport{reservation: reservation, counts: c}
}

func (s *startedReports) get(key types.NamespacedName, reservation string) (startup.Counts, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.m[key]
	if !ok || r.reservation != reservation {
		return startup.Counts{}, false
	}
	return r.counts, true
}

func (s *startedReports) forget(key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	shrink.Delete(&s.m, key)
}

// recordStarted applies the grouper's started counts to wl: once every pod
// set's count reaches its pod count, by the queue's condition, PodsReady
// turns True and the deadline no longer applies. Only an admission whose
// deadline is still to be kept is affected, so workloads in queues without
// a deadline cost no write, and a report that arrives after the deadline
// evicted the workload changes nothing.
func (w *Writer) recordStarted(wl *v1alpha1.Workload, c startup.Counts) {
	if wl.Status.Admission == nil {
		return
	}
	p := w.cfg.StartPolicy(wl.Status.Admission.ClusterQueue)
	if _, due := startup.Due(wl, p); !due {
		return
	}
	if !startup.AllStarted(p, wl.Spec.PodSets, c) {
		w.started.put(workload.Key(wl), workload.ReservationID(wl), c)
		return
	}
	w.started.forget(workload.Key(wl))
	workload.SetCondition(&wl.Status.Conditions, v1alpha1.WorkloadPodsReady, metav1.ConditionTrue, v1alpha1.ReasonPodsStarted,
		fmt.Sprintf("every pod started (%s) within the %s deadline", p.Condition, p.Timeout), wl.Generation)
}

// MissDeadline evicts the workload key if its admission's start-up
// deadline passed with its pods not all started: reason PodsReadyTimeout,
// requeued after the policy's backoff (requeueState counts it), or, when
// that requeue would exceed the policy's limit, deactivated instead. It
// does nothing when the deadline is not (or no longer) due.
func (w *Writer) MissDeadline(ctx context.Context, key types.NamespacedName) error {
	unlock := w.cfg.Locks.Lock(key)
	defer unlock()
	orig := w.cfg.Store.Get(key)
	if orig == nil || orig.Status.Admission == nil {
		return nil
	}
	cq := orig.Status.Admission.ClusterQueue
	p := w.cfg.StartPolicy(cq)
	at, due := startup.Due(orig, p)
	if !due || time.Now().Before(at) {
		return nil
	}
	counts, known := w.started.get(key, workload.ReservationID(orig))
	msg := fmt.Sprintf("the pods did not all start (%s) within %s of the admission: %s",
		p.Condition, p.Timeout, startup.Describe(p, orig.Spec.PodSets, counts, known))
	n := RequeueCount(orig) + 1
	if startup.LimitExceeded(p, n) {
		msg = fmt.Sprintf("deactivated (%s): missed the start-up deadline %d times, more than backoffLimitCount %d allows; %s",
			v1alpha1.ReasonRequeuingLimitExceeded, n, ptr.Deref(p.LimitCount, 0), msg)
		ev := Eviction{Reason: v1alpha1.ReasonRequeuingLimitExceeded, Message: msg, deactivate: true}
		if err := w.deactivateLocked(ctx, orig, ev, "deactivate-deadline", "admitter/deactivate-deadline"); err != nil {
			return err
		}
	} else {
		wait := startup.Backoff(p, n)
		if err := w.Evict(ctx, orig, orig, Eviction{Reason: v1alpha1.ReasonPodsReadyTimeout, Message: msg, RequeueAfter: wait}); err != nil {
			return err
		}
		w.cfg.Recorder.Eventf(orig, nil, "Warning", v1alpha1.ReasonPodsReadyTimeout, "Evict",
			"%s; requeue %d after %s", msg, n, wait)
	}
	w.cfg.Metrics.DeadlineEvictions.WithLabelValues(cq).Inc()
	return nil
}

// deactivateLocked sets spec.active=false (write op, then crash point
// point) and then evicts orig for ev, whole. The spec is written first, so
// a crash in between still ends in an eviction: the deadline that fell is
// computed again from the Workload by the next leader, and the check
// phase evicts inactive workloads that hold quota (reason Inactive, unless
// the Workload shows the cause: see inactiveCause). The other order could
// leave a workload evicted but active, which would queue again.
func (w *Writer) deactivateLocked(ctx context.Context, orig *v1alpha1.Workload, ev Eviction, op, point string) error {
	if workload.IsActive(orig) {
		deactivated := orig.DeepCopy()
		deactivated.Spec.Active = ptr.To(false)
		if err := w.patchSpec(ctx, orig, deactivated, op); err != nil {
			return err
		}
		crashpoint.Hit(point)
		orig = deactivated
	}
	return w.Evict(ctx, orig, orig, ev)
}
