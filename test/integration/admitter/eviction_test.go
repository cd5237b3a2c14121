package admitter

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	sluicev1 "github.com/sluice-dev/sluice/gen/sluice/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/test/fakecheck"
)

func deactivate(ctx context.Context, t *testing.T, ns, name string, active bool) {
	t.Helper()
	wl := &v1alpha1.Workload{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"active":`+map[bool]string{true: "true", false: "false"}[active]+`}}`))
	if err := s.k8s.Patch(ctx, wl, patch); err != nil {
		t.Fatalf("set %s/%s active=%v: %v", ns, name, active, err)
	}
}

func reportStopped(ctx context.Context, t *testing.T, ns, name, reservation string) {
	t.Helper()
	_, err := s.client.ReportProgress(ctx, &admitterv1.ReportProgressRequest{
		Workload: &sluicev1.WorkloadRef{Namespace: ns, Name: name},
		Stopped:  &admitterv1.Stopped{ReservationId: reservation},
	})
	if err != nil {
		t.Fatalf("report %s/%s stopped: %v", ns, name, err)
	}
}

// An admitted workload may have running pods: its eviction is a state that
// keeps the quota until the grouper reports the pods stopped, for that
// very reservation.
func TestEvictionHoldsQuotaUntilPodsStop(t *testing.T) {
	ctx := testContext(t)
	st := newSetup(ctx, t, queueOptions{cpu: "1"})
	w := watchDecisions(t, "")
	submit(ctx, t, st.ns, "running", "1")
	admitted := waitWorkload(ctx, t, st.ns, "running", "admitted", func(wl *v1alpha1.Workload) bool { return isTrue(wl, v1alpha1.WorkloadAdmitted) })
	reservation := admitted.Status.Admission.ReservationID
	submit(ctx, t, st.ns, "next", "1")
	waitWorkload(ctx, t, st.ns, "next", "waiting for quota", func(wl *v1alpha1.Workload) bool {
		c := condition(wl, v1alpha1.WorkloadQuotaReserved)
		return c != nil && c.Reason == v1alpha1.ReasonPending
	})

	deactivate(ctx, t, st.ns, "running", false)
	evicting := waitWorkload(ctx, t, st.ns, "running", "evicting", func(wl *v1alpha1.Workload) bool { return isTrue(wl, v1alpha1.WorkloadEvicted) })
	if evicting.Status.Admission == nil || evicting.Status.Admission.ReservationID != reservation || !isTrue(evicting, v1alpha1.WorkloadQuotaReserved) {
		t.Fatalf("while evicting: admission %+v, QuotaReserved %+v; want the reservation %s still held",
			evicting.Status.Admission, condition(evicting, v1alpha1.WorkloadQuotaReserved), reservation)
	}
	if c := condition(evicting, v1alpha1.WorkloadEvicted); c.Reason != v1alpha1.ReasonInactive {
		t.Fatalf("Evicted = %+v, want reason Inactive", c)
	}
	if d := w.wait(ctx, t, st.ns, "running", admitterv1.Decision_ACTION_EVICT); d.GetReservationId() != reservation {
		t.Fatalf("EVICT decision for reservation %q, want %q", d.GetReservationId(), reservation)
	}

	// A late answer to another eviction must not free this one's quota.
	reportStopped(ctx, t, st.ns, "running", "some-older-reservation")
	if got := getWorkload(ctx, t, st.ns, "running"); got.Status.Admission == nil {
		t.Fatal("a stop report for another reservation released the quota")
	}
	if isTrue(getWorkload(ctx, t, st.ns, "next"), v1alpha1.WorkloadQuotaReserved) {
		t.Fatal("the next workload was reserved while the evicted one's pods may still run: quota double-booked")
	}

	reportStopped(ctx, t, st.ns, "running", reservation)
	released := getWorkload(ctx, t, st.ns, "running")
	if released.Status.Admission != nil || isTrue(released, v1alpha1.WorkloadQuotaReserved) || !isTrue(released, v1alpha1.WorkloadEvicted) {
		t.Fatalf("after the stop: admission %+v, conditions %+v; want the quota released and Evicted kept",
			released.Status.Admission, released.Status.Conditions)
	}
	w.wait(ctx, t, st.ns, "running", admitterv1.Decision_ACTION_FORGET)
	waitWorkload(ctx, t, st.ns, "next", "admitted once the pods stopped", func(wl *v1alpha1.Workload) bool { return isTrue(wl, v1alpha1.WorkloadAdmitted) })
	if isTrue(getWorkload(ctx, t, st.ns, "running"), v1alpha1.WorkloadQuotaReserved) {
		t.Fatal("the inactive workload was reserved again")
	}
}

// A deleted Workload stays, holding its quota and with DELETE in force,
// until its pods are reported stopped; then it goes for good.
func TestDeletedWorkloadGoesOnceItsPodsStop(t *testing.T) {
	ctx := testContext(t)
	st := newSetup(ctx, t, queueOptions{cpu: "1"})
	w := watchDecisions(t, "")
	submit(ctx, t, st.ns, "doomed", "1")
	wl := waitWorkload(ctx, t, st.ns, "doomed", "admitted", func(wl *v1alpha1.Workload) bool { return isTrue(wl, v1alpha1.WorkloadAdmitted) })
	if !slices.Contains(wl.Finalizers, v1alpha1.ResourceInUseFinalizer) {
		t.Fatalf("finalizers = %v, want %s", wl.Finalizers, v1alpha1.ResourceInUseFinalizer)
	}
	submit(ctx, t, st.ns, "after", "1")
	if err := s.k8s.Delete(ctx, wl); err != nil {
		t.Fatalf("delete workload: %v", err)
	}
	w.wait(ctx, t, st.ns, "doomed", admitterv1.Decision_ACTION_DELETE)
	if got := getWorkload(ctx, t, st.ns, "doomed"); got.DeletionTimestamp == nil {
		t.Fatal("the deleted workload is not marked for deletion")
	}
	if isTrue(getWorkload(ctx, t, st.ns, "after"), v1alpha1.WorkloadQuotaReserved) {
		t.Fatal("the next workload was reserved while the deleted one's pods may still run")
	}

	reportStopped(ctx, t, st.ns, "doomed", "")
	waitFor(ctx, t, "the deleted workload gone", func() (bool, string) {
		var got v1alpha1.Workload
		err := s.k8s.Get(ctx, client.ObjectKey{Namespace: st.ns, Name: "doomed"}, &got)
		if err == nil {
			return false, "still there with finalizers " + strings.Join(got.Finalizers, ",")
		}
		return client.IgnoreNotFound(err) == nil, err.Error()
	})
	w.wait(ctx, t, st.ns, "doomed", admitterv1.Decision_ACTION_FORGET)
	waitWorkload(ctx, t, st.ns, "after", "admitted", func(wl *v1alpha1.Workload) bool { return isTrue(wl, v1alpha1.WorkloadAdmitted) })
}

// A Retry without retry_after backs off by the check's retry settings and
// queues at the back, instead of being reserved again at once.
func TestRetryWithoutRetryAfterBacksOff(t *testing.T) {
	ctx := testContext(t)
	fake := fakecheck.StartT(t)
	check := newCheck(ctx, t, fake.Target())
	st := newSetup(ctx, t, queueOptions{cpu: "1", checks: []string{check}})
	fake.SetAnswer(st.ns, "bounce", &checksv1.EvaluateResponse{State: checksv1.State_STATE_RETRY, Message: "try later"})
	submit(ctx, t, st.ns, "bounce", "1")
	evicted := waitWorkload(ctx, t, st.ns, "bounce", "evicted", func(wl *v1alpha1.Workload) bool {
		return isTrue(wl, v1alpha1.WorkloadEvicted) && wl.Status.Admission == nil
	})
	rs := evicted.Status.RequeueState
	if rs == nil || rs.RequeueAt == nil {
		t.Fatalf("requeueState = %s, want a requeue time from the check's backoff", describeRequeue(rs))
	}
	evictedAt := condition(evicted, v1alpha1.WorkloadEvicted).LastTransitionTime.Time
	if !rs.RequeueAt.After(evictedAt.Add(-time.Second)) {
		t.Fatalf("requeueAt %v is not after the eviction at %v", rs.RequeueAt.Time, evictedAt)
	}
	if len(evicted.Status.PendingReleases) != 1 || evicted.Status.PendingReleases[0].Name != check ||
		evicted.Status.PendingReleases[0].Reason != v1alpha1.ReleaseEvicted {
		t.Fatalf("pendingReleases = %+v, want the Release owed to %s in the eviction's write", evicted.Status.PendingReleases, check)
	}
}

// A Release the provider fails is retried until acknowledged.
func TestReleaseRetriedUntilAcknowledged(t *testing.T) {
	ctx := testContext(t)
	fake := fakecheck.StartT(t, fakecheck.WithCapabilities(checksv1.Capability_CAPABILITY_RELEASE))
	check := newCheck(ctx, t, fake.Target())
	st := newSetup(ctx, t, queueOptions{cpu: "1", checks: []string{check}})
	fake.SetReleaseError(codes.Unavailable)
	fake.SetAnswer(st.ns, "owed", &checksv1.EvaluateResponse{State: checksv1.State_STATE_REJECTED, Message: "no"})
	submit(ctx, t, st.ns, "owed", "1")
	wl := waitWorkload(ctx, t, st.ns, "owed", "rejected", func(wl *v1alpha1.Workload) bool {
		return isTrue(wl, v1alpha1.WorkloadEvicted) && wl.Status.Admission == nil
	})
	key := evaluationKey(wl.UID, wl.Status.PendingReleases[0].ReservationID, check)
	attempts := func() int {
		n := 0
		for _, r := range fake.Releases() {
			if r.GetEvaluationKey() == key {
				n++
			}
		}
		return n
	}
	waitFor(ctx, t, "two failed Release attempts", func() (bool, string) { return attempts() >= 2, "" })
	fake.SetReleaseError(codes.OK)
	before := attempts()
	waitFor(ctx, t, "the Release acknowledged", func() (bool, string) { return attempts() > before, "" })
	acknowledged := attempts()
	// Once acknowledged it is not sent again: a later write of the status
	// drops it. Deactivated workloads are not written again on their own,
	// so reactivate it: its next reservation prunes the entry.
	deactivate(ctx, t, st.ns, "owed", true)
	fake.SetAnswer(st.ns, "owed", &checksv1.EvaluateResponse{State: checksv1.State_STATE_READY})
	waitWorkload(ctx, t, st.ns, "owed", "admitted with the release pruned", func(wl *v1alpha1.Workload) bool {
		return isTrue(wl, v1alpha1.WorkloadAdmitted) && len(wl.Status.PendingReleases) == 0
	})
	if n := attempts(); n != acknowledged {
		t.Fatalf("%d Release calls after the acknowledgement, want none", n-acknowledged)
	}
}

// Moving a workload to another LocalQueue releases a reservation taken
// through the old one; the workload queues again in the new queue.
func TestUpdateWorkloadMovesQueue(t *testing.T) {
	ctx := testContext(t)
	fake := fakecheck.StartT(t)
	check := newCheck(ctx, t, fake.Target())
	st := newSetup(ctx, t, queueOptions{cpu: "1", checks: []string{check}})
	resp := submit(ctx, t, st.ns, "mover", "1")
	if resp.GetQueueName() != "lq" {
		t.Fatalf("SubmitWorkload answered queue %q, want lq", resp.GetQueueName())
	}
	waitWorkload(ctx, t, st.ns, "mover", "reserved", func(wl *v1alpha1.Workload) bool { return isTrue(wl, v1alpha1.WorkloadQuotaReserved) })

	if _, err := s.client.UpdateWorkload(ctx, &admitterv1.UpdateWorkloadRequest{
		Workload: &sluicev1.WorkloadRef{Namespace: st.ns, Name: "mover"}, QueueName: "Not_A_Queue",
	}); err == nil || !strings.Contains(err.Error(), "queue_name") {
		t.Fatalf("UpdateWorkload with a bad queue name: %v, want InvalidArgument naming queue_name", err)
	}
	up, err := s.client.UpdateWorkload(ctx, &admitterv1.UpdateWorkloadRequest{
		Workload: &sluicev1.WorkloadRef{Namespace: st.ns, Name: "mover", Uid: resp.GetUid()}, QueueName: "elsewhere",
	})
	if err != nil || !up.GetChanged() {
		t.Fatalf("UpdateWorkload = %v, %v; want changed", up, err)
	}
	moved := waitWorkload(ctx, t, st.ns, "mover", "released and waiting in the new queue", func(wl *v1alpha1.Workload) bool {
		c := condition(wl, v1alpha1.WorkloadQuotaReserved)
		return wl.Status.Admission == nil && c != nil && strings.Contains(c.Message, "elsewhere")
	})
	if moved.Spec.QueueName != "elsewhere" {
		t.Fatalf("spec.queueName = %q, want elsewhere", moved.Spec.QueueName)
	}
	if c := condition(moved, v1alpha1.WorkloadEvicted); c == nil || c.Reason != v1alpha1.ReasonQueueChanged {
		t.Fatalf("Evicted = %+v, want reason QueueChanged", c)
	}
	again, err := s.client.UpdateWorkload(ctx, &admitterv1.UpdateWorkloadRequest{
		Workload: &sluicev1.WorkloadRef{Namespace: st.ns, Name: "mover"}, QueueName: "elsewhere",
	})
	if err != nil || again.GetChanged() {
		t.Fatalf("repeated UpdateWorkload = %v, %v; want unchanged", again, err)
	}
	if again, err := s.client.SubmitWorkload(ctx, &admitterv1.SubmitWorkloadRequest{Workload: &sluicev1.Workload{
		Ref: &sluicev1.WorkloadRef{Namespace: st.ns, Name: "mover"}, QueueName: "lq",
		PodSets: []*sluicev1.PodSet{{Name: "main", Count: 1, Requests: map[string]string{"cpu": "1"}}},
	}}); err != nil || again.GetCreated() || again.GetQueueName() != "elsewhere" {
		t.Fatalf("resubmission = %v, %v; want the existing workload in queue elsewhere", again, err)
	}
}
