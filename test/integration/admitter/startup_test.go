package admitter

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	sluicev1 "github.com/sluice-dev/sluice/gen/sluice/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

// deadlineQueue is a waitForPodsReady with a short timeout and backoff.
func deadlineQueue(timeout time.Duration, cond v1alpha1.PodsStartedCondition, limit *int32) *v1alpha1.WaitForPodsReady {
	return &v1alpha1.WaitForPodsReady{
		Timeout:   metav1.Duration{Duration: timeout},
		Condition: cond,
		RequeuingStrategy: &v1alpha1.RequeuingStrategy{
			BackoffBaseSeconds: ptr.To[int32](2), BackoffMaxSeconds: ptr.To[int32](10), BackoffLimitCount: limit,
		},
	}
}

func reportStarted(ctx context.Context, t *testing.T, ns, name string, scheduled, ready int32) {
	t.Helper()
	_, err := s.client.ReportProgress(ctx, &admitterv1.ReportProgressRequest{
		Workload: &sluicev1.WorkloadRef{Namespace: ns, Name: name},
		Started:  &admitterv1.Started{Scheduled: map[string]int32{"main": scheduled}, Ready: map[string]int32{"main": ready}},
	})
	if err != nil {
		t.Fatalf("report %s/%s started: %v", ns, name, err)
	}
}

func evictedFor(reason string) func(*v1alpha1.Workload) bool {
	return func(wl *v1alpha1.Workload) bool {
		c := condition(wl, v1alpha1.WorkloadEvicted)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == reason
	}
}

func admitted(wl *v1alpha1.Workload) bool { return isTrue(wl, v1alpha1.WorkloadAdmitted) }

// A workload whose pods do not all start within the queue's timeout is
// evicted with reason PodsReadyTimeout, requeued with backoff recorded in
// requeueState, and reserved again only once requeueAt has passed.
func TestMissedStartupDeadlineEvictsAndRequeues(t *testing.T) {
	ctx := testContext(t)
	st := newSetup(ctx, t, queueOptions{cpu: "1", startup: deadlineQueue(2*time.Second, v1alpha1.PodsReady, nil)})
	w := watchDecisions(t, "")
	submit(ctx, t, st.ns, "slow", "1")
	first := waitWorkload(ctx, t, st.ns, "slow", "admitted", admitted)
	d := w.wait(ctx, t, st.ns, "slow", admitterv1.Decision_ACTION_ADMIT)
	admittedAt := condition(first, v1alpha1.WorkloadAdmitted).LastTransitionTime.Time
	if got, want := d.GetStartBy().AsTime(), admittedAt.Add(2*time.Second); !got.Equal(want) {
		t.Fatalf("ADMIT start_by = %s, want the admission %s plus the 2s timeout", got, admittedAt)
	}
	// A report short of every pod changes nothing.
	reportStarted(ctx, t, st.ns, "slow", 1, 0)

	evicted := waitWorkload(ctx, t, st.ns, "slow", "evicted for the deadline", evictedFor(v1alpha1.ReasonPodsReadyTimeout))
	msg := condition(evicted, v1alpha1.WorkloadEvicted).Message
	if !strings.Contains(msg, "2s") || !strings.Contains(msg, "pod set main 0/1 ready") {
		t.Fatalf("Evicted message %q: want the timeout and the counts reported", msg)
	}
	rs := evicted.Status.RequeueState
	if rs == nil || ptr.Deref(rs.Count, 0) != 1 || rs.RequeueAt == nil {
		t.Fatalf("requeueState = %s, want count 1 and requeueAt set", stringify(rs))
	}
	if isTrue(evicted, v1alpha1.WorkloadPodsReady) {
		t.Fatal("PodsReady=True after a missed deadline")
	}
	w.wait(ctx, t, st.ns, "slow", admitterv1.Decision_ACTION_EVICT)
	reportStopped(ctx, t, st.ns, "slow", first.Status.Admission.ReservationID)

	again := waitWorkload(ctx, t, st.ns, "slow", "admitted again", func(wl *v1alpha1.Workload) bool {
		return admitted(wl) && wl.Status.Admission.ReservationID != first.Status.Admission.ReservationID
	})
	if at := condition(again, v1alpha1.WorkloadQuotaReserved).LastTransitionTime; at.Before(rs.RequeueAt) {
		t.Fatalf("reserved again at %s, before requeueAt %s", at, rs.RequeueAt)
	}
}

// A started report that brings every pod to the queue's condition sets
// PodsReady=True before it is answered; the workload then keeps running
// past its deadline, and its decision no longer carries one.
func TestStartedWorkloadKeepsRunningPastTheDeadline(t *testing.T) {
	ctx := testContext(t)
	st := newSetup(ctx, t, queueOptions{cpu: "1", startup: deadlineQueue(2*time.Second, v1alpha1.PodsScheduled, nil)})
	w := watchDecisions(t, "")
	submit(ctx, t, st.ns, "quick", "1")
	adm := waitWorkload(ctx, t, st.ns, "quick", "admitted", admitted)
	reportStarted(ctx, t, st.ns, "quick", 1, 0)
	got := getWorkload(ctx, t, st.ns, "quick")
	if c := condition(got, v1alpha1.WorkloadPodsReady); c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonPodsStarted {
		t.Fatalf("after the started report PodsReady = %+v, want True (PodsStarted)", c)
	}
	deadline := condition(adm, v1alpha1.WorkloadAdmitted).LastTransitionTime.Add(2 * time.Second)
	waitFor(ctx, t, "a second past the deadline, still admitted", func() (bool, string) {
		wl := getWorkload(ctx, t, st.ns, "quick")
		if !admitted(wl) || isTrue(wl, v1alpha1.WorkloadEvicted) {
			t.Fatalf("a started workload lost its admission: %+v", wl.Status.Conditions)
		}
		return time.Now().After(deadline.Add(time.Second)), "waiting for the deadline to pass"
	})
	waitFor(ctx, t, "an ADMIT decision without start_by", func() (bool, string) {
		w.mu.Lock()
		defer w.mu.Unlock()
		for i := len(w.decisions) - 1; i >= 0; i-- {
			if d := w.decisions[i]; d.GetWorkload().GetName() == "quick" && d.GetWorkload().GetNamespace() == st.ns {
				return d.GetAction() == admitterv1.Decision_ACTION_ADMIT && d.GetStartBy() == nil, d.String()
			}
		}
		return false, "no decision"
	})
}

// The deadline is read from the Workload, so an admitter that starts
// after the admission (a new leader) keeps it.
func TestStartupDeadlineSurvivesRestart(t *testing.T) {
	ctx := testContext(t)
	st := newSetup(ctx, t, queueOptions{cpu: "1", startup: deadlineQueue(3*time.Second, v1alpha1.PodsReady, nil)})
	submit(ctx, t, st.ns, "restarted", "1")
	waitWorkload(ctx, t, st.ns, "restarted", "admitted", admitted)
	restartAdmitter(t)
	evicted := waitWorkload(ctx, t, st.ns, "restarted", "evicted for the deadline by the new admitter", evictedFor(v1alpha1.ReasonPodsReadyTimeout))
	if rs := evicted.Status.RequeueState; rs == nil || ptr.Deref(rs.Count, 0) != 1 {
		t.Fatalf("requeueState = %s, want count 1", stringify(rs))
	}
}

// Missing the deadline more often than backoffLimitCount allows
// deactivates the workload with reason RequeuingLimitExceeded.
func TestStartupDeadlineLimitDeactivates(t *testing.T) {
	ctx := testContext(t)
	st := newSetup(ctx, t, queueOptions{cpu: "1", startup: deadlineQueue(time.Second, v1alpha1.PodsReady, ptr.To[int32](1))})
	submit(ctx, t, st.ns, "never", "1")
	first := waitWorkload(ctx, t, st.ns, "never", "evicted once", evictedFor(v1alpha1.ReasonPodsReadyTimeout))
	if !ptr.Deref(first.Spec.Active, true) {
		t.Fatal("deactivated at the first missed deadline; the limit allows one requeue")
	}
	reportStopped(ctx, t, st.ns, "never", first.Status.Admission.ReservationID)
	last := waitWorkload(ctx, t, st.ns, "never", "deactivated", func(wl *v1alpha1.Workload) bool {
		return !ptr.Deref(wl.Spec.Active, true) && evictedFor(v1alpha1.ReasonRequeuingLimitExceeded)(wl)
	})
	if msg := condition(last, v1alpha1.WorkloadEvicted).Message; !strings.Contains(msg, "backoffLimitCount 1") {
		t.Fatalf("Evicted message %q: want the limit named", msg)
	}
	if n := ptr.Deref(last.Status.RequeueState.Count, 0); n != 2 {
		t.Fatalf("requeueState.count = %d, want 2", n)
	}
}
