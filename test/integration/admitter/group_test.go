package admitter

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	sluicev1 "github.com/sluice-dev/sluice/gen/sluice/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

// asGroup makes a submission a pod group's: no owners, the group's name.
func asGroup(wl *sluicev1.Workload) {
	wl.Owners, wl.PodGroup = nil, wl.GetRef().GetName()
}

func reportNoPods(ctx context.Context, t *testing.T, wl *v1alpha1.Workload) {
	t.Helper()
	_, err := s.client.ReportProgress(ctx, &admitterv1.ReportProgressRequest{
		Workload: &sluicev1.WorkloadRef{Namespace: wl.Namespace, Name: wl.Name, Uid: string(wl.UID)},
		NoPods:   true,
	})
	if err != nil {
		t.Fatalf("report %s/%s has no pods: %v", wl.Namespace, wl.Name, err)
	}
}

func waitGone(ctx context.Context, t *testing.T, ns, name string) {
	t.Helper()
	waitFor(ctx, t, "workload "+name+" gone", func() (bool, string) {
		var got v1alpha1.Workload
		err := s.k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &got)
		if err == nil {
			return false, "still there with finalizers " + strings.Join(got.Finalizers, ",")
		}
		return client.IgnoreNotFound(err) == nil, err.Error()
	})
}

// A pod group's Workload has no owners: the grouper's word that the group
// has no pods left deletes it — unless it is evicted or inactive: then it
// waits for its pods, not queued, until they are submitted again.
func TestGroupWithoutPods(t *testing.T) {
	ctx := testContext(t)
	st := newSetup(ctx, t, queueOptions{cpu: "1"})

	// A queued group whose pods are all gone: its Workload goes.
	submit(ctx, t, st.ns, "gone", "2", asGroup)
	gone := waitWorkload(ctx, t, st.ns, "gone", "queued", func(wl *v1alpha1.Workload) bool {
		c := condition(wl, v1alpha1.WorkloadQuotaReserved)
		return c != nil && c.Reason == v1alpha1.ReasonPending
	})
	if gone.Labels[v1alpha1.PodGroupLabel] != "gone" || len(gone.OwnerReferences) != 0 {
		t.Fatalf("labels %v, owners %v; want the pod-group label and no owners", gone.Labels, gone.OwnerReferences)
	}
	reportNoPods(ctx, t, gone)
	waitWorkload(ctx, t, st.ns, "gone", "marked for deletion", func(wl *v1alpha1.Workload) bool { return wl.DeletionTimestamp != nil })
	reportStopped(ctx, t, st.ns, "gone", "")
	waitGone(ctx, t, st.ns, "gone")

	// An inactive group whose pods are gone waits for them; while it does,
	// it is not queued even once active again. (A blocker holds the quota
	// until then, so the group is not admitted before it is deactivated.)
	submit(ctx, t, st.ns, "blocker", "1")
	waitWorkload(ctx, t, st.ns, "blocker", "admitted", func(wl *v1alpha1.Workload) bool { return isTrue(wl, v1alpha1.WorkloadAdmitted) })
	submit(ctx, t, st.ns, "paused", "1", asGroup)
	deactivate(ctx, t, st.ns, "paused", false)
	paused := waitWorkload(ctx, t, st.ns, "paused", "inactive", func(wl *v1alpha1.Workload) bool {
		return wl.Spec.Active != nil && !*wl.Spec.Active && wl.Status.Admission == nil
	})
	reportNoPods(ctx, t, paused)
	waiting := waitWorkload(ctx, t, st.ns, "paused", "waiting for its pods", func(wl *v1alpha1.Workload) bool {
		c := condition(wl, v1alpha1.WorkloadWaitingForReplacementPods)
		return c != nil && c.Status == "True" && c.Reason == v1alpha1.ReasonNoPods
	})
	if waiting.DeletionTimestamp != nil {
		t.Fatal("an inactive group's Workload was deleted for having no pods")
	}
	deactivate(ctx, t, st.ns, "paused", true)
	if _, err := s.client.ReportProgress(ctx, &admitterv1.ReportProgressRequest{
		Workload: &sluicev1.WorkloadRef{Namespace: st.ns, Name: "blocker"}, Finish: &admitterv1.Finish{Succeeded: true},
	}); err != nil {
		t.Fatal(err)
	}
	waitWorkload(ctx, t, st.ns, "blocker", "finished", func(wl *v1alpha1.Workload) bool { return isTrue(wl, v1alpha1.WorkloadFinished) })

	// Pods of another shape are refused, naming both shapes.
	_, err := s.client.SubmitWorkload(ctx, &admitterv1.SubmitWorkloadRequest{Workload: &sluicev1.Workload{
		Ref: &sluicev1.WorkloadRef{Namespace: st.ns, Name: "paused"}, QueueName: "lq", PodGroup: "paused",
		PodSets: []*sluicev1.PodSet{{Name: "main", Count: 2, RoleHash: "abc123", Requests: map[string]string{"cpu": "500m"}}},
	}})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "main=1") || !strings.Contains(err.Error(), "main=2") {
		t.Fatalf("submitting other pod sets: %v; want FAILED_PRECONDITION naming both", err)
	}
	if got := getWorkload(ctx, t, st.ns, "paused"); got.Status.Admission != nil || !isTrue(got, v1alpha1.WorkloadWaitingForReplacementPods) {
		t.Fatalf("a group waiting for its pods was reserved or stopped waiting: %+v", got.Status)
	}

	// The pods back: the wait ends and the same Workload is admitted.
	if resp := submit(ctx, t, st.ns, "paused", "1", asGroup); resp.GetCreated() || resp.GetUid() != string(paused.UID) {
		t.Fatalf("resubmission created=%v uid=%s; want the existing Workload %s", resp.GetCreated(), resp.GetUid(), paused.UID)
	}
	admitted := waitWorkload(ctx, t, st.ns, "paused", "admitted", func(wl *v1alpha1.Workload) bool { return isTrue(wl, v1alpha1.WorkloadAdmitted) })
	if c := condition(admitted, v1alpha1.WorkloadWaitingForReplacementPods); c.Reason != v1alpha1.ReasonAllPodsPresent {
		t.Fatalf("WaitingForReplacementPods = %+v, want False with reason %s", c, v1alpha1.ReasonAllPodsPresent)
	}

	// No pods report without the uid is refused: it must not end a later
	// Workload of the same name.
	_, err = s.client.ReportProgress(ctx, &admitterv1.ReportProgressRequest{
		Workload: &sluicev1.WorkloadRef{Namespace: st.ns, Name: "paused"}, NoPods: true,
	})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("no_pods without a uid: %v, want INVALID_ARGUMENT", err)
	}
}

// An admitted group evicted and stopped waits for its pods in the very
// write that releases its quota.
func TestEvictedGroupWaitsForItsPods(t *testing.T) {
	ctx := testContext(t)
	st := newSetup(ctx, t, queueOptions{cpu: "1"})
	submit(ctx, t, st.ns, "group", "1", asGroup)
	admitted := waitWorkload(ctx, t, st.ns, "group", "admitted", func(wl *v1alpha1.Workload) bool { return isTrue(wl, v1alpha1.WorkloadAdmitted) })
	deactivate(ctx, t, st.ns, "group", false)
	waitWorkload(ctx, t, st.ns, "group", "evicting", func(wl *v1alpha1.Workload) bool { return isTrue(wl, v1alpha1.WorkloadEvicted) })
	deactivate(ctx, t, st.ns, "group", true)
	reportStopped(ctx, t, st.ns, "group", admitted.Status.Admission.ReservationID)
	released := getWorkload(ctx, t, st.ns, "group")
	if released.Status.Admission != nil || !isTrue(released, v1alpha1.WorkloadWaitingForReplacementPods) {
		t.Fatalf("after the stop: admission %+v, conditions %+v; want the quota released and WaitingForReplacementPods=True",
			released.Status.Admission, released.Status.Conditions)
	}
	// Active, but its pods are gone: the next cycles leave it alone.
	submit(ctx, t, st.ns, "other", "1")
	waitWorkload(ctx, t, st.ns, "other", "admitted in the quota the group does not take", func(wl *v1alpha1.Workload) bool {
		return isTrue(wl, v1alpha1.WorkloadAdmitted)
	})
	if got := getWorkload(ctx, t, st.ns, "group"); got.Status.Admission != nil {
		t.Fatal("a group without its pods was reserved again")
	}
}

// A new run of a pod group meets the finished Workload of the previous
// run: that Workload is deleted, the submission is refused as retriable
// (UNAVAILABLE) until it is gone, and then a new Workload is created. The
// deletion of a finished Workload says so, for the grouper to leave the
// new run's gated pods alone.
func TestFinishedGroupMakesRoomForTheNextRun(t *testing.T) {
	ctx := testContext(t)
	st := newSetup(ctx, t, queueOptions{cpu: "1"})
	w := watchDecisions(t, "")
	first := submit(ctx, t, st.ns, "nightly", "1", asGroup)
	waitWorkload(ctx, t, st.ns, "nightly", "admitted", func(wl *v1alpha1.Workload) bool { return isTrue(wl, v1alpha1.WorkloadAdmitted) })
	if _, err := s.client.ReportProgress(ctx, &admitterv1.ReportProgressRequest{
		Workload: &sluicev1.WorkloadRef{Namespace: st.ns, Name: "nightly"}, Finish: &admitterv1.Finish{Succeeded: true},
	}); err != nil {
		t.Fatal(err)
	}
	waitWorkload(ctx, t, st.ns, "nightly", "finished", func(wl *v1alpha1.Workload) bool { return isTrue(wl, v1alpha1.WorkloadFinished) })

	again := &sluicev1.Workload{
		Ref: &sluicev1.WorkloadRef{Namespace: st.ns, Name: "nightly"}, QueueName: "lq", PodGroup: "nightly",
		PodSets: []*sluicev1.PodSet{{Name: "main", Count: 1, RoleHash: "abc123", Requests: map[string]string{"cpu": "1"}}},
	}
	_, err := s.client.SubmitWorkload(ctx, &admitterv1.SubmitWorkloadRequest{Workload: again})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("submitting the next run while the finished one exists: %v, want UNAVAILABLE", err)
	}
	if d := w.wait(ctx, t, st.ns, "nightly", admitterv1.Decision_ACTION_DELETE); !d.GetFinished() {
		t.Fatalf("the finished Workload's DELETE decision does not say it finished: %v", d)
	}
	reportStopped(ctx, t, st.ns, "nightly", "")
	waitGone(ctx, t, st.ns, "nightly")

	resp, err := s.client.SubmitWorkload(ctx, &admitterv1.SubmitWorkloadRequest{Workload: again})
	if err != nil || !resp.GetCreated() || resp.GetUid() == first.GetUid() {
		t.Fatalf("submitting the next run once the finished one is gone: %v (created %v, uid %s, first uid %s)",
			err, resp.GetCreated(), resp.GetUid(), first.GetUid())
	}
}
