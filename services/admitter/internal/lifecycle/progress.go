package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/crashpoint"
	"github.com/sluice-dev/sluice/services/admitter/internal/releases"
	"github.com/sluice-dev/sluice/services/admitter/internal/startup"
	"github.com/sluice-dev/sluice/services/admitter/internal/workload"
)

// Submit creates wl. It returns the Workload as stored and whether this
// call created it; an existing Workload of the same name is success.
// Submissions of one name are serialized, so a burst of them (every pod
// of a group) costs one create, not one attempt each.
func (w *Writer) Submit(ctx context.Context, wl *v1alpha1.Workload) (*v1alpha1.Workload, bool, error) {
	key := workload.Key(wl)
	if cur := w.cfg.Store.Get(key); cur != nil && !waitsForPods(cur) && !pastRun(cur) {
		return cur, false, nil
	}
	unlock := w.cfg.Locks.Lock(key)
	defer unlock()
	if cur := w.cfg.Store.Get(key); cur != nil {
		return w.resubmittedLocked(ctx, cur, wl)
	}
	wl = wl.DeepCopy()
	if err := w.resolvePriority(ctx, wl); err != nil {
		return nil, false, err
	}
	if !slices.Contains(wl.Finalizers, v1alpha1.ResourceInUseFinalizer) {
		wl.Finalizers = append(wl.Finalizers, v1alpha1.ResourceInUseFinalizer)
	}
	err := w.cfg.Client.Create(ctx, wl, client.FieldOwner(FieldOwner))
	if err == nil {
		w.cfg.Metrics.WorkloadWrites.WithLabelValues("create").Inc()
		w.cfg.Observe(wl)
		return wl, true, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return nil, false, fmt.Errorf("create workload %s: %w", key, err)
	}
	existing, err := w.StoredOrRead(ctx, key)
	if err != nil {
		return nil, false, err
	}
	return w.resubmittedLocked(ctx, existing, wl)
}

// ErrPastRun refuses, for now, the submission of a pod group whose name
// still belongs to a Workload that finished (or is being deleted): that
// Workload is deleted, and the submission succeeds once it is gone.
var ErrPastRun = errors.New("the pod group's previous Workload is being replaced")

// pastRun reports whether cur is a pod group's Workload that finished or
// is being deleted: pods submitting under its name are a new run.
func pastRun(cur *v1alpha1.Workload) bool {
	return workload.PodGroup(cur) != "" && (workload.IsFinished(cur) || workload.IsDeleting(cur))
}

// resubmittedLocked answers the submission of a workload that exists:
// the existing one, unless its group's pods are back after a wait (see
// podsBackLocked) or a new run of the group meets the previous run's
// finished Workload, which is deleted to make room.
func (w *Writer) resubmittedLocked(ctx context.Context, cur, submitted *v1alpha1.Workload) (*v1alpha1.Workload, bool, error) {
	switch {
	case pastRun(cur):
		if !workload.IsDeleting(cur) {
			uid := cur.UID
			target := &v1alpha1.Workload{ObjectMeta: metav1.ObjectMeta{Namespace: cur.Namespace, Name: cur.Name}}
			if err := w.cfg.Client.Delete(ctx, target, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return nil, false, fmt.Errorf("delete the finished workload %s/%s of a pod group's previous run: %w", cur.Namespace, cur.Name, err)
			}
			crashpoint.Hit("admitter/delete-past-run")
			w.cfg.Metrics.WorkloadWrites.WithLabelValues("delete-past-run").Inc()
			w.cfg.Recorder.Eventf(cur, nil, "Normal", "Replaced", "Delete",
				"new pods of pod group %s were created after this run finished; the Workload goes so they can queue", workload.PodGroup(cur))
		}
		return nil, false, fmt.Errorf("%w: Workload %s/%s (uid %s) finished or is being deleted; retry once it is gone",
			ErrPastRun, cur.Namespace, cur.Name, cur.UID)
	case waitsForPods(cur):
		return w.podsBackLocked(ctx, cur, submitted)
	}
	return cur, false, nil
}

// ErrPodSetsChanged refuses the submission of a group whose pods came back
// with other pod sets than its Workload's.
var ErrPodSetsChanged = errors.New("the pods' pod sets differ from the Workload's")

// waitsForPods reports whether wl is a pod group's workload that holds no
// quota and waits for its pods (WaitingForReplacementPods=True).
func waitsForPods(wl *v1alpha1.Workload) bool {
	return workload.PodGroup(wl) != "" && wl.Status.Admission == nil && !workload.IsFinished(wl) &&
		meta.IsStatusConditionTrue(wl.Status.Conditions, v1alpha1.WorkloadWaitingForReplacementPods)
}

// podsBackLocked ends the wait of a group whose pods were submitted again
// whole: the workload queues again, with its place, priority and requeue
// state kept. Pods that no longer match its pod sets are refused.
func (w *Writer) podsBackLocked(ctx context.Context, cur, submitted *v1alpha1.Workload) (*v1alpha1.Workload, bool, error) {
	if diff := podSetsDiff(cur.Spec.PodSets, submitted.Spec.PodSets); diff != "" {
		return nil, false, fmt.Errorf("%w: %s; delete Workload %s/%s to queue the group as its pods are now",
			ErrPodSetsChanged, diff, cur.Namespace, cur.Name)
	}
	wl := cur.DeepCopy()
	workload.SetCondition(&wl.Status.Conditions, v1alpha1.WorkloadWaitingForReplacementPods, metav1.ConditionFalse,
		v1alpha1.ReasonAllPodsPresent, "every pod of the group is there again", wl.Generation)
	if err := w.PatchStatus(ctx, cur, wl, "pods-back"); err != nil {
		return nil, false, err
	}
	crashpoint.Hit("admitter/pods-back")
	w.cfg.Requeue()
	return wl, false, nil
}

// podSetsDiff says how the pod sets (name and count) of want and got
// differ; empty when they do not.
func podSetsDiff(want, got []v1alpha1.PodSet) string {
	counts := func(sets []v1alpha1.PodSet) string {
		parts := make([]string, 0, len(sets))
		for _, ps := range sets {
			parts = append(parts, fmt.Sprintf("%s=%d", ps.Name, ps.Count))
		}
		slices.Sort(parts)
		return strings.Join(parts, ", ")
	}
	if w, g := counts(want), counts(got); w != g {
		return fmt.Sprintf("the Workload has pod sets %s, the pods make %s", w, g)
	}
	return ""
}

// UpdateQueue moves a submitted workload to LocalQueue queue. A workload
// holding quota loses it (it was reserved through the old queue) and
// queues again. It reports whether anything changed; an unknown workload,
// or another incarnation of its name (uid), changes nothing.
func (w *Writer) UpdateQueue(ctx context.Context, key types.NamespacedName, uid types.UID, queue string) (bool, error) {
	unlock := w.cfg.Locks.Lock(key)
	defer unlock()
	orig, err := w.current(ctx, key, false)
	if err != nil || orig == nil {
		return false, err
	}
	if (uid != "" && orig.UID != uid) || orig.Spec.QueueName == queue || workload.IsFinished(orig) || workload.IsDeleting(orig) {
		return false, nil
	}
	moved := orig.DeepCopy()
	moved.Spec.QueueName = queue
	if err := w.patchSpec(ctx, orig, moved, "queue-change"); err != nil {
		return false, err
	}
	if moved.Status.Admission != nil && !workload.IsEvicting(moved) {
		ev := Eviction{Reason: v1alpha1.ReasonQueueChanged, Message: fmt.Sprintf("the pods moved from LocalQueue %s to %s", orig.Spec.QueueName, queue)}
		if err := w.Evict(ctx, w.cfg.Store.Get(key), moved, ev); err != nil {
			// The queue changed; the check phase evicts the reservation
			// made through the old queue if this write was lost.
			return true, err
		}
	}
	w.cfg.Requeue()
	return true, nil
}

// Progress is what ReportProgress says of a workload's pods.
type Progress struct {
	// UID, when set, must match the workload's: a report about an older
	// incarnation of the name is ignored.
	UID types.UID
	// Reservation, when set, is the reservation the counted pods were
	// admitted under: counts about another reservation than the workload
	// holds are ignored (see ofOtherRun).
	Reservation string
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
	// Missing, when not nil, counts per pod set the pods a group waits for
	// (failed, not replaced yet).
	Missing map[string]int32
	// NoPods says a pod group has no pod left.
	NoPods bool
	// Started, when not nil, counts the admitted pods that started (see
	// recordStarted).
	Started *startup.Counts
}

// maxReportAttempts bounds the retries of a progress write that lost a
// race with another write of the admitter.
const maxReportAttempts = 5

// ReportProgress records the pods that succeeded (their quota is released),
// ends the workload on a finish (Finished=True, quota released, Releases
// owed), and on a stop releases an evicted workload's quota or lets a
// deleted one go. Reports about unknown (or finished and retired)
// workloads succeed and change nothing.
func (w *Writer) ReportProgress(ctx context.Context, key types.NamespacedName, p Progress) error {
	if p.NoPods {
		return w.noPods(ctx, key, p.UID)
	}
	for attempt := 0; ; attempt++ {
		err := w.reportOnce(ctx, key, p, attempt > 0)
		if !errors.Is(err, ErrStale) || attempt+1 >= maxReportAttempts {
			return err
		}
	}
}

func (w *Writer) reportOnce(ctx context.Context, key types.NamespacedName, p Progress, fresh bool) error {
	unlock := w.cfg.Locks.Lock(key)
	defer unlock()
	orig, err := w.current(ctx, key, fresh)
	if err != nil || orig == nil {
		return err
	}
	if p.UID != "" && orig.UID != p.UID {
		return nil
	}
	wl := orig.DeepCopy()
	otherRun := ofOtherRun(wl, p.Reservation)
	if !otherRun {
		recordSucceeded(wl, p.Succeeded)
		if p.Missing != nil && !workload.IsFinished(wl) {
			recordMissing(wl, p.Missing)
		}
		if p.Started != nil {
			w.recordStarted(wl, *p.Started)
		}
	}
	finishing := p.Finished && !workload.IsFinished(wl) && !otherRun
	if finishing {
		reason, msg := v1alpha1.ReasonFailed, "the workload failed"
		if p.FinishSucceeded {
			reason, msg = v1alpha1.ReasonSucceeded, "every pod succeeded"
		}
		if p.FinishMessage != "" {
			msg = p.FinishMessage
		}
		workload.SetCondition(&wl.Status.Conditions, v1alpha1.WorkloadFinished, metav1.ConditionTrue, reason, msg, wl.Generation)
		releases.Owe(wl, v1alpha1.ReleaseFinished)
	}
	if err := w.PatchStatus(ctx, orig, wl, "progress"); err != nil {
		return err
	}
	switch {
	case finishing:
		crashpoint.Hit("admitter/finish")
	case p.Succeeded != nil || p.Missing != nil || p.Started != nil:
		crashpoint.Hit("admitter/progress")
	}
	if p.Stopped {
		target, err := w.stopTarget(ctx, key)
		if err != nil {
			return err // the grouper reports again
		}
		return w.stoppedLocked(ctx, target, p.StoppedReservation)
	}
	return nil
}

// stopTarget is the version of the workload a stop report acts on: the
// store's, unless the store shows neither a deletion nor an eviction — the
// report answers a decision, and the deletion behind it may have been made
// by another client a moment ago, before the informer brought it. Then the
// API server's. A report acted on against a stale version would be lost:
// the grouper reports a stop once (and again only after an error). Call
// it under the workload's lock.
func (w *Writer) stopTarget(ctx context.Context, key types.NamespacedName) (*v1alpha1.Workload, error) {
	cur := w.cfg.Store.Get(key)
	if cur == nil || workload.IsDeleting(cur) || workload.IsEvicting(cur) {
		return cur, nil
	}
	return w.current(ctx, key, true)
}

// stoppedLocked acts on the grouper's word that no pod of wl runs: an
// eviction in progress for that reservation releases the quota; a deleted
// workload may go once its Releases are done. Call it under the
// workload's lock.
func (w *Writer) stoppedLocked(ctx context.Context, wl *v1alpha1.Workload, reservation string) error {
	switch {
	case wl == nil:
		return nil
	case workload.IsDeleting(wl):
		w.stopped.mark(workload.Key(wl), wl.UID)
		w.deletionQ.Add(workload.Key(wl))
		return nil
	case workload.IsEvicting(wl) && workload.ReservationID(wl) == reservation && !workload.IsFinished(wl):
		c := workload.Condition(wl, v1alpha1.WorkloadEvicted)
		return w.Release(ctx, wl, wl, Eviction{Reason: c.Reason, Message: c.Message, requeued: true, podsStopped: true})
	}
	return nil
}

// noPods acts on the grouper's word that pod group key (of uid) has no
// pod left (see NoPods, which also says when a replacement window ends).
func (w *Writer) noPods(ctx context.Context, key types.NamespacedName, uid types.UID) error {
	_, err := w.NoPods(ctx, key, uid)
	return err
}

// setNoPods marks every pod of the group missing, until they are
// submitted again.
func setNoPods(wl *v1alpha1.Workload) {
	var total int32
	for _, ps := range wl.Spec.PodSets {
		total += ps.Count
	}
	workload.SetCondition(&wl.Status.Conditions, v1alpha1.WorkloadWaitingForReplacementPods, metav1.ConditionTrue,
		v1alpha1.ReasonNoPods, fmt.Sprintf("waiting for the group's %d pods to be created again", total), wl.Generation)
}

// recordMissing sets the WaitingForReplacementPods condition from the
// pods missing per pod set: True naming them while any is, False once none
// is (only when the condition was ever set, so groups that never lose a pod
// cost no write).
func recordMissing(wl *v1alpha1.Workload, missing map[string]int32) {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(missing)) {
		if n := missing[name]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d of pod set %s", n, name))
		}
	}
	if len(parts) > 0 {
		workload.SetCondition(&wl.Status.Conditions, v1alpha1.WorkloadWaitingForReplacementPods, metav1.ConditionTrue,
			v1alpha1.ReasonPodsMissing, "waiting for replacement pods: "+strings.Join(parts, ", "), wl.Generation)
		return
	}
	if workload.Condition(wl, v1alpha1.WorkloadWaitingForReplacementPods) != nil {
		workload.SetCondition(&wl.Status.Conditions, v1alpha1.WorkloadWaitingForReplacementPods, metav1.ConditionFalse,
			v1alpha1.ReasonAllPodsPresent, "every failed pod was replaced", wl.Generation)
	}
}

// ofOtherRun reports whether a report about the pods of reservation
// concerns another run than wl's: wl holds a reservation, and not that
// one. A late report from before an eviction must not count the evicted
// run's pods toward the next one (their successes, their end). A report
// that names no reservation, or comes while wl holds none, is about the
// run at hand.
func ofOtherRun(wl *v1alpha1.Workload, reservation string) bool {
	current := workload.ReservationID(wl)
	return reservation != "" && current != "" && reservation != current
}

// recordSucceeded raises status.reclaimablePods to the reported counts
// (never lowers them; capped at the pod set's count). They are the
// current reservation's: Reserve and Release clear them.
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
