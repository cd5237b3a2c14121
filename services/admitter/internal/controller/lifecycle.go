package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/crashpoint"
	"github.com/sluice-dev/sluice/services/admitter/internal/workload"
)

// ErrNotLeader is returned by calls made to an admitter that does not lead.
var ErrNotLeader = errors.New("this admitter is not the leader")

// eviction is why a workload loses its reservation.
type eviction struct {
	reason, message string
	// requeueAfter holds the workload back that long once its quota is
	// released (and puts it at the back of its priority); zero requeues it
	// at once, in its old place.
	requeueAfter time.Duration
	// requeued: the eviction's first write already recorded the requeue.
	requeued bool
}

// evict takes wl's reservation away. A workload that was never admitted
// has only gated pods, so its quota is released in the same write. An
// admitted one may have running pods: the first write only says Evicted
// (the decision in force becomes EVICT) and the quota stays reserved until
// the grouper reports the pods stopped (see stopped). updated carries the
// check answers that led here; orig is the stored version the write is
// guarded by.
func (a *Admitter) evict(ctx context.Context, orig, updated *v1alpha1.Workload, ev eviction) error {
	if !isAdmitted(orig) {
		return a.release(ctx, orig, updated, ev)
	}
	wl := updated.DeepCopy()
	gen := wl.Generation
	cq := wl.Status.Admission.ClusterQueue
	wl.Status.PodSetInfos = nil
	workload.SetCondition(&wl.Status.Conditions, v1alpha1.WorkloadEvicted, metav1.ConditionTrue, ev.reason, ev.message, gen)
	workload.SetCondition(&wl.Status.Conditions, v1alpha1.WorkloadAdmitted, metav1.ConditionFalse, ev.reason, ev.message, gen)
	workload.SetCondition(&wl.Status.Conditions, v1alpha1.WorkloadQuotaReserved, metav1.ConditionTrue, v1alpha1.ReasonEvicting,
		"Quota held in ClusterQueue "+cq+" until the evicted pods stop", gen)
	setRequeue(wl, ev.requeueAfter)
	if err := a.patchStatus(ctx, orig, wl, "evict"); err != nil {
		return err
	}
	crashpoint.Hit("admitter/evict")
	a.progress.forget(workload.Key(wl))
	a.cfg.Recorder.Eventf(wl, nil, "Normal", "Evicting", "Evict", "evicting from ClusterQueue %s: %s", cq, ev.message)
	return nil
}

// release gives wl's reservation up in one status write: admission and pod
// set infos cleared, QuotaReserved=False, Admitted=False and Evicted=True,
// every non-Pending check reset to Pending (a Retry counts in its
// retryCount), a Release owed to every check, and the requeue time set.
func (a *Admitter) release(ctx context.Context, orig, updated *v1alpha1.Workload, ev eviction) error {
	wl := updated.DeepCopy()
	now := metav1.Now()
	gen := wl.Generation
	cq := wl.Status.Admission.ClusterQueue
	owe(wl, v1alpha1.ReleaseEvicted)
	wl.Status.Admission = nil
	wl.Status.PodSetInfos = nil
	workload.SetCondition(&wl.Status.Conditions, v1alpha1.WorkloadQuotaReserved, metav1.ConditionFalse, v1alpha1.ReasonPending,
		"waiting for quota again after an eviction: "+ev.message, gen)
	workload.SetCondition(&wl.Status.Conditions, v1alpha1.WorkloadAdmitted, metav1.ConditionFalse, ev.reason, ev.message, gen)
	workload.SetCondition(&wl.Status.Conditions, v1alpha1.WorkloadEvicted, metav1.ConditionTrue, ev.reason, ev.message, gen)
	resetChecks(wl, now)
	if !ev.requeued {
		setRequeue(wl, ev.requeueAfter)
	}
	if err := a.patchStatus(ctx, orig, wl, "release"); err != nil {
		return err
	}
	crashpoint.Hit("admitter/release")
	a.progress.forget(workload.Key(wl))
	a.cfg.Recorder.Eventf(wl, nil, "Normal", "Evicted", "Evict", "evicted from ClusterQueue %s: %s", cq, ev.message)
	a.triggerCycle()
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
// until then; the requeue time is also its new place in line.
func setRequeue(wl *v1alpha1.Workload, after time.Duration) {
	rs := wl.Status.RequeueState
	if rs == nil {
		rs = &v1alpha1.RequeueState{}
	}
	rs.Count = ptr.To(ptr.Deref(rs.Count, 0) + 1)
	rs.RequeueAt = nil
	if after > 0 {
		rs.RequeueAt = ptr.To(metav1.NewTime(time.Now().Add(after)))
	}
	wl.Status.RequeueState = rs
}

// reject deactivates wl (spec.active=false, written first so that a crash
// in between still ends in an eviction) and evicts it.
func (a *Admitter) reject(ctx context.Context, orig, updated *v1alpha1.Workload, rejected []string) error {
	msg := fmt.Sprintf("admission check %s rejected the workload: %s", strings.Join(rejected, ", "), checkMessages(updated, rejected))
	if workload.IsActive(orig) {
		deactivated := orig.DeepCopy()
		deactivated.Spec.Active = ptr.To(false)
		if err := a.patchSpec(ctx, orig, deactivated, "deactivate"); err != nil {
			return err
		}
		a.cfg.Recorder.Eventf(deactivated, nil, "Warning", "AdmissionCheckRejected", "Admit", "%s", msg)
		// The status write below is guarded by the new resourceVersion and
		// carries the rejected checks' answers.
		updated = updated.DeepCopy()
		updated.ObjectMeta = deactivated.ObjectMeta
		updated.Spec = deactivated.Spec
		orig = deactivated
	}
	return a.evict(ctx, orig, updated, eviction{reason: v1alpha1.ReasonAdmissionCheck, message: msg})
}

// patchSpec writes wl's metadata and spec as a merge patch from orig,
// guarded by orig's resourceVersion, and records the answer.
func (a *Admitter) patchSpec(ctx context.Context, orig, wl *v1alpha1.Workload, op string) error {
	patch := client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})
	if err := a.cfg.Client.Patch(ctx, wl, patch, client.FieldOwner(FieldOwner)); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return ErrStale
		}
		return fmt.Errorf("%s: patch workload %s/%s: %w", op, orig.Namespace, orig.Name, err)
	}
	a.cfg.Metrics.WorkloadWrites.WithLabelValues(op).Inc()
	a.record(wl)
	return nil
}

// Submit creates wl. It returns the Workload as stored and whether this
// call created it; an existing Workload of the same name is success.
func (a *Admitter) Submit(ctx context.Context, wl *v1alpha1.Workload) (*v1alpha1.Workload, bool, error) {
	if !a.leading.Load() {
		return nil, false, ErrNotLeader
	}
	key := workload.Key(wl)
	if cur := a.store.get(key); cur != nil {
		return cur, false, nil
	}
	wl = wl.DeepCopy()
	if !slices.Contains(wl.Finalizers, v1alpha1.ResourceInUseFinalizer) {
		wl.Finalizers = append(wl.Finalizers, v1alpha1.ResourceInUseFinalizer)
	}
	err := a.cfg.Client.Create(ctx, wl, client.FieldOwner(FieldOwner))
	if err == nil {
		a.cfg.Metrics.WorkloadWrites.WithLabelValues("create").Inc()
		a.record(wl)
		return wl, true, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return nil, false, fmt.Errorf("create workload %s: %w", key, err)
	}
	if cur := a.store.get(key); cur != nil {
		return cur, false, nil
	}
	var existing v1alpha1.Workload
	if err := a.cfg.APIReader.Get(ctx, key, &existing); err != nil {
		return nil, false, fmt.Errorf("read existing workload %s: %w", key, err)
	}
	return &existing, false, nil
}

// UpdateQueue moves a submitted workload to LocalQueue queue. A workload
// holding quota loses it (it was reserved through the old queue) and
// queues again. It reports whether anything changed; an unknown workload,
// or another incarnation of its name (uid), changes nothing.
func (a *Admitter) UpdateQueue(ctx context.Context, key types.NamespacedName, uid types.UID, queue string) (bool, error) {
	if !a.leading.Load() {
		return false, ErrNotLeader
	}
	unlock := a.locks.lock(key)
	defer unlock()
	orig, err := a.current(ctx, key, false)
	if err != nil || orig == nil {
		return false, err
	}
	if (uid != "" && orig.UID != uid) || orig.Spec.QueueName == queue || isFinished(orig) || isDeleting(orig) {
		return false, nil
	}
	moved := orig.DeepCopy()
	moved.Spec.QueueName = queue
	if err := a.patchSpec(ctx, orig, moved, "queue-change"); err != nil {
		return false, err
	}
	if moved.Status.Admission != nil && !isEvicting(moved) {
		ev := eviction{reason: v1alpha1.ReasonQueueChanged, message: fmt.Sprintf("the pods moved from LocalQueue %s to %s", orig.Spec.QueueName, queue)}
		if err := a.evict(ctx, a.store.get(key), moved, ev); err != nil {
			// The queue changed; the check worker evicts the reservation
			// made through the old queue if this write was lost.
			return true, err
		}
	}
	a.triggerCycle()
	return true, nil
}

// current is the store's version of the workload, or the API server's
// when fresh is set or the store does not know it; nil when it is gone.
func (a *Admitter) current(ctx context.Context, key types.NamespacedName, fresh bool) (*v1alpha1.Workload, error) {
	if cur := a.store.get(key); cur != nil && !fresh {
		return cur, nil
	}
	var live v1alpha1.Workload
	if err := a.cfg.APIReader.Get(ctx, key, &live); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("read workload %s: %w", key, err)
	}
	a.store.upsert(&live)
	return a.store.get(key), nil
}

// Progress is what ReportProgress says of a workload's pods.
type Progress struct {
	// UID, when set, must match the workload's: a report about an older
	// incarnation of the name is ignored.
	UID types.UID
	// Succeeded counts, per pod set, the pods that succeeded.
	Succeeded map[string]int32
	// Finished ends the workload; Succeeded says how, Message why.
	Finished        bool
	FinishSucceeded bool
	FinishMessage   string
	// Stopped says no pod of the workload runs any more, in answer to the
	// eviction of reservation StoppedReservation (empty for a deletion).
	Stopped            bool
	StoppedReservation string
}

// maxReportAttempts bounds the retries of a progress write that lost a
// race with another write of the admitter.
const maxReportAttempts = 5

// ReportProgress records the pods that succeeded (their quota is released),
// ends the workload on a finish (Finished=True, quota released, Releases
// owed), and on a stop releases an evicted workload's quota or lets a
// deleted one go. Reports about unknown workloads succeed and change
// nothing: the workload is gone with its pods.
func (a *Admitter) ReportProgress(ctx context.Context, key types.NamespacedName, p Progress) error {
	if !a.leading.Load() {
		return ErrNotLeader
	}
	for attempt := 0; ; attempt++ {
		err := a.reportOnce(ctx, key, p, attempt > 0)
		if !errors.Is(err, ErrStale) || attempt+1 >= maxReportAttempts {
			return err
		}
	}
}

func (a *Admitter) reportOnce(ctx context.Context, key types.NamespacedName, p Progress, fresh bool) error {
	unlock := a.locks.lock(key)
	defer unlock()
	orig, err := a.current(ctx, key, fresh)
	if err != nil || orig == nil {
		return err
	}
	if p.UID != "" && orig.UID != p.UID {
		return nil
	}
	wl := orig.DeepCopy()
	recordSucceeded(wl, p.Succeeded)
	finishing := p.Finished && !isFinished(wl)
	if finishing {
		reason, msg := v1alpha1.ReasonFailed, "the workload failed"
		if p.FinishSucceeded {
			reason, msg = v1alpha1.ReasonSucceeded, "every pod succeeded"
		}
		if p.FinishMessage != "" {
			msg = p.FinishMessage
		}
		workload.SetCondition(&wl.Status.Conditions, v1alpha1.WorkloadFinished, metav1.ConditionTrue, reason, msg, wl.Generation)
		owe(wl, v1alpha1.ReleaseFinished)
	}
	if err := a.patchStatus(ctx, orig, wl, "progress"); err != nil {
		return err
	}
	if finishing {
		crashpoint.Hit("admitter/finish")
		a.progress.forget(key)
	}
	if p.Stopped {
		return a.stopped(ctx, a.store.get(key), p.StoppedReservation)
	}
	return nil
}

// stopped acts on the grouper's word that no pod of wl runs: an eviction
// in progress for that reservation releases the quota; a deleted workload
// may go once its Releases are done. Call it under the workload's lock.
func (a *Admitter) stopped(ctx context.Context, wl *v1alpha1.Workload, reservation string) error {
	switch {
	case wl == nil:
		return nil
	case isDeleting(wl):
		a.deletions.markStopped(workload.Key(wl), wl.UID)
		a.deletionQ.Add(workload.Key(wl))
		return nil
	case isEvicting(wl) && reservationID(wl) == reservation && !isFinished(wl):
		c := workload.Condition(wl, v1alpha1.WorkloadEvicted)
		return a.release(ctx, wl, wl, eviction{reason: c.Reason, message: c.Message, requeued: true})
	}
	return nil
}

// recordSucceeded raises status.reclaimablePods to the reported counts
// (never lowers them; capped at the pod set's count).
func recordSucceeded(wl *v1alpha1.Workload, succeeded map[string]int32) {
	for _, ps := range wl.Spec.PodSets {
		n, ok := succeeded[ps.Name]
		if !ok || n <= 0 {
			continue
		}
		n = min(n, ps.Count)
		found := false
		for i := range wl.Status.ReclaimablePods {
			r := &wl.Status.ReclaimablePods[i]
			if r.Name == ps.Name {
				found = true
				r.Count = max(r.Count, n)
			}
		}
		if !found {
			wl.Status.ReclaimablePods = append(wl.Status.ReclaimablePods, v1alpha1.ReclaimablePod{Name: ps.Name, Count: n})
		}
	}
}
