package lifecycle

import (
	"context"
	"fmt"
	"math"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/services/admitter/internal/workload"
)

// A workload's maximum execution time (spec.maximumExecutionTimeSeconds)
// counts the time it spends admitted, across evictions and requeues:
//
//	remaining = max − accumulatedPast − (now − Admitted.lastTransitionTime)
//
// status.accumulatedPastExecutionTimeSeconds grows each time Admitted
// turns False (SetNotAdmitted), in the write that turns it. Everything is
// read from the Workload, so a new leader computes the same deadline.

// ExecutionDeadline is when wl's maximum execution time runs out. ok is
// false when none is in force: wl has no maximum, or does not run admitted
// (not admitted, evicted, finished or being deleted). spec.active is not
// looked at: a workload deactivated for its time whose eviction a crash cut
// short must still be evicted for it.
func ExecutionDeadline(wl *v1alpha1.Workload) (at time.Time, ok bool) {
	if wl.Spec.MaximumExecutionTimeSeconds == nil {
		return time.Time{}, false
	}
	since, ok := runningSince(wl)
	if !ok {
		return time.Time{}, false
	}
	return since.Add(executionBudget(wl)), true
}

// RemainingExecutionTime is what is left of wl's maximum execution time
// at now; negative once it ran out. ok is false when none is in force
// (see ExecutionDeadline).
func RemainingExecutionTime(wl *v1alpha1.Workload, now time.Time) (remaining time.Duration, ok bool) {
	at, ok := ExecutionDeadline(wl)
	if !ok {
		return 0, false
	}
	return at.Sub(now), true
}

// executionBudget is what was left of wl's maximum execution time when its
// current admission began: max − accumulatedPast.
func executionBudget(wl *v1alpha1.Workload) time.Duration {
	limit := ptr.Deref(wl.Spec.MaximumExecutionTimeSeconds, 0)
	past := ptr.Deref(wl.Status.AccumulatedPastExecutionTimeSeconds, 0)
	return time.Duration(int64(limit)-int64(past)) * time.Second
}

// runningSince is when wl's current admission began, if it runs admitted.
func runningSince(wl *v1alpha1.Workload) (time.Time, bool) {
	if wl.Status.Admission == nil || workload.IsDeleting(wl) || workload.IsFinished(wl) ||
		meta.IsStatusConditionTrue(wl.Status.Conditions, v1alpha1.WorkloadEvicted) {
		return time.Time{}, false
	}
	c := workload.Condition(wl, v1alpha1.WorkloadAdmitted)
	if c == nil || c.Status != metav1.ConditionTrue {
		return time.Time{}, false
	}
	return c.LastTransitionTime.Time, true
}

// SetNotAdmitted sets wl's Admitted condition False at now. When it was
// True and wl has a maximum execution time, the seconds it was True are
// added to status.accumulatedPastExecutionTimeSeconds in the same write,
// so the budget carries over evictions and requeues. Every write that
// turns Admitted False goes through it. Workloads without a maximum (it is
// immutable) keep no account: their status is as small as before.
func SetNotAdmitted(wl *v1alpha1.Workload, reason, message string, now time.Time) {
	if wl.Spec.MaximumExecutionTimeSeconds != nil {
		if c := workload.Condition(wl, v1alpha1.WorkloadAdmitted); c != nil && c.Status == metav1.ConditionTrue {
			wl.Status.AccumulatedPastExecutionTimeSeconds = addSeconds(wl.Status.AccumulatedPastExecutionTimeSeconds, now.Sub(c.LastTransitionTime.Time))
		}
	}
	meta.SetStatusCondition(&wl.Status.Conditions, metav1.Condition{
		Type: v1alpha1.WorkloadAdmitted, Status: metav1.ConditionFalse, Reason: reason, Message: message,
		ObservedGeneration: wl.Generation, LastTransitionTime: metav1.NewTime(now),
	})
}

// addSeconds is past plus the whole seconds of ran, kept within int32. A
// negative ran (a clock that went back) adds nothing.
func addSeconds(past *int32, ran time.Duration) *int32 {
	total := int64(ptr.Deref(past, 0)) + max(int64(ran/time.Second), 0)
	return ptr.To(int32(min(total, math.MaxInt32)))
}

// ranFor is how long wl ran admitted in all at now: the time of its past
// admissions and of the current one.
func ranFor(wl *v1alpha1.Workload, now time.Time) time.Duration {
	past := time.Duration(ptr.Deref(wl.Status.AccumulatedPastExecutionTimeSeconds, 0)) * time.Second
	since, ok := runningSince(wl)
	if !ok {
		return past
	}
	return past + now.Sub(since).Truncate(time.Second)
}

// executionEviction is the eviction of wl once its maximum execution time
// ran out at now; ok is false while it has not (or none is in force).
func executionEviction(wl *v1alpha1.Workload, now time.Time) (ev Eviction, ok bool) {
	remaining, ok := RemainingExecutionTime(wl, now)
	if !ok || remaining > 0 {
		return Eviction{}, false
	}
	return Eviction{
		Reason:     v1alpha1.ReasonMaximumExecutionTimeExceeded,
		Message:    exceededMessage(wl, ranFor(wl, now)),
		deactivate: true,
		// As Kueue does: the account starts again from zero, so an
		// operator who reactivates the workload gives it a fresh budget.
		resetExecutionTime: true,
	}, true
}

// exceededMessage says that wl ran out of its maximum execution time after
// ran, and what becomes of its pods: a plain pod is deleted for good, as
// nothing creates it anew; a group may run again once reactivated.
func exceededMessage(wl *v1alpha1.Workload, ran time.Duration) string {
	msg := fmt.Sprintf("it ran admitted for %s, reaching its maximum execution time of %ds (label %s); it was deactivated: ",
		ran, ptr.Deref(wl.Spec.MaximumExecutionTimeSeconds, 0), podkeys.MaxExecTimeLabel)
	if workload.PodGroup(wl) == "" {
		return msg + "the pod is deleted and does not run again, as nothing creates a plain pod anew"
	}
	return msg + "the group's pods are deleted; set spec.active to true to run it again, once its pods are all created again"
}

// ExceedExecutionTime deactivates and evicts the workload key once its
// maximum execution time ran out (reason MaximumExecutionTimeExceeded):
// spec.active=false first, then the eviction, whole. Its quota stays held
// until its pods stop, as with any eviction of an admitted workload. It
// does nothing when the time is not (or no longer) up.
func (w *Writer) ExceedExecutionTime(ctx context.Context, key types.NamespacedName) error {
	unlock := w.cfg.Locks.Lock(key)
	defer unlock()
	orig := w.cfg.Store.Get(key)
	if orig == nil {
		return nil
	}
	ev, due := executionEviction(orig, time.Now())
	if !due {
		return nil
	}
	return w.deactivateLocked(ctx, orig, ev, "deactivate-exec-time", "admitter/deactivate-exec-time")
}

// inactiveCause is the eviction of wl, deactivated, for what deactivated
// it: ev (reason Inactive) unless wl ran out of its maximum execution
// time. A crash between ExceedExecutionTime's two writes leaves a workload
// inactive and admitted; whichever part of the next leader evicts it
// first, the eviction then names the real cause.
func inactiveCause(wl *v1alpha1.Workload, ev Eviction, now time.Time) Eviction {
	if exceeded, ok := executionEviction(wl, now); ok {
		return exceeded
	}
	return ev
}
