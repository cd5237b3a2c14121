package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/crashpoint"
	"github.com/sluice-dev/sluice/pkg/podset"
	"github.com/sluice-dev/sluice/services/admitter/internal/checks"
	"github.com/sluice-dev/sluice/services/admitter/internal/quota"
	"github.com/sluice-dev/sluice/services/admitter/internal/scheduler"
	"github.com/sluice-dev/sluice/services/admitter/internal/workload"
)

// ErrMoved reports that a workload changed after the scheduler decided
// on it; nothing was written and the next cycle looks again.
var ErrMoved = errors.New("the workload changed after the scheduling decision")

// Reserve writes a reservation in one status patch: status.admission with
// reservation id id, QuotaReserved=True, a Pending entry per check, and
// — when there are no checks — Admitted=True with the merged pod set infos.
// A workload whose flavors contradict its pods holds no quota: it is told
// why and held back for a while instead. The caller picks id
// (workload.NewReservationID) so that a write whose outcome is unknown can
// be recognised once it shows, and written again as the same reservation.
func (w *Writer) Reserve(ctx context.Context, r scheduler.Reservation, id string) error {
	unlock := w.cfg.Locks.Lock(workload.Key(r.Workload))
	defer unlock()
	orig, ok := w.unchanged(r.Workload)
	if !ok {
		return ErrMoved
	}
	wl := orig.DeepCopy()
	now := metav1.Now()
	cq := r.ClusterQueue.Name
	wl.Status.Admission = &v1alpha1.Admission{
		ClusterQueue:      cq,
		ReservationID:     id,
		PodSetAssignments: r.Assignment.PodSets,
	}
	gen := wl.Generation
	workload.SetCondition(&wl.Status.Conditions, v1alpha1.WorkloadQuotaReserved, metav1.ConditionTrue, v1alpha1.ReasonQuotaReserved,
		ReservedMessage(r.ClusterQueue, r.Assignment), gen)
	if c := workload.Condition(wl, v1alpha1.WorkloadEvicted); c != nil && c.Status == metav1.ConditionTrue {
		workload.SetCondition(&wl.Status.Conditions, v1alpha1.WorkloadEvicted, metav1.ConditionFalse, v1alpha1.ReasonQuotaReserved,
			"Quota reserved again after the eviction", gen)
	}
	// A new reservation starts the pods afresh: none of them started, and
	// none succeeded in it yet.
	meta.RemoveStatusCondition(&wl.Status.Conditions, v1alpha1.WorkloadPodsReady)
	wl.Status.ReclaimablePods = nil
	wl.Status.AdmissionChecks = pendingChecks(orig, r.Checks, now)
	wl.Status.PodSetInfos = nil
	admitted := len(r.Checks) == 0
	if admitted {
		infos, err := podset.MergeWorkload(wl, r.Flavors)
		if err != nil {
			return w.refuseConflict(ctx, orig, err)
		}
		wl.Status.PodSetInfos = infos
		workload.SetCondition(&wl.Status.Conditions, v1alpha1.WorkloadAdmitted, metav1.ConditionTrue, v1alpha1.ReasonAdmitted,
			"Admitted in ClusterQueue "+cq, gen)
	} else {
		SetNotAdmitted(wl, v1alpha1.ReasonWaitingForChecks, WaitingForChecksMessage(wl), now.Time)
	}
	if err := w.PatchStatus(ctx, orig, wl, "reserve"); err != nil {
		return err
	}
	if admitted {
		crashpoint.Hit("admitter/admit")
	} else {
		crashpoint.Hit("admitter/reserve")
	}
	w.reserved(wl, cq, admitted)
	return nil
}

// ReservationLanded does what Reserve does after a write that landed, for
// a reservation whose write's answer was lost and that a read shows.
func (w *Writer) ReservationLanded(wl *v1alpha1.Workload) {
	if wl.Status.Admission == nil {
		return
	}
	w.reserved(wl, wl.Status.Admission.ClusterQueue, workload.IsAdmitted(wl))
}

// reserved counts a reservation that landed and tells whoever follows them.
func (w *Writer) reserved(wl *v1alpha1.Workload, cq string, admitted bool) {
	w.cfg.Metrics.CycleReserved.Inc()
	w.messages.forget(workload.Key(wl))
	w.cfg.Reserved(cq, admitted)
}

// pendingChecks is a fresh Pending entry for every check, keeping the
// retry counts of earlier reservations.
func pendingChecks(orig *v1alpha1.Workload, names []string, now metav1.Time) []v1alpha1.AdmissionCheckState {
	if len(names) == 0 {
		return nil
	}
	out := make([]v1alpha1.AdmissionCheckState, 0, len(names))
	for _, name := range names {
		st := v1alpha1.AdmissionCheckState{Name: name, State: v1alpha1.CheckStatePending, LastTransitionTime: now}
		if prev := workload.CheckState(orig, name); prev != nil {
			st.RetryCount = prev.RetryCount
			if prev.State == v1alpha1.CheckStatePending {
				st.LastTransitionTime = prev.LastTransitionTime
			}
		}
		out = append(out, st)
	}
	return out
}

// refuseConflict leaves a workload whose flavors contradict its pods
// waiting, with the conflict in its conditions and a requeue backoff, in
// case a flavor changes.
func (w *Writer) refuseConflict(ctx context.Context, orig *v1alpha1.Workload, cause error) error {
	wl := orig.DeepCopy()
	msg := ConflictMessage(cause)
	gen := wl.Generation
	workload.SetCondition(&wl.Status.Conditions, v1alpha1.WorkloadQuotaReserved, metav1.ConditionFalse, v1alpha1.ReasonPending,
		"cannot start: "+msg, gen)
	SetNotAdmitted(wl, v1alpha1.ReasonPodSetUpdateConflict, msg, time.Now())
	setRequeue(wl, checks.Backoff(&v1alpha1.AdmissionCheck{}, int(RequeueCount(orig))))
	if err := w.PatchStatus(ctx, orig, wl, "conflict"); err != nil {
		return err
	}
	w.cfg.Recorder.Eventf(wl, nil, "Warning", v1alpha1.ReasonPodSetUpdateConflict, "Admit", "not admitted: %s", msg)
	return nil
}

// ConflictMessage says what conflicts, naming the pod set when known.
func ConflictMessage(err error) string {
	var conflict *podset.ConflictError
	if errors.As(err, &conflict) {
		return fmt.Sprintf("pod set %s: %s", conflict.PodSet, conflict.Error())
	}
	return err.Error()
}

// RequeueCount is how many times the workload was requeued.
func RequeueCount(wl *v1alpha1.Workload) int32 {
	if rs := wl.Status.RequeueState; rs != nil && rs.Count != nil {
		return *rs.Count
	}
	return 0
}

// ReservedMessage is the QuotaReserved condition's message: where the
// quota is reserved and, when the queue borrows, what from which cohort.
func ReservedMessage(cq *v1alpha1.ClusterQueue, asg quota.Assignment) string {
	msg := "Quota reserved in ClusterQueue " + cq.Name
	if !asg.Borrowing {
		return msg
	}
	borrowed := quota.Usage{}
	for _, ps := range asg.PodSets {
		for res, q := range ps.Borrowed {
			borrowed.AddQuantity(ps.Flavors[res], res, q)
		}
	}
	var parts []string
	for _, flavor := range slices.Sorted(maps.Keys(borrowed)) {
		for _, res := range slices.Sorted(maps.Keys(borrowed[flavor])) {
			q := borrowed[flavor][res]
			parts = append(parts, fmt.Sprintf("%s %s in flavor %s", q.String(), res, flavor))
		}
	}
	return msg + ", borrowing " + strings.Join(parts, ", ") + " from Cohort " + cq.Spec.CohortName
}
