package admitter

import (
	"context"
	"fmt"
	"testing"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	sluicev1 "github.com/sluice-dev/sluice/gen/sluice/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

// twoPods makes a submission's only pod set two pods.
func twoPods(wl *sluicev1.Workload) { wl.PodSets[0].Count = 2 }

func reportSucceeded(ctx context.Context, t *testing.T, wl *v1alpha1.Workload, reservation string, n int32) {
	t.Helper()
	_, err := s.client.ReportProgress(ctx, &admitterv1.ReportProgressRequest{
		Workload:      &sluicev1.WorkloadRef{Namespace: wl.Namespace, Name: wl.Name, Uid: string(wl.UID)},
		ReservationId: reservation,
		SucceededPods: map[string]int32{"main": n},
	})
	if err != nil {
		t.Fatalf("report %d pods of %s/%s succeeded: %v", n, wl.Namespace, wl.Name, err)
	}
}

func reclaimable(wl *v1alpha1.Workload) string { return fmt.Sprint(wl.Status.ReclaimablePods) }

// A run's history stays with its run: the pods that succeeded under one
// reservation release their quota in it, and count for nothing once it
// ends. The group evicted after one of its two pods succeeded is booked
// whole when admitted again, and a late report about the evicted run's
// pods changes nothing in the new one.
func TestRunHistoryStaysWithItsRun(t *testing.T) {
	ctx := testContext(t)
	st := newSetup(ctx, t, queueOptions{cpu: "2"})
	submit(ctx, t, st.ns, "history", "1", asGroup, twoPods)
	first := waitWorkload(ctx, t, st.ns, "history", "admitted", func(wl *v1alpha1.Workload) bool { return isTrue(wl, v1alpha1.WorkloadAdmitted) })
	r1 := first.Status.Admission.ReservationID

	reportSucceeded(ctx, t, first, r1, 1)
	waitWorkload(ctx, t, st.ns, "history", "one pod reclaimable", func(wl *v1alpha1.Workload) bool {
		return len(wl.Status.ReclaimablePods) == 1 && wl.Status.ReclaimablePods[0].Count == 1
	})

	// Evicted; its pods stop; the reservation ends.
	deactivate(ctx, t, st.ns, "history", false)
	waitWorkload(ctx, t, st.ns, "history", "evicting", func(wl *v1alpha1.Workload) bool { return isTrue(wl, v1alpha1.WorkloadEvicted) })
	deactivate(ctx, t, st.ns, "history", true)
	reportStopped(ctx, t, st.ns, "history", r1)
	released := getWorkload(ctx, t, st.ns, "history")
	if released.Status.Admission != nil || len(released.Status.ReclaimablePods) != 0 {
		t.Fatalf("after the stop: admission %+v, reclaimable pods %s; want both gone with the reservation",
			released.Status.Admission, reclaimable(released))
	}

	// Its pods come back whole and it is admitted again: booked whole.
	submit(ctx, t, st.ns, "history", "1", asGroup, twoPods)
	second := waitWorkload(ctx, t, st.ns, "history", "admitted again", func(wl *v1alpha1.Workload) bool {
		return isTrue(wl, v1alpha1.WorkloadAdmitted) && wl.Status.Admission.ReservationID != r1
	})
	r2 := second.Status.Admission.ReservationID
	if len(second.Status.ReclaimablePods) != 0 {
		t.Fatalf("admitted again with reclaimable pods %s; want none: the new run books every pod", reclaimable(second))
	}

	// A late report about the evicted run's pods: nothing changes.
	reportSucceeded(ctx, t, second, r1, 2)
	_, err := s.client.ReportProgress(ctx, &admitterv1.ReportProgressRequest{
		Workload:      &sluicev1.WorkloadRef{Namespace: st.ns, Name: "history", Uid: string(second.UID)},
		ReservationId: r1,
		Finish:        &admitterv1.Finish{Succeeded: true, Message: "the evicted run's pods all succeeded"},
	})
	if err != nil {
		t.Fatalf("late finish report: %v", err)
	}
	late := getWorkload(ctx, t, st.ns, "history")
	if len(late.Status.ReclaimablePods) != 0 || isTrue(late, v1alpha1.WorkloadFinished) || late.Status.Admission == nil {
		t.Fatalf("after reports about reservation %s: reclaimable %s, finished %v, admission %+v; want reservation %s untouched",
			r1, reclaimable(late), isTrue(late, v1alpha1.WorkloadFinished), late.Status.Admission, r2)
	}

	// A report about the run at hand counts.
	reportSucceeded(ctx, t, second, r2, 1)
	waitWorkload(ctx, t, st.ns, "history", "the new run's pod reclaimable", func(wl *v1alpha1.Workload) bool {
		return len(wl.Status.ReclaimablePods) == 1 && wl.Status.ReclaimablePods[0].Count == 1
	})
}
