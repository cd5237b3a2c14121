package admitter

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	sluicev1 "github.com/sluice-dev/sluice/gen/sluice/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/test/fakecheck"
)

func TestSubmitWorkloadCreatesOnce(t *testing.T) {
	ctx := testContext(t)
	st := newSetup(ctx, t, queueOptions{cpu: "4"})
	first := submit(ctx, t, st.ns, "w1", "1", func(w *sluicev1.Workload) {
		w.Priority = 7
		w.Traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	})
	if !first.GetCreated() || first.GetUid() == "" {
		t.Fatalf("first submit = %+v, want created with a uid", first)
	}
	wl := getWorkload(ctx, t, st.ns, "w1")
	if string(wl.UID) != first.GetUid() {
		t.Fatalf("uid %s, response said %s", wl.UID, first.GetUid())
	}
	if wl.Spec.QueueName != "lq" || *wl.Spec.Priority != 7 || len(wl.Spec.PodSets) != 1 || wl.Spec.PodSets[0].Template.RoleHash != "abc123" {
		t.Fatalf("spec = %+v", wl.Spec)
	}
	if len(wl.OwnerReferences) != 1 || wl.OwnerReferences[0].Kind != "Pod" || !*wl.OwnerReferences[0].Controller ||
		*wl.OwnerReferences[0].BlockOwnerDeletion {
		t.Fatalf("ownerReferences = %+v, want the pod as controller without blockOwnerDeletion", wl.OwnerReferences)
	}
	if wl.Annotations[podkeys.TraceparentAnnotation] == "" {
		t.Fatalf("traceparent not kept: %v", wl.Annotations)
	}

	again := submit(ctx, t, st.ns, "w1", "1")
	if again.GetCreated() || again.GetUid() != first.GetUid() {
		t.Fatalf("second submit = %+v, want created=false and uid %s", again, first.GetUid())
	}

	_, err := s.client.SubmitWorkload(ctx, &admitterv1.SubmitWorkloadRequest{Workload: &sluicev1.Workload{
		Ref: &sluicev1.WorkloadRef{Namespace: st.ns, Name: "bad"}, QueueName: "lq",
		PodSets: []*sluicev1.PodSet{{Name: "main", Count: 1, Requests: map[string]string{"cpu": "lots"}}},
	}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `pod_sets[0].requests["cpu"]`) {
		t.Fatalf("bad quantity: err = %v, want InvalidArgument naming the field", err)
	}

	// A Workload etcd could not hold once admitted is refused for good,
	// naming the rule and the pod set that carries the most, and not
	// created.
	_, err = s.client.SubmitWorkload(ctx, &admitterv1.SubmitWorkloadRequest{Workload: &sluicev1.Workload{
		Ref: &sluicev1.WorkloadRef{Namespace: st.ns, Name: "huge"}, QueueName: "lq",
		PodSets: []*sluicev1.PodSet{
			{Name: "driver", Count: 1, Requests: map[string]string{"cpu": "1"}, Annotations: map[string]string{"notes": strings.Repeat("d", 600<<10)}},
			{Name: "worker", Count: 1, Requests: map[string]string{"cpu": "1"}, Annotations: map[string]string{"notes": strings.Repeat("w", 500<<10)}},
		},
	}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "workload.pod_sets: the Workload would be") ||
		!strings.Contains(err.Error(), `pod set "driver"`) {
		t.Fatalf("oversized workload: err = %v, want InvalidArgument naming the size rule and pod set driver", err)
	}
	if err := s.k8s.Get(ctx, client.ObjectKey{Namespace: st.ns, Name: "huge"}, &v1alpha1.Workload{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the oversized workload: get = %v, want NotFound", err)
	}
}

func TestQuotaAdmitsWhatFitsAndSaysWhyTheRestWaits(t *testing.T) {
	ctx := testContext(t)
	st := newSetup(ctx, t, queueOptions{cpu: "2"})
	for _, name := range []string{"a", "b", "c"} {
		submit(ctx, t, st.ns, name, "1")
	}
	reserved := 0
	var waiting string
	for _, name := range []string{"a", "b", "c"} {
		wl := waitWorkload(ctx, t, st.ns, name, "decided", func(wl *v1alpha1.Workload) bool {
			c := condition(wl, v1alpha1.WorkloadQuotaReserved)
			return c != nil && (c.Status == metav1.ConditionTrue || c.Reason == v1alpha1.ReasonPending)
		})
		if isTrue(wl, v1alpha1.WorkloadQuotaReserved) {
			reserved++
			if !isTrue(wl, v1alpha1.WorkloadAdmitted) || wl.Status.Admission.ClusterQueue != st.cq {
				t.Fatalf("%s reserved without checks but not admitted in %s: %+v", name, st.cq, wl.Status)
			}
			continue
		}
		waiting = name
		msg := condition(wl, v1alpha1.WorkloadQuotaReserved).Message
		want := "couldn't assign flavors to pod set main: insufficient quota for cpu in flavor " + st.flavor + ", 1 more needed"
		if msg != want {
			t.Fatalf("waiting message = %q, want %q", msg, want)
		}
	}
	if reserved != 2 || waiting != "c" {
		t.Fatalf("reserved %d (waiting %q), want a and b reserved and c waiting", reserved, waiting)
	}
	waitFor(ctx, t, "ClusterQueue status counts", func() (bool, string) {
		var cq v1alpha1.ClusterQueue
		if err := s.k8s.Get(ctx, clientKey(st.cq), &cq); err != nil {
			return false, err.Error()
		}
		ok := cq.Status.PendingWorkloads == 1 && cq.Status.ReservingWorkloads == 2 && cq.Status.AdmittedWorkloads == 2 &&
			len(cq.Status.FlavorsReservation) == 1 && cq.Status.FlavorsReservation[0].Resources[0].Total.String() == "2"
		return ok, stringify(cq.Status)
	})
}

func TestAdmitWithoutChecksStreamsTheFlavorsLabels(t *testing.T) {
	ctx := testContext(t)
	st := newSetup(ctx, t, queueOptions{cpu: "4", nodeLabels: map[string]string{"pool": "blue"}})
	w := watchDecisions(t, "")
	resp := submit(ctx, t, st.ns, "solo", "1")
	wl := waitWorkload(ctx, t, st.ns, "solo", "admitted", func(wl *v1alpha1.Workload) bool {
		return isTrue(wl, v1alpha1.WorkloadAdmitted)
	})
	if !isTrue(wl, v1alpha1.WorkloadQuotaReserved) || wl.Status.Admission.ReservationID == "" ||
		wl.Status.Admission.PodSetAssignments[0].Flavors["cpu"] != st.flavor {
		t.Fatalf("admission = %+v", wl.Status.Admission)
	}
	d := w.wait(ctx, t, st.ns, "solo", admitterv1.Decision_ACTION_ADMIT)
	if d.GetClusterQueue() != st.cq || d.GetWorkload().GetUid() != resp.GetUid() || len(d.GetPodSetInfos()) != 1 {
		t.Fatalf("decision = %v", d)
	}
	info := d.GetPodSetInfos()[0]
	if info.GetName() != "main" || info.GetNodeSelector()["pool"] != "blue" || info.GetLabels()[podkeys.PodSetLabel] != "main" ||
		info.GetAnnotations()[podkeys.WorkloadAnnotation] != "solo" {
		t.Fatalf("pod set info = %v, want the flavor's node label and sluice's keys", info)
	}

	// A new subscriber gets it in its snapshot; one resuming from the
	// revision after it gets nothing more for it.
	snap := watchDecisions(t, "")
	snap.wait(ctx, t, st.ns, "solo", admitterv1.Decision_ACTION_ADMIT)
}

func TestChecksHoldAdmissionUntilReady(t *testing.T) {
	ctx := testContext(t)
	fake := fakecheck.StartT(t)
	check := newCheck(ctx, t, fake.Target())
	st := newSetup(ctx, t, queueOptions{cpu: "4", nodeLabels: map[string]string{"pool": "green"}, checks: []string{check}})
	w := watchDecisions(t, "")
	resp := submit(ctx, t, st.ns, "gated", "1")

	wl := waitWorkload(ctx, t, st.ns, "gated", "reserved and told why it waits", func(wl *v1alpha1.Workload) bool {
		c := condition(wl, v1alpha1.WorkloadAdmitted)
		return isTrue(wl, v1alpha1.WorkloadQuotaReserved) && c != nil && strings.Contains(c.Message, "held by test")
	})
	if isTrue(wl, v1alpha1.WorkloadAdmitted) {
		t.Fatal("admitted while the check is Pending")
	}
	msg := condition(wl, v1alpha1.WorkloadAdmitted).Message
	if !strings.Contains(msg, check) || condition(wl, v1alpha1.WorkloadAdmitted).Reason != v1alpha1.ReasonWaitingForChecks {
		t.Fatalf("Admitted condition = %+v, want it to name %s", condition(wl, v1alpha1.WorkloadAdmitted), check)
	}
	if len(wl.Status.AdmissionChecks) != 1 || wl.Status.AdmissionChecks[0].State != v1alpha1.CheckStatePending {
		t.Fatalf("admissionChecks = %+v", wl.Status.AdmissionChecks)
	}
	wantKey := evaluationKey(types.UID(resp.GetUid()), wl.Status.Admission.ReservationID, check)
	calls := fake.Calls()
	if len(calls) == 0 || calls[0].GetEvaluationKey() != wantKey || calls[0].GetCheckName() != check {
		t.Fatalf("first Evaluate = %v, want key %s", calls, wantKey)
	}
	if ps := calls[0].GetWorkload().GetPodSets()[0]; ps.GetFlavors()["cpu"] != st.flavor || ps.GetNodeSelector()["pool"] != "green" {
		t.Fatalf("Evaluate pod set = %v, want the flavor and its node labels", ps)
	}
	if n := w.count(st.ns, "gated", admitterv1.Decision_ACTION_ADMIT); n != 0 {
		t.Fatalf("%d ADMIT decisions while the check is Pending", n)
	}

	fake.SetAnswer(st.ns, "gated", &checksv1.EvaluateResponse{
		State: checksv1.State_STATE_READY, Reason: "CapacityAvailable", Message: "go",
		PodSetUpdates: []*checksv1.PodSetUpdate{{
			Name:         "main",
			Labels:       map[string]string{"team": "ml"},
			NodeSelector: map[string]string{"zone": "a"},
			Tolerations:  []*checksv1.Toleration{{Key: "gpu", Operator: checksv1.TolerationOperator_TOLERATION_OPERATOR_EXISTS, Effect: checksv1.TaintEffect_TAINT_EFFECT_NO_SCHEDULE}},
		}},
	})
	wl = waitWorkload(ctx, t, st.ns, "gated", "admitted", func(wl *v1alpha1.Workload) bool {
		return isTrue(wl, v1alpha1.WorkloadAdmitted)
	})
	if wl.Status.AdmissionChecks[0].State != v1alpha1.CheckStateReady || len(wl.Status.AdmissionChecks[0].PodSetUpdates) != 1 {
		t.Fatalf("check state = %+v", wl.Status.AdmissionChecks[0])
	}
	if got := wl.Status.Admission.ReservationID; evaluationKey(types.UID(resp.GetUid()), got, check) != wantKey {
		t.Fatalf("reservation changed to %s while waiting", got)
	}
	d := w.wait(ctx, t, st.ns, "gated", admitterv1.Decision_ACTION_ADMIT)
	info := d.GetPodSetInfos()[0]
	if info.GetLabels()["team"] != "ml" || info.GetNodeSelector()["zone"] != "a" || info.GetNodeSelector()["pool"] != "green" ||
		len(info.GetTolerations()) != 1 || info.GetTolerations()[0].GetKey() != "gpu" {
		t.Fatalf("merged pod set info = %v", info)
	}
}

func TestFinishReleasesQuotaForTheNextWorkload(t *testing.T) {
	ctx := testContext(t)
	st := newSetup(ctx, t, queueOptions{cpu: "1"})
	w := watchDecisions(t, "")
	submit(ctx, t, st.ns, "first", "1")
	waitWorkload(ctx, t, st.ns, "first", "admitted", func(wl *v1alpha1.Workload) bool { return isTrue(wl, v1alpha1.WorkloadAdmitted) })
	submit(ctx, t, st.ns, "second", "1")
	waitWorkload(ctx, t, st.ns, "second", "waiting", func(wl *v1alpha1.Workload) bool {
		c := condition(wl, v1alpha1.WorkloadQuotaReserved)
		return c != nil && c.Reason == v1alpha1.ReasonPending && strings.Contains(c.Message, "insufficient quota")
	})

	_, err := s.client.ReportProgress(ctx, &admitterv1.ReportProgressRequest{
		Workload: &sluicev1.WorkloadRef{Namespace: st.ns, Name: "first"},
		Finish:   &admitterv1.Finish{Succeeded: true, Message: "all done"},
	})
	if err != nil {
		t.Fatalf("ReportProgress: %v", err)
	}
	first := waitWorkload(ctx, t, st.ns, "first", "finished", func(wl *v1alpha1.Workload) bool { return isTrue(wl, v1alpha1.WorkloadFinished) })
	if c := condition(first, v1alpha1.WorkloadFinished); c.Reason != v1alpha1.ReasonSucceeded || c.Message != "all done" {
		t.Fatalf("Finished = %+v", c)
	}
	waitWorkload(ctx, t, st.ns, "second", "admitted", func(wl *v1alpha1.Workload) bool { return isTrue(wl, v1alpha1.WorkloadAdmitted) })
	w.wait(ctx, t, st.ns, "first", admitterv1.Decision_ACTION_FORGET)
	w.wait(ctx, t, st.ns, "second", admitterv1.Decision_ACTION_ADMIT)

	// Reporting again changes nothing; reporting an unknown workload succeeds.
	for _, name := range []string{"first", "never-existed"} {
		if _, err := s.client.ReportProgress(ctx, &admitterv1.ReportProgressRequest{
			Workload: &sluicev1.WorkloadRef{Namespace: st.ns, Name: name},
			Finish:   &admitterv1.Finish{Succeeded: false},
		}); err != nil {
			t.Fatalf("repeated ReportProgress for %s: %v", name, err)
		}
	}
	if c := condition(getWorkload(ctx, t, st.ns, "first"), v1alpha1.WorkloadFinished); c.Reason != v1alpha1.ReasonSucceeded {
		t.Fatalf("a repeated finish changed the reason to %s", c.Reason)
	}
}

func TestConflictingCheckUpdatesAreNotAdmitted(t *testing.T) {
	ctx := testContext(t)
	fakeA, fakeB := fakecheck.StartT(t), fakecheck.StartT(t)
	checkA := newCheck(ctx, t, fakeA.Target())
	checkB := newCheck(ctx, t, fakeB.Target())
	st := newSetup(ctx, t, queueOptions{cpu: "4", checks: []string{checkA, checkB}})
	ready := func(team string) *checksv1.EvaluateResponse {
		return &checksv1.EvaluateResponse{State: checksv1.State_STATE_READY, PodSetUpdates: []*checksv1.PodSetUpdate{{
			Name: "main", Labels: map[string]string{"team": team},
		}}}
	}
	fakeA.SetAnswer(st.ns, "clash", ready("red"))
	fakeB.SetAnswer(st.ns, "clash", ready("blue"))
	submit(ctx, t, st.ns, "clash", "1")

	wl := waitWorkload(ctx, t, st.ns, "clash", "in conflict", func(wl *v1alpha1.Workload) bool {
		c := condition(wl, v1alpha1.WorkloadAdmitted)
		return c != nil && c.Reason == v1alpha1.ReasonPodSetUpdateConflict
	})
	if isTrue(wl, v1alpha1.WorkloadAdmitted) {
		t.Fatal("admitted despite conflicting updates")
	}
	// Ready answers are final for their reservation: the conflict gives the
	// reservation up, so the quota is not held by a workload that cannot
	// start, and the checks are asked afresh after a backoff.
	if wl.Status.Admission != nil || wl.Status.RequeueState == nil || wl.Status.RequeueState.RequeueAt == nil {
		t.Fatalf("in conflict: admission %+v, requeueState %s; want the reservation released with a backoff",
			wl.Status.Admission, describeRequeue(wl.Status.RequeueState))
	}
	later := checkA
	if checkB > checkA {
		later = checkB
	}
	msg := condition(wl, v1alpha1.WorkloadAdmitted).Message
	if !strings.Contains(msg, `in admission check "`+later+`"`) || !strings.Contains(msg, "key=team") {
		t.Fatalf("conflict message = %q, want it to name check %s and key team", msg, later)
	}

	waitFor(ctx, t, "a Warning event on the workload", func() (bool, string) {
		var evs eventsv1.EventList
		if err := s.k8s.List(ctx, &evs, client.InNamespace(st.ns)); err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			if e.Regarding.Name == "clash" && e.Type == corev1.EventTypeWarning && e.Reason == v1alpha1.ReasonPodSetUpdateConflict &&
				strings.Contains(e.Note, "key=team") {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events", len(evs.Items))
	})

	// The later check fixes its answer: the workload is admitted.
	fixed := fakeA
	if later == checkB {
		fixed = fakeB
	}
	fixed.SetAnswer(st.ns, "clash", ready(map[bool]string{true: "red", false: "blue"}[later == checkB]))
	waitWorkload(ctx, t, st.ns, "clash", "admitted after the fix", func(wl *v1alpha1.Workload) bool {
		return isTrue(wl, v1alpha1.WorkloadAdmitted)
	})
}

func TestMissingCheckMakesTheQueueInactive(t *testing.T) {
	ctx := testContext(t)
	st := newSetup(ctx, t, queueOptions{cpu: "4"})
	var cq v1alpha1.ClusterQueue
	if err := s.k8s.Get(ctx, clientKey(st.cq), &cq); err != nil {
		t.Fatal(err)
	}
	cq.Spec.AdmissionChecksStrategy = &v1alpha1.AdmissionChecksStrategy{AdmissionChecks: []v1alpha1.AdmissionCheckStrategyRule{{Name: "nowhere"}}}
	if err := s.k8s.Update(ctx, &cq); err != nil {
		t.Fatal(err)
	}
	submit(ctx, t, st.ns, "stuck", "1")
	wl := waitWorkload(ctx, t, st.ns, "stuck", "waiting on the inactive queue", func(wl *v1alpha1.Workload) bool {
		c := condition(wl, v1alpha1.WorkloadQuotaReserved)
		return c != nil && strings.Contains(c.Message, "admission check nowhere doesn't exist")
	})
	if wl.Status.Admission != nil {
		t.Fatalf("an inactive queue reserved quota: %+v", wl.Status.Admission)
	}
	waitFor(ctx, t, "ClusterQueue Active=False", func() (bool, string) {
		var got v1alpha1.ClusterQueue
		if err := s.k8s.Get(ctx, clientKey(st.cq), &got); err != nil {
			return false, err.Error()
		}
		for _, c := range got.Status.Conditions {
			if c.Type == v1alpha1.ClusterQueueActive {
				return c.Status == metav1.ConditionFalse && c.Reason == "AdmissionCheckNotFound", stringify(c)
			}
		}
		return false, "no Active condition"
	})
}

func TestRestartContinuesChecksWithTheSameKey(t *testing.T) {
	ctx := testContext(t)
	fake := fakecheck.StartT(t)
	check := newCheck(ctx, t, fake.Target())
	st := newSetup(ctx, t, queueOptions{cpu: "1", checks: []string{check}})
	submit(ctx, t, st.ns, "survivor", "1")
	before := waitWorkload(ctx, t, st.ns, "survivor", "reserved", func(wl *v1alpha1.Workload) bool {
		return isTrue(wl, v1alpha1.WorkloadQuotaReserved)
	})
	key := evaluationKey(before.UID, before.Status.Admission.ReservationID, check)
	// Another workload waits for the same quota: after the restart it must
	// not be given the quota the survivor holds.
	submit(ctx, t, st.ns, "rival", "1")
	waitWorkload(ctx, t, st.ns, "rival", "waiting", func(wl *v1alpha1.Workload) bool {
		c := condition(wl, v1alpha1.WorkloadQuotaReserved)
		return c != nil && c.Reason == v1alpha1.ReasonPending
	})

	restartAdmitter(t)
	n := fake.EvaluateCount(st.ns, "survivor")
	if err := fake.WaitEvaluated(ctx, st.ns, "survivor", n+1); err != nil {
		t.Fatal(err)
	}
	fake.SetAnswer(st.ns, "survivor", &checksv1.EvaluateResponse{State: checksv1.State_STATE_READY})
	after := waitWorkload(ctx, t, st.ns, "survivor", "admitted", func(wl *v1alpha1.Workload) bool {
		return isTrue(wl, v1alpha1.WorkloadAdmitted)
	})
	if got := evaluationKey(after.UID, after.Status.Admission.ReservationID, check); got != key {
		t.Fatalf("reservation after restart %s, want the same %s", got, key)
	}
	for _, c := range fake.Calls() {
		if c.GetWorkload().GetName() == "survivor" && c.GetEvaluationKey() != key {
			t.Fatalf("Evaluate with key %s, want only %s", c.GetEvaluationKey(), key)
		}
	}
	if rival := getWorkload(ctx, t, st.ns, "rival"); rival.Status.Admission != nil {
		t.Fatalf("rival got quota the survivor holds: %+v", rival.Status.Admission)
	}
	w := watchDecisions(t, "")
	w.wait(ctx, t, st.ns, "survivor", admitterv1.Decision_ACTION_ADMIT)
}

func TestRetryEvictsAndRequeuesWithANewReservation(t *testing.T) {
	ctx := testContext(t)
	fake := fakecheck.StartT(t)
	check := newCheck(ctx, t, fake.Target())
	st := newSetup(ctx, t, queueOptions{cpu: "1", checks: []string{check}})
	// retry_after leaves the test ample time to see the first eviction
	// before the workload is requeued and asks the check again.
	fake.SetAnswer(st.ns, "again", &checksv1.EvaluateResponse{
		State: checksv1.State_STATE_RETRY, Message: "capacity revoked", RetryAfter: durationpb.New(5 * time.Second),
	})
	submit(ctx, t, st.ns, "again", "1")
	evicted := waitWorkload(ctx, t, st.ns, "again", "evicted", func(wl *v1alpha1.Workload) bool {
		return isTrue(wl, v1alpha1.WorkloadEvicted)
	})
	c := condition(evicted, v1alpha1.WorkloadEvicted)
	if c.Reason != v1alpha1.ReasonAdmissionCheck || !strings.Contains(c.Message, check) || !strings.Contains(c.Message, "capacity revoked") {
		t.Fatalf("Evicted = %+v, want reason AdmissionCheck naming the check and its message", c)
	}
	if evicted.Status.Admission != nil || evicted.Status.RequeueState == nil || *evicted.Status.RequeueState.Count != 1 ||
		evicted.Status.RequeueState.RequeueAt == nil {
		t.Fatalf("after eviction: admission %+v requeueState %s", evicted.Status.Admission, describeRequeue(evicted.Status.RequeueState))
	}
	st0 := evicted.Status.AdmissionChecks[0]
	if st0.State != v1alpha1.CheckStatePending || st0.RetryCount == nil || *st0.RetryCount != 1 {
		t.Fatalf("check state after eviction = %+v, want Pending with retryCount 1", st0)
	}
	firstKey := fake.Calls()[0].GetEvaluationKey()
	if err := fake.WaitReleased(ctx, firstKey); err != nil {
		t.Fatal(err)
	}

	// After retry_after the workload is reserved again, with a new key.
	fake.SetAnswer(st.ns, "again", &checksv1.EvaluateResponse{State: checksv1.State_STATE_READY})
	admitted := waitWorkload(ctx, t, st.ns, "again", "admitted again", func(wl *v1alpha1.Workload) bool {
		return isTrue(wl, v1alpha1.WorkloadAdmitted)
	})
	if key := evaluationKey(admitted.UID, admitted.Status.Admission.ReservationID, check); key == firstKey {
		t.Fatalf("the new reservation reuses the evaluation key %s", key)
	}
	// Condition times have second precision.
	reservedAt := condition(admitted, v1alpha1.WorkloadQuotaReserved).LastTransitionTime.Time
	if at := evicted.Status.RequeueState.RequeueAt.Time; reservedAt.Before(at.Add(-time.Second)) {
		t.Fatalf("reserved again at %v, before the requeue time %v", reservedAt, at)
	}
}

func TestRejectedWorkloadIsDeactivated(t *testing.T) {
	ctx := testContext(t)
	fake := fakecheck.StartT(t)
	check := newCheck(ctx, t, fake.Target())
	st := newSetup(ctx, t, queueOptions{cpu: "1", checks: []string{check}})
	fake.SetAnswer(st.ns, "nope", &checksv1.EvaluateResponse{State: checksv1.State_STATE_REJECTED, Message: "over budget"})
	submit(ctx, t, st.ns, "nope", "1")
	wl := waitWorkload(ctx, t, st.ns, "nope", "deactivated and evicted", func(wl *v1alpha1.Workload) bool {
		return wl.Spec.Active != nil && !*wl.Spec.Active && wl.Status.Admission == nil && isTrue(wl, v1alpha1.WorkloadEvicted)
	})
	if msg := condition(wl, v1alpha1.WorkloadEvicted).Message; !strings.Contains(msg, "rejected") || !strings.Contains(msg, "over budget") {
		t.Fatalf("Evicted message %q, want the rejection and the check's message", msg)
	}
	// The quota it held is free: another workload fits.
	submit(ctx, t, st.ns, "next", "1")
	fake.SetAnswer(st.ns, "next", &checksv1.EvaluateResponse{State: checksv1.State_STATE_READY})
	waitWorkload(ctx, t, st.ns, "next", "admitted", func(wl *v1alpha1.Workload) bool { return isTrue(wl, v1alpha1.WorkloadAdmitted) })
	if isTrue(getWorkload(ctx, t, st.ns, "nope"), v1alpha1.WorkloadQuotaReserved) {
		t.Fatal("the rejected workload was reserved again")
	}
}

func TestProviderDownKeepsTheWorkloadPendingAndSaysWhy(t *testing.T) {
	ctx := testContext(t)
	fake := fakecheck.StartT(t)
	check := newCheck(ctx, t, fake.Target())
	st := newSetup(ctx, t, queueOptions{cpu: "1", checks: []string{check}})
	fake.SetError(codes.Unavailable)
	submit(ctx, t, st.ns, "waits", "1")
	wl := waitWorkload(ctx, t, st.ns, "waits", "told the provider is down", func(wl *v1alpha1.Workload) bool {
		c := condition(wl, v1alpha1.WorkloadAdmitted)
		return c != nil && strings.Contains(c.Message, "no answer from the provider (Unavailable)")
	})
	if isTrue(wl, v1alpha1.WorkloadAdmitted) {
		t.Fatal("admitted while the provider is down")
	}
	// Garbage is no answer either.
	fake.SetError(codes.OK)
	fake.SetAnswer(st.ns, "waits", &checksv1.EvaluateResponse{State: checksv1.State_STATE_READY, PodSetUpdates: []*checksv1.PodSetUpdate{{
		Name: "main", Labels: map[string]string{"sluice.dev/owned": "x"},
	}}})
	waitWorkload(ctx, t, st.ns, "waits", "told the answer is invalid", func(wl *v1alpha1.Workload) bool {
		c := condition(wl, v1alpha1.WorkloadAdmitted)
		return c != nil && !isTrue(wl, v1alpha1.WorkloadAdmitted) && strings.Contains(c.Message, "invalid answer from the provider")
	})
}

func describeRequeue(r *v1alpha1.RequeueState) string {
	if r == nil {
		return "nil"
	}
	count := "nil"
	if r.Count != nil {
		count = strconv.Itoa(int(*r.Count))
	}
	return fmt.Sprintf("{count %s, requeueAt %v}", count, r.RequeueAt)
}
