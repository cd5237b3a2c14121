package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/services/admitter/internal/workload"
)

// ErrNotLeader is returned by calls made to an admitter that does not lead.
var ErrNotLeader = errors.New("this admitter is not the leader")

// evict releases wl's reservation in one status write: admission and pod
// set infos cleared, QuotaReserved=False, Admitted=False and Evicted=True
// with reason and message, every non-Pending check reset to Pending (a
// Retry counts in its retryCount), and, when requeueAfter is set, the
// workload held back that long. updated carries the check answers that
// led here; orig is the stored version the write is guarded by. The
// checks are then told to release the reservation.
func (a *Admitter) evict(ctx context.Context, orig, updated *v1alpha1.Workload, reason, message string, requeueAfter time.Duration) error {
	wl := updated.DeepCopy()
	now := metav1.Now()
	gen := wl.Generation
	wl.Status.Admission = nil
	wl.Status.PodSetInfos = nil
	workload.SetCondition(&wl.Status.Conditions, v1alpha1.WorkloadQuotaReserved, metav1.ConditionFalse, v1alpha1.ReasonPending,
		"waiting for quota again after an eviction: "+message, gen)
	workload.SetCondition(&wl.Status.Conditions, v1alpha1.WorkloadAdmitted, metav1.ConditionFalse, reason, message, gen)
	workload.SetCondition(&wl.Status.Conditions, v1alpha1.WorkloadEvicted, metav1.ConditionTrue, reason, message, gen)
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
	if reason == v1alpha1.ReasonAdmissionCheck {
		rs := wl.Status.RequeueState
		if rs == nil {
			rs = &v1alpha1.RequeueState{}
		}
		rs.Count = ptr.To(ptr.Deref(rs.Count, 0) + 1)
		rs.RequeueAt = nil
		if requeueAfter > 0 {
			rs.RequeueAt = ptr.To(metav1.NewTime(now.Add(requeueAfter)))
		}
		wl.Status.RequeueState = rs
	}
	if err := a.patchStatus(ctx, orig, wl, "evict"); err != nil {
		return err
	}
	a.progress.forget(workload.Key(wl))
	a.releaseChecks(orig, releaseEvicted)
	a.cfg.Recorder.Eventf(wl, nil, "Normal", "Evicted", "Evict", "evicted from ClusterQueue %s: %s", orig.Status.Admission.ClusterQueue, message)
	a.triggerCycle()
	return nil
}

// reject deactivates wl (spec.active=false, written first so that a crash
// in between still ends in an eviction) and evicts it.
func (a *Admitter) reject(ctx context.Context, orig, updated *v1alpha1.Workload, rejected []string) error {
	msg := fmt.Sprintf("admission check %s rejected the workload: %s", strings.Join(rejected, ", "), checkMessages(updated, rejected))
	if workload.IsActive(orig) {
		deactivated := orig.DeepCopy()
		deactivated.Spec.Active = ptr.To(false)
		patch := client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})
		if err := a.cfg.Client.Patch(ctx, deactivated, patch, client.FieldOwner(FieldOwner)); err != nil {
			if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				return ErrStale
			}
			return fmt.Errorf("deactivate workload %s/%s: %w", orig.Namespace, orig.Name, err)
		}
		a.cfg.Metrics.WorkloadWrites.WithLabelValues("deactivate").Inc()
		a.cfg.Recorder.Eventf(deactivated, nil, "Warning", "AdmissionCheckRejected", "Admit", "%s", msg)
		a.store.upsert(deactivated)
		// The status write below is guarded by the new resourceVersion and
		// carries the rejected checks' answers.
		updated = updated.DeepCopy()
		updated.ObjectMeta = deactivated.ObjectMeta
		updated.Spec = deactivated.Spec
		orig = deactivated
	}
	return a.evict(ctx, orig, updated, v1alpha1.ReasonAdmissionCheck, msg, 0)
}

// Submit creates wl. It returns the uid of the Workload and whether this
// call created it; an existing Workload of the same name is success.
func (a *Admitter) Submit(ctx context.Context, wl *v1alpha1.Workload) (types.UID, bool, error) {
	if !a.leading.Load() {
		return "", false, ErrNotLeader
	}
	key := workload.Key(wl)
	if cur := a.store.get(key); cur != nil {
		return cur.UID, false, nil
	}
	err := a.cfg.Client.Create(ctx, wl, client.FieldOwner(FieldOwner))
	if err == nil {
		a.cfg.Metrics.WorkloadWrites.WithLabelValues("create").Inc()
		a.record(wl)
		return wl.UID, true, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return "", false, fmt.Errorf("create workload %s: %w", key, err)
	}
	if cur := a.store.get(key); cur != nil {
		return cur.UID, false, nil
	}
	var existing v1alpha1.Workload
	if err := a.cfg.APIReader.Get(ctx, key, &existing); err != nil {
		return "", false, fmt.Errorf("read existing workload %s: %w", key, err)
	}
	return existing.UID, false, nil
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
}

// maxReportAttempts bounds the retries of a progress write that lost a
// race with another write of the admitter.
const maxReportAttempts = 5

// ReportProgress records the pods that succeeded (their quota is released)
// and, with a finish, ends the workload: Finished=True, quota released,
// FORGET streamed, checks released. Reports about unknown workloads
// succeed and change nothing: the workload is gone with its pods.
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
	orig := a.store.get(key)
	if orig == nil || fresh {
		var live v1alpha1.Workload
		if err := a.cfg.APIReader.Get(ctx, key, &live); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("read workload %s: %w", key, err)
		}
		a.store.upsert(&live)
		orig = a.store.get(key)
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
	}
	if err := a.patchStatus(ctx, orig, wl, "progress"); err != nil {
		return err
	}
	if finishing {
		a.progress.forget(key)
		if orig.Status.Admission != nil {
			a.releaseChecks(orig, releaseFinished)
		}
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
