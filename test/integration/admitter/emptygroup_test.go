package admitter

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	sluicev1 "github.com/sluice-dev/sluice/gen/sluice/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

// noPodsUntil reports that group wl has no pods and returns the end of the
// replacement window the admitter answers with (zero: none).
func noPodsUntil(ctx context.Context, t *testing.T, wl *v1alpha1.Workload) time.Time {
	t.Helper()
	resp, err := s.client.ReportProgress(ctx, &admitterv1.ReportProgressRequest{
		Workload: &sluicev1.WorkloadRef{Namespace: wl.Namespace, Name: wl.Name, Uid: string(wl.UID)},
		NoPods:   true,
	})
	if err != nil {
		t.Fatalf("report %s/%s has no pods: %v", wl.Namespace, wl.Name, err)
	}
	if resp.GetNoPodsUntil() == nil {
		return time.Time{}
	}
	return resp.GetNoPodsUntil().AsTime()
}

// waitPast waits until the clock passed at.
func waitPast(ctx context.Context, t *testing.T, at time.Time) {
	t.Helper()
	waitFor(ctx, t, "the clock to pass "+at.String(), func() (bool, string) {
		return time.Now().After(at), time.Now().String()
	})
}

// holdsWindow fails the test unless wl still holds its admission and says
// it has no pods until until.
func holdsWindow(t *testing.T, wl *v1alpha1.Workload, until time.Time) {
	t.Helper()
	c := condition(wl, v1alpha1.WorkloadWaitingForReplacementPods)
	if wl.DeletionTimestamp != nil || wl.Status.Admission == nil || !isTrue(wl, v1alpha1.WorkloadAdmitted) ||
		c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonNoPods ||
		!strings.Contains(c.Message, until.UTC().Format(time.RFC3339)) {
		t.Fatalf("want the group admitted, not deleted, WaitingForReplacementPods=True NoPods until %s; got deleting=%v admission=%v conditions %+v",
			until.UTC().Format(time.RFC3339), wl.DeletionTimestamp != nil, wl.Status.Admission != nil, wl.Status.Conditions)
	}
}

// A pod group that holds quota and has no pod (its pods missing, then all
// gone) keeps its admission for its ClusterQueue's replacement window — across a restart of the admitter,
// the window being the Workload's state — and a report once the window
// passed deletes the Workload; its quota goes to the group waiting behind
// it.
func TestEmptyGroupGivesQuotaBackAfterItsWindow(t *testing.T) {
	ctx := testContext(t)
	const window = 10 * time.Second
	st := newSetup(ctx, t, queueOptions{cpu: "1", replacementWindow: &metav1.Duration{Duration: window}})
	submit(ctx, t, st.ns, "emptied", "1", asGroup)
	admitted := waitWorkload(ctx, t, st.ns, "emptied", "admitted", func(wl *v1alpha1.Workload) bool { return isTrue(wl, v1alpha1.WorkloadAdmitted) })
	submit(ctx, t, st.ns, "next", "1", asGroup)
	waitWorkload(ctx, t, st.ns, "next", "pending for quota", func(wl *v1alpha1.Workload) bool {
		c := condition(wl, v1alpha1.WorkloadQuotaReserved)
		return c != nil && c.Reason == v1alpha1.ReasonPending
	})

	// The pods go one by one, as with kubectl delete pods -l: first one
	// is missing, then none is left.
	if _, err := s.client.ReportProgress(ctx, &admitterv1.ReportProgressRequest{
		Workload: &sluicev1.WorkloadRef{Namespace: st.ns, Name: "emptied", Uid: string(admitted.UID)},
		Missing:  &admitterv1.Missing{Pods: map[string]int32{"main": 1}},
	}); err != nil {
		t.Fatal(err)
	}
	waitWorkload(ctx, t, st.ns, "emptied", "missing a pod", func(wl *v1alpha1.Workload) bool {
		c := condition(wl, v1alpha1.WorkloadWaitingForReplacementPods)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == v1alpha1.ReasonPodsMissing
	})
	before := time.Now()
	until := noPodsUntil(ctx, t, admitted)
	if until.Before(before.Add(window-time.Second)) || until.After(time.Now().Add(window)) {
		t.Fatalf("window ends %s, want %s after the report (at %s)", until, window, before)
	}
	holdsWindow(t, getWorkload(ctx, t, st.ns, "emptied"), until)

	// A new leader finds the window in the Workload: the same end, no
	// deletion, while it lasts.
	restartAdmitter(t)
	if again := noPodsUntil(ctx, t, admitted); !again.Equal(until) {
		t.Fatalf("a report after the admitter restarted answered window end %s, want the open window's %s", again, until)
	}
	holdsWindow(t, getWorkload(ctx, t, st.ns, "emptied"), until)
	if got := getWorkload(ctx, t, st.ns, "next"); got.Status.Admission != nil {
		t.Fatal("the waiting group was reserved while the empty group's window was open")
	}

	// Past the window, the grouper's report that the group is still empty
	// deletes the Workload; once no pod is left running its quota goes.
	w := watchDecisions(t, "")
	waitPast(ctx, t, until)
	if after := noPodsUntil(ctx, t, admitted); !after.IsZero() {
		t.Fatalf("a report after the window answered a window ending %s, want none", after)
	}
	waitWorkload(ctx, t, st.ns, "emptied", "marked for deletion", func(wl *v1alpha1.Workload) bool { return wl.DeletionTimestamp != nil })
	w.wait(ctx, t, st.ns, "emptied", admitterv1.Decision_ACTION_DELETE)
	reportStopped(ctx, t, st.ns, "emptied", "")
	waitGone(ctx, t, st.ns, "emptied")
	waitWorkload(ctx, t, st.ns, "next", "admitted in the quota given back", func(wl *v1alpha1.Workload) bool {
		return isTrue(wl, v1alpha1.WorkloadAdmitted)
	})
}

// Pods that come back within the window keep the group's admission: the
// grouper's report of them ends the wait, and a later report of no pods
// opens a new window instead of deleting the Workload.
func TestEmptyGroupPodsBackInTheWindow(t *testing.T) {
	ctx := testContext(t)
	const window = 3 * time.Second
	st := newSetup(ctx, t, queueOptions{cpu: "1", replacementWindow: &metav1.Duration{Duration: window}})
	submit(ctx, t, st.ns, "back", "1", asGroup)
	admitted := waitWorkload(ctx, t, st.ns, "back", "admitted", func(wl *v1alpha1.Workload) bool { return isTrue(wl, v1alpha1.WorkloadAdmitted) })
	until := noPodsUntil(ctx, t, admitted)
	if until.IsZero() {
		t.Fatal("no window for a group that holds quota")
	}

	// Its pods are back, none missing.
	if _, err := s.client.ReportProgress(ctx, &admitterv1.ReportProgressRequest{
		Workload: &sluicev1.WorkloadRef{Namespace: st.ns, Name: "back", Uid: string(admitted.UID)},
		Missing:  &admitterv1.Missing{},
	}); err != nil {
		t.Fatal(err)
	}
	waitWorkload(ctx, t, st.ns, "back", "no longer waiting for its pods", func(wl *v1alpha1.Workload) bool {
		c := condition(wl, v1alpha1.WorkloadWaitingForReplacementPods)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == v1alpha1.ReasonAllPodsPresent
	})

	waitPast(ctx, t, until)
	later := noPodsUntil(ctx, t, admitted)
	if !later.After(until) {
		t.Fatalf("a report of no pods after they came back answered window end %s, want a new window after %s", later, until)
	}
	holdsWindow(t, getWorkload(ctx, t, st.ns, "back"), later)
}

// A ClusterQueue whose window is zero gives an empty group's quota back at
// the first report.
func TestEmptyGroupZeroWindow(t *testing.T) {
	ctx := testContext(t)
	st := newSetup(ctx, t, queueOptions{cpu: "1", replacementWindow: &metav1.Duration{}})
	submit(ctx, t, st.ns, "brief", "1", asGroup)
	admitted := waitWorkload(ctx, t, st.ns, "brief", "admitted", func(wl *v1alpha1.Workload) bool { return isTrue(wl, v1alpha1.WorkloadAdmitted) })
	if until := noPodsUntil(ctx, t, admitted); !until.IsZero() {
		t.Fatalf("a zero window answered a window ending %s, want none", until)
	}
	waitWorkload(ctx, t, st.ns, "brief", "marked for deletion", func(wl *v1alpha1.Workload) bool { return wl.DeletionTimestamp != nil })
}
