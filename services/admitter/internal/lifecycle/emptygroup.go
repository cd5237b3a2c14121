package lifecycle

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/crashpoint"
	"github.com/sluice-dev/sluice/services/admitter/internal/workload"
)

// DefaultReplacementWindow is how long a pod group holding quota may be
// without pods before its Workload is deleted, in ClusterQueues that do not
// set spec.podGroupReplacementWindow. Long enough for a controller to
// notice its pods are gone and create them again (a deletion, an informer
// event, a create: seconds, even on a busy API server), short enough that
// quota nobody uses comes back while the users waiting for it are still
// watching.
const DefaultReplacementWindow = 30 * time.Second

// NoPods acts on the grouper's word that pod group key (of uid) has no pod
// left, and returns the end of the replacement window it keeps open (zero
// when none is open).
//
//   - A group evicted or deactivated before it finished, or one waiting
//     for its pods without quota, waits for them to be created again
//     (WaitingForReplacementPods=True, reason NoPods).
//   - A group that holds a reservation keeps it for a replacement window
//     (its ClusterQueue's, see windowVerdict): the first report opens it,
//     and a report once it passed — the grouper's fresh confirmation that
//     the group is still empty — deletes the Workload. The deletion then
//     releases the quota once the grouper reports no pod runs.
//   - Any other group is over, and its Workload is deleted at once (as
//     garbage collection deletes a single pod's with its pod).
//
// A finished Workload is retired from the store, so it is read from the API
// server (StoredOrRead).
func (w *Writer) NoPods(ctx context.Context, key types.NamespacedName, uid types.UID) (time.Time, error) {
	unlock := w.cfg.Locks.Lock(key)
	defer unlock()
	orig, err := w.StoredOrRead(ctx, key)
	if apierrors.IsNotFound(err) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, err
	}
	if orig.UID != uid {
		return time.Time{}, nil
	}
	switch {
	case workload.PodGroup(orig) == "" || workload.IsDeleting(orig):
		return time.Time{}, nil
	case workload.IsFinished(orig):
		return time.Time{}, w.deleteEmptyGroup(ctx, orig, "")
	case !workload.IsActive(orig) || workload.IsEvicting(orig) ||
		(orig.Status.Admission == nil && meta.IsStatusConditionTrue(orig.Status.Conditions, v1alpha1.WorkloadWaitingForReplacementPods)):
		wl := orig.DeepCopy()
		setNoPods(wl)
		return time.Time{}, w.PatchStatus(ctx, orig, wl, "no-pods")
	case orig.Status.Admission != nil:
		return w.replacementWindowLocked(ctx, orig)
	}
	return time.Time{}, w.deleteEmptyGroup(ctx, orig, "")
}

// replacementWindowLocked opens, keeps or closes the replacement window of
// orig, a group that holds a reservation and has no pod. Call it under the
// workload's lock.
func (w *Writer) replacementWindowLocked(ctx context.Context, orig *v1alpha1.Workload) (time.Time, error) {
	cq := orig.Status.Admission.ClusterQueue
	window, err := w.cfg.ReplacementWindow(ctx, cq)
	if err != nil {
		return time.Time{}, fmt.Errorf("replacement window of ClusterQueue %s: %w", cq, err)
	}
	verdict, end := windowVerdict(orig, window, time.Now())
	switch verdict {
	case windowOpen:
		return end, nil
	case windowPassed:
		why := fmt.Sprintf("no pod of group %s came back within the replacement window (%s) of ClusterQueue %s; "+
			"the Workload is deleted and its quota given back", workload.PodGroup(orig), window, cq)
		return time.Time{}, w.deleteEmptyGroup(ctx, orig, why)
	}
	wl := orig.DeepCopy()
	openWindow(wl, cq, end.Add(-window), end)
	if err := w.PatchStatus(ctx, orig, wl, "replacement-window"); err != nil {
		return time.Time{}, err
	}
	crashpoint.Hit("admitter/replacement-window")
	return end, nil
}

// verdict is what a no_pods report does to a group holding a reservation.
type verdict int

const (
	// windowOpens: the report opens a window (one status write).
	windowOpens verdict = iota
	// windowOpen: a window is open and has not passed; nothing changes.
	windowOpen
	// windowPassed: the window passed (or is zero); the Workload goes.
	windowPassed
)

// windowVerdict judges a no_pods report at now about wl, a group holding
// a reservation, with a replacement window of window, and returns the
// window's end. The window is open while WaitingForReplacementPods is
// True with reason NoPods: its lastTransitionTime is when it opened. Pods
// that come back change the reason (PodsMissing, or False once all are
// there), so a later report opens a new window. The state is the
// Workload's alone, so a restart of either service, or a report repeated
// or delayed, judges the same.
func windowVerdict(wl *v1alpha1.Workload, window time.Duration, now time.Time) (verdict, time.Time) {
	if c := workload.Condition(wl, v1alpha1.WorkloadWaitingForReplacementPods); c != nil &&
		c.Status == metav1.ConditionTrue && c.Reason == v1alpha1.ReasonNoPods {
		end := c.LastTransitionTime.Add(window)
		if now.Before(end) {
			return windowOpen, end
		}
		return windowPassed, end
	}
	if window <= 0 {
		return windowPassed, now
	}
	// Conditions keep whole seconds: the end is computed from the time as
	// stored, so every later report finds the same one.
	return windowOpens, now.Truncate(time.Second).Add(window)
}

// openWindow marks wl, a group holding a reservation in ClusterQueue cq,
// as having no pod, with a window from start to end. The condition's
// lastTransitionTime is set to start even when the condition was True
// already (PodsMissing): it is what the window counts from.
func openWindow(wl *v1alpha1.Workload, cq string, start, end time.Time) {
	var total int32
	for _, ps := range wl.Spec.PodSets {
		total += ps.Count
	}
	workload.SetCondition(&wl.Status.Conditions, v1alpha1.WorkloadWaitingForReplacementPods, metav1.ConditionTrue,
		v1alpha1.ReasonNoPods, fmt.Sprintf("no pod of the group is left: its %d pods may be created again until %s; "+
			"then the Workload is deleted and its quota in ClusterQueue %s given back",
			total, end.UTC().Format(time.RFC3339), cq), wl.Generation)
	c := meta.FindStatusCondition(wl.Status.Conditions, v1alpha1.WorkloadWaitingForReplacementPods)
	c.LastTransitionTime = metav1.NewTime(start)
}

// deleteEmptyGroup deletes orig, a group with no pods, guarded by its uid;
// why, when set, is told in an event. The deletion's own path (the DELETE
// decision, the grouper's stopped report) releases any quota it holds.
func (w *Writer) deleteEmptyGroup(ctx context.Context, orig *v1alpha1.Workload, why string) error {
	uid := orig.UID
	target := &v1alpha1.Workload{ObjectMeta: metav1.ObjectMeta{Namespace: orig.Namespace, Name: orig.Name}}
	if err := w.cfg.Client.Delete(ctx, target, client.Preconditions{UID: &uid}); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil // gone already, or another incarnation of the name
		}
		return fmt.Errorf("delete workload %s/%s of a group with no pods: %w", orig.Namespace, orig.Name, err)
	}
	crashpoint.Hit("admitter/delete-empty-group")
	w.cfg.Metrics.WorkloadWrites.WithLabelValues("delete-empty-group").Inc()
	if why != "" {
		w.cfg.Recorder.Eventf(orig, nil, "Normal", v1alpha1.ReasonNoPods, "Delete", "%s", why)
	}
	ctrl.LoggerFrom(ctx).V(1).Info("deleted the workload of a pod group with no pods",
		"workload", orig.Namespace+"/"+orig.Name, "afterWindow", why != "")
	return nil
}
