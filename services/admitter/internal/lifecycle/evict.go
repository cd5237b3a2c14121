package lifecycle

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/crashpoint"
	"github.com/sluice-dev/sluice/services/admitter/internal/releases"
	"github.com/sluice-dev/sluice/services/admitter/internal/workload"
)

// Eviction is why a workload loses its reservation.
type Eviction struct {
	Reason, Message string
	// RequeueAfter holds the workload back that long once its quota is
	// released (and puts it at the back of its priority); zero requeues it
	// at once, in its old place.
	RequeueAfter time.Duration
	// requeued: the eviction's first write already recorded the requeue.
	requeued bool
	// podsStopped: the eviction deleted the workload's running pods; a
	// pod group then waits for them to be created again.
	podsStopped bool
	// deactivate: the workload was deactivated for this reason; the
	// eviction says so in a Warning event. It is emitted after the
	// eviction's write, so a leader that finishes a deactivation a crash
	// cut short emits it too.
	deactivate bool
	// resetExecutionTime: the eviction clears the time the workload ran
	// admitted (status.accumulatedPastExecutionTimeSeconds).
	resetExecutionTime bool
}

// Admit writes wl (orig with its check answers) as admitted with infos.
func (w *Writer) Admit(ctx context.Context, orig, wl *v1alpha1.Workload, infos []v1alpha1.PodSetInfo) error {
	cq := wl.Status.Admission.ClusterQueue
	wl.Status.PodSetInfos = infos
	workload.SetCondition(&wl.Status.Conditions, v1alpha1.WorkloadAdmitted, metav1.ConditionTrue, v1alpha1.ReasonAdmitted,
		"Admitted in ClusterQueue "+cq+"; every admission check is Ready", wl.Generation)
	if err := w.PatchStatus(ctx, orig, wl, "admit"); err != nil {
		return err
	}
	crashpoint.Hit("admitter/admit")
	w.cfg.Reserved(cq, true)
	return nil
}

// Evict takes the reservation of updated (orig with the check answers that
// led here) away. A workload that was never admitted has only gated pods,
// so its quota is released in the same write. An admitted one may have
// running pods: the first write only says Evicted (the decision in force
// becomes EVICT) and the quota stays reserved until the grouper reports
// the pods stopped (see Stopped). An inactive workload's eviction
// (reason Inactive) names what deactivated it when the Workload shows it
// (see inactiveCause).
func (w *Writer) Evict(ctx context.Context, orig, updated *v1alpha1.Workload, ev Eviction) error {
	now := time.Now()
	if ev.Reason == v1alpha1.ReasonInactive {
		ev = inactiveCause(updated, ev, now)
	}
	if !workload.IsAdmitted(orig) {
		return w.Release(ctx, orig, updated, ev)
	}
	wl := updated.DeepCopy()
	gen := wl.Generation
	cq := wl.Status.Admission.ClusterQueue
	wl.Status.PodSetInfos = nil
	workload.SetCondition(&wl.Status.Conditions, v1alpha1.WorkloadEvicted, metav1.ConditionTrue, ev.Reason, ev.Message, gen)
	endAdmission(wl, ev, now)
	workload.SetCondition(&wl.Status.Conditions, v1alpha1.WorkloadQuotaReserved, metav1.ConditionTrue, v1alpha1.ReasonEvicting,
		"Quota held in ClusterQueue "+cq+" until the evicted pods stop", gen)
	setRequeue(wl, ev.RequeueAfter)
	if err := w.PatchStatus(ctx, orig, wl, "evict"); err != nil {
		return err
	}
	crashpoint.Hit("admitter/evict")
	w.cfg.Recorder.Eventf(wl, nil, "Normal", "Evicting", "Evict", "evicting from ClusterQueue %s: %s", cq, ev.Message)
	w.warnDeactivated(wl, ev)
	return nil
}

// endAdmission turns wl's Admitted condition False for ev at now, with
// the time it ran admitted accounted for (SetNotAdmitted), or the account
// cleared when ev ends it.
func endAdmission(wl *v1alpha1.Workload, ev Eviction, now time.Time) {
	SetNotAdmitted(wl, ev.Reason, ev.Message, now)
	if ev.resetExecutionTime {
		wl.Status.AccumulatedPastExecutionTimeSeconds = nil
	}
}

// warnDeactivated tells, in a Warning event, why an eviction that
// deactivated wl did.
func (w *Writer) warnDeactivated(wl *v1alpha1.Workload, ev Eviction) {
	if ev.deactivate {
		w.cfg.Recorder.Eventf(wl, nil, "Warning", ev.Reason, "Deactivate", "%s", ev.Message)
	}
}

// Release gives the reservation of updated up in one status write:
// admission, pod set infos and reclaimable pods cleared, QuotaReserved=False, Admitted=False
// and Evicted=True, every non-Pending check reset to Pending (a Retry
// counts in its retryCount), a Release owed to every check, and the
// requeue time set. A pod group whose pods the eviction deleted waits
// for them (WaitingForReplacementPods) before it queues again.
func (w *Writer) Release(ctx context.Context, orig, updated *v1alpha1.Workload, ev Eviction) error {
	wl := updated.DeepCopy()
	now := metav1.Now()
	gen := wl.Generation
	cq := wl.Status.Admission.ClusterQueue
	releases.Owe(wl, v1alpha1.ReleaseEvicted)
	wl.Status.Admission = nil
	wl.Status.PodSetInfos = nil
	// The run is over: the pods that succeeded in it count toward no later
	// reservation, which books (and waits for) every pod again.
	wl.Status.ReclaimablePods = nil
	workload.SetCondition(&wl.Status.Conditions, v1alpha1.WorkloadQuotaReserved, metav1.ConditionFalse, v1alpha1.ReasonPending,
		"waiting for quota again after an eviction: "+ev.Message, gen)
	endAdmission(wl, ev, now.Time)
	workload.SetCondition(&wl.Status.Conditions, v1alpha1.WorkloadEvicted, metav1.ConditionTrue, ev.Reason, ev.Message, gen)
	resetChecks(wl, now)
	meta.RemoveStatusCondition(&wl.Status.Conditions, v1alpha1.WorkloadPodsReady)
	if ev.podsStopped && workload.PodGroup(wl) != "" {
		setNoPods(wl)
	}
	if !ev.requeued {
		setRequeue(wl, ev.RequeueAfter)
	}
	if err := w.PatchStatus(ctx, orig, wl, "release"); err != nil {
		return err
	}
	crashpoint.Hit("admitter/release")
	w.cfg.Recorder.Eventf(wl, nil, "Normal", "Evicted", "Evict", "evicted from ClusterQueue %s: %s", cq, ev.Message)
	w.warnDeactivated(wl, ev)
	w.cfg.Requeue()
	return nil
}

// resetChecks sets every non-Pending check back to Pending for the next
// reservation, counting Retry answers.
func resetChecks(wl *v1alpha1.Workload, now metav1.Time) {
	for i := range wl.Status.AdmissionChecks {
		st := &wl.Status.AdmissionChecks[i]
		if st.State == v1alpha1.CheckStatePending {
			continue
		}
		if st.State == v1alpha1.CheckStateRetry {
			st.RetryCount = ptr.To(ptr.Deref(st.RetryCount, 0) + 1)
		}
		st.Message = "Reset to Pending after eviction. Previously: " + string(st.State)
		st.State = v1alpha1.CheckStatePending
		st.Reason = ""
		st.LastTransitionTime = now
		st.PodSetUpdates = nil
	}
}

// setRequeue counts the requeue and, with a wait, holds the workload back
// until then; the requeue time is also its new place in line. The API
// stores requeueAt in whole seconds, so the time is rounded up to one: cut
// down instead, a wait under a second would be no wait at all, and a
// workload whose checks conflict at once would spin through reserve and
// release.
func setRequeue(wl *v1alpha1.Workload, after time.Duration) {
	rs := wl.Status.RequeueState
	if rs == nil {
		rs = &v1alpha1.RequeueState{}
	}
	rs.Count = ptr.To(ptr.Deref(rs.Count, 0) + 1)
	rs.RequeueAt = nil
	if after > 0 {
		rs.RequeueAt = ptr.To(metav1.NewTime(ceilSecond(time.Now().Add(after))))
	}
	wl.Status.RequeueState = rs
}

// ceilSecond rounds t up to a whole second.
func ceilSecond(t time.Time) time.Time {
	down := t.Truncate(time.Second)
	if down.Equal(t) {
		return down
	}
	return down.Add(time.Second)
}

// Reject deactivates the workload (spec.active=false, written first so
// that a crash in between still ends in an eviction: the check phase
// evicts inactive workloads holding quota) and evicts it.
func (w *Writer) Reject(ctx context.Context, orig, updated *v1alpha1.Workload, rejected []string) error {
	msg := fmt.Sprintf("admission check %s rejected the workload: %s", strings.Join(rejected, ", "), CheckMessages(updated, rejected))
	if workload.IsActive(orig) {
		deactivated := orig.DeepCopy()
		deactivated.Spec.Active = ptr.To(false)
		if err := w.patchSpec(ctx, orig, deactivated, "deactivate"); err != nil {
			return err
		}
		w.cfg.Recorder.Eventf(deactivated, nil, "Warning", "AdmissionCheckRejected", "Admit", "%s", msg)
		// The status write below is guarded by the new resourceVersion and
		// carries the rejected checks' answers.
		updated = updated.DeepCopy()
		updated.ObjectMeta = deactivated.ObjectMeta
		updated.Spec = deactivated.Spec
		orig = deactivated
	}
	return w.Evict(ctx, orig, updated, Eviction{Reason: v1alpha1.ReasonAdmissionCheck, Message: msg})
}

// CheckMessages joins what the named checks said.
func CheckMessages(wl *v1alpha1.Workload, names []string) string {
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

// WaitingForChecksMessage lists the checks that are not Ready yet, with
// their reason (such as TLSHandshakeFailed) and what they said.
func WaitingForChecksMessage(wl *v1alpha1.Workload) string {
	var parts []string
	for _, st := range wl.Status.AdmissionChecks {
		if st.State == v1alpha1.CheckStateReady {
			continue
		}
		msg := st.Message
		if msg == "" {
			msg = "no answer yet"
		}
		state := string(st.State)
		if st.Reason != "" {
			state += ", " + st.Reason
		}
		parts = append(parts, fmt.Sprintf("%s (%s: %s)", st.Name, state, msg))
	}
	slices.Sort(parts)
	return "waiting for admission checks: " + strings.Join(parts, "; ")
}

// EvictVersion evicts wl, unchanged since the scheduler handed it out (its
// queue drains, or it is preempted): an admitted workload keeps its quota
// until its pods stop, one still waiting for its checks gives it back at
// once and owes its checks a Release. Either queues again at once. It
// returns ErrMoved when the workload changed meanwhile.
func (w *Writer) EvictVersion(ctx context.Context, wl *v1alpha1.Workload, reason, message string) error {
	unlock := w.cfg.Locks.Lock(workload.Key(wl))
	defer unlock()
	orig, ok := w.unchanged(wl)
	if !ok {
		return ErrMoved
	}
	return w.Evict(ctx, orig, orig, Eviction{Reason: reason, Message: message})
}
