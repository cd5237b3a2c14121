package admitter

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/test/fakecheck"
)

// watchingCheck starts a fake provider that declares
// CAPABILITY_WATCH_CHANGES, creates its AdmissionCheck, and waits until
// the admitter holds a WatchChanges stream open to it. The stream is open
// before any workload exists, so the re-evaluation every open makes finds
// nothing of the test's workloads, and every Evaluate of them after
// admission comes from what the test does.
func watchingCheck(ctx context.Context, t *testing.T) (*fakecheck.Provider, string) {
	t.Helper()
	fake := fakecheck.StartT(t, fakecheck.WithCapabilities(checksv1.Capability_CAPABILITY_POD_SET_UPDATES,
		checksv1.Capability_CAPABILITY_RELEASE, checksv1.Capability_CAPABILITY_WATCH_CHANGES))
	name := newCheck(ctx, t, fake.Target())
	if err := fake.WaitWatchOpens(ctx, 1); err != nil {
		t.Fatalf("the admitter opened no WatchChanges stream to the provider of %s: %v", name, err)
	}
	return fake, name
}

// readyWithPool is a READY answer that places the pods in pool.
func readyWithPool(pool string) *checksv1.EvaluateResponse {
	return &checksv1.EvaluateResponse{State: checksv1.State_STATE_READY, Reason: "Granted",
		PodSetUpdates: []*checksv1.PodSetUpdate{{Name: "main", Labels: map[string]string{"example.com/pool": pool}}}}
}

func checkStateOf(wl *v1alpha1.Workload, name string) *v1alpha1.AdmissionCheckState {
	for i := range wl.Status.AdmissionChecks {
		if wl.Status.AdmissionChecks[i].Name == name {
			return &wl.Status.AdmissionChecks[i]
		}
	}
	return nil
}

// evictedByCheck says whether wl was evicted for check, naming it and
// what its provider said.
func evictedByCheck(check string, said ...string) func(*v1alpha1.Workload) bool {
	return func(wl *v1alpha1.Workload) bool {
		c := condition(wl, v1alpha1.WorkloadEvicted)
		if c == nil || c.Status != "True" || c.Reason != v1alpha1.ReasonAdmissionCheck || !strings.Contains(c.Message, check) {
			return false
		}
		for _, s := range said {
			if !strings.Contains(c.Message, s) {
				return false
			}
		}
		return true
	}
}

// A provider that pushes the key of an admitted workload, and now answers
// Retry, gets it evicted: Evicted names the check and what it said, the
// quota stays until the pods stop, and the workload is requeued after the
// answer's retry_after with its checks reset and the old reservation
// released.
func TestWatchChangesEvictsAnAdmittedWorkload(t *testing.T) {
	ctx := testContext(t)
	fake, check := watchingCheck(ctx, t)
	st := newSetup(ctx, t, queueOptions{cpu: "1", checks: []string{check}})
	w := watchDecisions(t, "")
	fake.SetAnswer(st.ns, "revoked", readyWithPool("a"))
	submit(ctx, t, st.ns, "revoked", "1")
	adm := waitWorkload(ctx, t, st.ns, "revoked", "admitted", admitted)
	reservation := adm.Status.Admission.ReservationID
	key := evaluationKey(adm.UID, reservation, check)

	fake.SetAnswer(st.ns, "revoked", &checksv1.EvaluateResponse{State: checksv1.State_STATE_RETRY, Reason: "BudgetCut",
		Message: "the team's budget was cut", RetryAfter: durationpb.New(time.Hour)})
	if n := fake.Push(key); n == 0 {
		t.Fatal("no WatchChanges stream open to push on")
	}
	evicting := waitWorkload(ctx, t, st.ns, "revoked", "evicted for its check", evictedByCheck(check, "Retry", "BudgetCut", "the team's budget was cut"))
	if evicting.Status.Admission == nil || evicting.Status.Admission.ReservationID != reservation || isTrue(evicting, v1alpha1.WorkloadAdmitted) {
		t.Fatalf("while evicting: admission %+v, Admitted %+v; want reservation %s held until the pods stop, not admitted",
			evicting.Status.Admission, condition(evicting, v1alpha1.WorkloadAdmitted), reservation)
	}
	if len(evicting.Status.PendingReleases) != 0 {
		t.Fatalf("pendingReleases = %+v before the pods stopped; nothing may be released yet", evicting.Status.PendingReleases)
	}
	if rs := evicting.Status.RequeueState; rs == nil || rs.RequeueAt == nil || rs.RequeueAt.Time.Before(time.Now().Add(50*time.Minute)) {
		t.Fatalf("requeueState = %s, want requeueAt about an hour away (the answer's retry_after)", describeRequeue(rs))
	}
	if d := w.wait(ctx, t, st.ns, "revoked", admitterv1.Decision_ACTION_EVICT); d.GetReservationId() != reservation {
		t.Fatalf("EVICT decision for reservation %q, want %q", d.GetReservationId(), reservation)
	}

	reportStopped(ctx, t, st.ns, "revoked", reservation)
	released := waitWorkload(ctx, t, st.ns, "revoked", "released once its pods stopped", func(wl *v1alpha1.Workload) bool {
		return wl.Status.Admission == nil
	})
	if cs := checkStateOf(released, check); cs == nil || cs.State != v1alpha1.CheckStatePending || len(cs.PodSetUpdates) != 0 {
		t.Fatalf("check state after the release = %+v, want Pending without pod set updates", cs)
	}
	if err := fake.WaitReleased(ctx, key); err != nil {
		t.Fatalf("the old reservation was not released at the provider: %v", err)
	}
	if isTrue(released, v1alpha1.WorkloadQuotaReserved) {
		t.Fatal("reserved again before the answer's retry_after")
	}
}

// A change made while no stream is open is acted on once the stream opens
// again, without any push: every open asks again every evaluation held
// with the provider.
func TestWatchChangesCatchesUpAfterTheStreamWasDown(t *testing.T) {
	ctx := testContext(t)
	fake, check := watchingCheck(ctx, t)
	st := newSetup(ctx, t, queueOptions{cpu: "1", checks: []string{check}})
	fake.SetAnswer(st.ns, "missed", readyWithPool("a"))
	submit(ctx, t, st.ns, "missed", "1")
	waitWorkload(ctx, t, st.ns, "missed", "admitted", admitted)
	opens := fake.WatchOpens()

	fake.SetWatchRefusal(codes.Unavailable)
	fake.DropWatches()
	if err := fake.WaitWatchRefusals(ctx, 1); err != nil {
		t.Fatalf("the admitter did not try to open the stream again: %v", err)
	}
	fake.SetAnswer(st.ns, "missed", &checksv1.EvaluateResponse{State: checksv1.State_STATE_PENDING,
		Reason: "CapacityReclaimed", Message: "the nodes were reclaimed"})
	if got := getWorkload(ctx, t, st.ns, "missed"); !isTrue(got, v1alpha1.WorkloadAdmitted) {
		t.Fatalf("the admission changed while nothing could tell the admitter: %+v", got.Status.Conditions)
	}

	fake.SetWatchRefusal(codes.OK)
	waitWorkload(ctx, t, st.ns, "missed", "evicted after the stream opened again", evictedByCheck(check, "Pending", "CapacityReclaimed"))
	if fake.WatchOpens() <= opens {
		t.Fatalf("WatchChanges streams opened: %d, want more than the %d before the drop", fake.WatchOpens(), opens)
	}
}

// Ready again, even with other pod set updates, changes nothing: no
// write, no eviction, the admission's pod set infos stay.
func TestWatchChangesReadyAgainChangesNothing(t *testing.T) {
	ctx := testContext(t)
	fake, check := watchingCheck(ctx, t)
	st := newSetup(ctx, t, queueOptions{cpu: "1", checks: []string{check}})
	w := watchDecisions(t, "")
	fake.SetAnswer(st.ns, "steady", readyWithPool("a"))
	submit(ctx, t, st.ns, "steady", "1")
	adm := waitWorkload(ctx, t, st.ns, "steady", "admitted", admitted)
	key := evaluationKey(adm.UID, adm.Status.Admission.ReservationID, check)

	fake.SetAnswer(st.ns, "steady", readyWithPool("b"))
	n := fake.EvaluateCount(st.ns, "steady")
	// One workload's checks are looked at one round at a time, and a
	// round takes the pushes that arrived before it: once the second
	// push's Evaluate is seen, the first one's answer was acted on.
	for i := 1; i <= 2; i++ {
		if fake.Push(key) == 0 {
			t.Fatal("no WatchChanges stream open to push on")
		}
		if err := fake.WaitEvaluated(ctx, st.ns, "steady", n+i); err != nil {
			t.Fatalf("the pushed key was not evaluated again: %v", err)
		}
	}
	got := getWorkload(ctx, t, st.ns, "steady")
	if got.ResourceVersion != adm.ResourceVersion {
		t.Fatalf("Ready again wrote the workload: conditions %+v, checks %+v", got.Status.Conditions, got.Status.AdmissionChecks)
	}
	if len(got.Status.PodSetInfos) != 1 || got.Status.PodSetInfos[0].Labels["example.com/pool"] != "a" {
		t.Fatalf("podSetInfos = %+v, want the admission's pool a kept", got.Status.PodSetInfos)
	}
	if n := w.count(st.ns, "steady", admitterv1.Decision_ACTION_EVICT); n != 0 {
		t.Fatalf("%d EVICT decisions for a check that answered Ready again", n)
	}
}

// An answer withdrawn without a push (as if the push were lost while the
// leader changed) is found by the next leader: its first stream open asks
// again every evaluation held with the provider, admitted ones included.
func TestWatchChangesNewLeaderCatchesUp(t *testing.T) {
	ctx := testContext(t)
	fake, check := watchingCheck(ctx, t)
	st := newSetup(ctx, t, queueOptions{cpu: "1", checks: []string{check}})
	fake.SetAnswer(st.ns, "handover", readyWithPool("a"))
	submit(ctx, t, st.ns, "handover", "1")
	waitWorkload(ctx, t, st.ns, "handover", "admitted", admitted)
	opens := fake.WatchOpens()

	fake.SetAnswer(st.ns, "handover", &checksv1.EvaluateResponse{State: checksv1.State_STATE_RETRY,
		Reason: "ApprovalWithdrawn", Message: "the approval was withdrawn"})
	restartAdmitter(t)
	waitWorkload(ctx, t, st.ns, "handover", "evicted by the new leader", evictedByCheck(check, "Retry", "ApprovalWithdrawn"))
	if fake.WatchOpens() <= opens {
		t.Fatalf("WatchChanges streams opened: %d, want the new leader's on top of the %d before", fake.WatchOpens(), opens)
	}
}
