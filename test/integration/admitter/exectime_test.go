package admitter

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	sluicev1 "github.com/sluice-dev/sluice/gen/sluice/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

// withMaxExecTime gives the submitted workload a maximum execution time.
func withMaxExecTime(seconds int32) func(*sluicev1.Workload) {
	return func(wl *sluicev1.Workload) { wl.MaximumExecutionTimeSeconds = ptr.To(seconds) }
}

// exceeded: evicted and deactivated for its maximum execution time.
func exceeded(wl *v1alpha1.Workload) bool {
	return !ptr.Deref(wl.Spec.Active, true) && evictedFor(v1alpha1.ReasonMaximumExecutionTimeExceeded)(wl)
}

// ranAdmitted is how long wl's last admission ran before its eviction, as
// the conditions (whole seconds) tell.
func ranAdmitted(admittedAt, evicted *v1alpha1.Workload) time.Duration {
	from := condition(admittedAt, v1alpha1.WorkloadAdmitted).LastTransitionTime
	return condition(evicted, v1alpha1.WorkloadEvicted).LastTransitionTime.Sub(from.Time)
}

// waitAdmittedFor polls until wl has been admitted for at least d.
func waitAdmittedFor(ctx context.Context, t *testing.T, wl *v1alpha1.Workload, d time.Duration) {
	t.Helper()
	until := condition(wl, v1alpha1.WorkloadAdmitted).LastTransitionTime.Add(d)
	waitFor(ctx, t, fmt.Sprintf("workload %s/%s admitted for %s", wl.Namespace, wl.Name, d), func() (bool, string) {
		cur := getWorkload(ctx, t, wl.Namespace, wl.Name)
		if !admitted(cur) {
			t.Fatalf("workload lost its admission early: %+v", cur.Status.Conditions)
		}
		return time.Now().After(until), "waiting for the time to pass"
	})
}

// waitWarning waits for a Warning event with reason on the workload name.
func waitWarning(ctx context.Context, t *testing.T, ns, name, reason string) {
	t.Helper()
	waitFor(ctx, t, "a Warning event "+reason+" on workload "+name, func() (bool, string) {
		var evs eventsv1.EventList
		if err := s.k8s.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			if e.Regarding.Name == name && e.Type == corev1.EventTypeWarning && e.Reason == reason {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events", len(evs.Items))
	})
}

// A workload admitted for its maximum execution time is deactivated and
// evicted with reason MaximumExecutionTimeExceeded. Its quota stays held
// until its pods stop, and it does not queue again.
func TestMaximumExecutionTimeDeactivates(t *testing.T) {
	ctx := testContext(t)
	st := newSetup(ctx, t, queueOptions{cpu: "1"})
	w := watchDecisions(t, "")
	submit(ctx, t, st.ns, "bounded", "1", withMaxExecTime(2))
	adm := waitWorkload(ctx, t, st.ns, "bounded", "admitted", admitted)
	w.wait(ctx, t, st.ns, "bounded", admitterv1.Decision_ACTION_ADMIT)

	evicted := waitWorkload(ctx, t, st.ns, "bounded", "deactivated for its maximum execution time", exceeded)
	if ran := ranAdmitted(adm, evicted); ran < 2*time.Second || ran > 4*time.Second {
		t.Errorf("evicted %s after its admission, want about its 2s maximum", ran)
	}
	msg := condition(evicted, v1alpha1.WorkloadEvicted).Message
	for _, part := range []string{"maximum execution time of 2s", "kueue.x-k8s.io/max-exec-time-seconds", "the pod is deleted"} {
		if !strings.Contains(msg, part) {
			t.Errorf("Evicted message %q lacks %q", msg, part)
		}
	}
	if c := condition(evicted, v1alpha1.WorkloadAdmitted); c.Reason != v1alpha1.ReasonMaximumExecutionTimeExceeded {
		t.Errorf("Admitted = %+v, want False with reason %s", c, v1alpha1.ReasonMaximumExecutionTimeExceeded)
	}
	if got := evicted.Status.AccumulatedPastExecutionTimeSeconds; got != nil {
		t.Errorf("accumulatedPastExecutionTimeSeconds = %d at the expiry, want it reset", *got)
	}
	if evicted.Status.Admission == nil || !isTrue(evicted, v1alpha1.WorkloadQuotaReserved) {
		t.Fatalf("quota given back before the pods stopped: admission %+v", evicted.Status.Admission)
	}
	d := w.wait(ctx, t, st.ns, "bounded", admitterv1.Decision_ACTION_EVICT)
	waitWarning(ctx, t, st.ns, "bounded", v1alpha1.ReasonMaximumExecutionTimeExceeded)

	reportStopped(ctx, t, st.ns, "bounded", d.GetReservationId())
	released := waitWorkload(ctx, t, st.ns, "bounded", "released", func(wl *v1alpha1.Workload) bool { return wl.Status.Admission == nil })
	if r := condition(released, v1alpha1.WorkloadEvicted).Reason; r != v1alpha1.ReasonMaximumExecutionTimeExceeded {
		t.Errorf("after the release Evicted has reason %s, want %s kept", r, v1alpha1.ReasonMaximumExecutionTimeExceeded)
	}
	// The quota it gave back goes to the next workload, not to it.
	submit(ctx, t, st.ns, "next", "1")
	waitWorkload(ctx, t, st.ns, "next", "admitted", admitted)
	if isTrue(getWorkload(ctx, t, st.ns, "bounded"), v1alpha1.WorkloadQuotaReserved) {
		t.Fatal("the deactivated workload was reserved again")
	}
}

// The time counts only while admitted and carries over an eviction and
// requeue: the second admission has what the first left.
func TestMaximumExecutionTimeCarriesOverEvictions(t *testing.T) {
	ctx := testContext(t)
	st := newSetup(ctx, t, queueOptions{cpu: "1"})
	const limit = 6
	submit(ctx, t, st.ns, "resumed", "1", withMaxExecTime(limit))
	first := waitWorkload(ctx, t, st.ns, "resumed", "admitted", admitted)
	waitAdmittedFor(ctx, t, first, 2*time.Second)

	// Evicted for another reason: the time it ran is recorded.
	deactivate(ctx, t, st.ns, "resumed", false)
	evicted := waitWorkload(ctx, t, st.ns, "resumed", "evicted as inactive", evictedFor(v1alpha1.ReasonInactive))
	past := ptr.Deref(evicted.Status.AccumulatedPastExecutionTimeSeconds, 0)
	if ran := int32(ranAdmitted(first, evicted) / time.Second); past < 2 || past > ran {
		t.Fatalf("accumulatedPastExecutionTimeSeconds = %d after %ds admitted, want at least 2 and at most that", past, ran)
	}
	reportStopped(ctx, t, st.ns, "resumed", first.Status.Admission.ReservationID)
	waitWorkload(ctx, t, st.ns, "resumed", "released", func(wl *v1alpha1.Workload) bool { return wl.Status.Admission == nil })

	// Readmitted, it runs out after what is left.
	deactivate(ctx, t, st.ns, "resumed", true)
	second := waitWorkload(ctx, t, st.ns, "resumed", "admitted again", func(wl *v1alpha1.Workload) bool {
		return admitted(wl) && wl.Status.Admission.ReservationID != first.Status.Admission.ReservationID
	})
	if got := ptr.Deref(second.Status.AccumulatedPastExecutionTimeSeconds, 0); got != past {
		t.Fatalf("accumulatedPastExecutionTimeSeconds = %d once readmitted, want %d kept", got, past)
	}
	last := waitWorkload(ctx, t, st.ns, "resumed", "deactivated for its maximum execution time", exceeded)
	left := time.Duration(limit-past) * time.Second
	if ran := ranAdmitted(second, last); ran < left-time.Second || ran > left+2*time.Second {
		t.Errorf("second admission ran %s, want about the %s the first left of %ds", ran, left, limit)
	}
	if got := last.Status.AccumulatedPastExecutionTimeSeconds; got != nil {
		t.Errorf("accumulatedPastExecutionTimeSeconds = %d at the expiry, want it reset", *got)
	}
}

// The deadline is read from the Workload, so an admitter that starts
// after the admission (a new leader) keeps it.
func TestMaximumExecutionTimeSurvivesRestart(t *testing.T) {
	ctx := testContext(t)
	st := newSetup(ctx, t, queueOptions{cpu: "1"})
	submit(ctx, t, st.ns, "restarted", "1", withMaxExecTime(3))
	adm := waitWorkload(ctx, t, st.ns, "restarted", "admitted", admitted)
	restartAdmitter(t)
	evicted := waitWorkload(ctx, t, st.ns, "restarted", "deactivated by the new admitter", exceeded)
	if ran := ranAdmitted(adm, evicted); ran < 3*time.Second {
		t.Errorf("evicted %s after its admission, before its 3s maximum", ran)
	}
}
