package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/test/fakecheck"
	"github.com/sluice-dev/sluice/test/harness"
)

// The fault tests drive the vendor path end to end through faulty
// providers (test/fakecheck on loopback). Each creates its own
// AdmissionChecks, queues and pods; faultCheck gives the checks a 1s call
// timeout and backoffs of 200ms to 1s. Claims that a pod stays gated are
// observed over a window that ends when the provider was asked again (or
// the admitter failed to reach it again) after the fault was seen.

// readyWithLabel is a READY answer that labels the pods of pod set main.
func readyWithLabel(key, value string) *checksv1.EvaluateResponse {
	return &checksv1.EvaluateResponse{
		State: checksv1.State_STATE_READY, Reason: "Placed", Message: "placed by test",
		PodSetUpdates: []*checksv1.PodSetUpdate{{Name: "main", Labels: map[string]string{key: value}}},
	}
}

// TestFaultSlowProviderTimesOut: a provider that would answer READY, but
// only after the check's timeout, never admits the workload: every call is
// cut off at the timeout, and the workload waits saying so. Once the
// provider answers in time, the workload is admitted.
func TestFaultSlowProviderTimesOut(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	const delay = 3 * time.Second // three times the check's timeout
	prov := fakecheck.StartT(t, fakecheck.WithDefaultAnswer(readyWithLabel("example.com/speed", "slow")))
	prov.SetDelay(delay)
	ns := createNamespace(ctx, t, "fault-slow")
	check := faultCheck("fault-slow", prov.Target(), sluicev1alpha1.FailClosed)
	mustCreate(ctx, t, check)
	createQueues(ctx, t, ns, "fault-slow", "1", check.Name)
	rec := recordEvents(ctx, t, ns, "fault-slow")
	defer rec.stop()

	pod := newPod(ns, "slow", "100m", "1s")
	createFaultPod(ctx, t, pod)
	gate := watchGate(ctx, t, pod)

	wl := waitCheckState(ctx, t, pod, check.Name, "Pending after a timed-out call", func(st *sluicev1alpha1.AdmissionCheckState) bool {
		return st.State == sluicev1alpha1.CheckStatePending && strings.Contains(st.Message, "DeadlineExceeded")
	})
	st := checkState(wl, check.Name)
	if want := "no answer from the provider within the check's timeout of 1s (DeadlineExceeded)"; st.Reason != "NoAnswer" || !strings.Contains(st.Message, want) {
		t.Errorf("check state = %s %q, want reason NoAnswer and a message with %q", st.Reason, st.Message, want)
	}
	c := meta.FindStatusCondition(wl.Status.Conditions, sluicev1alpha1.WorkloadAdmitted)
	if c == nil || c.Status != "False" || c.Reason != sluicev1alpha1.ReasonWaitingForChecks ||
		!containsAll(c.Message, check.Name, "DeadlineExceeded") {
		t.Errorf("Admitted condition = %+v, want False, %s, naming %s and the timeout", c, sluicev1alpha1.ReasonWaitingForChecks, check.Name)
	}

	// Had any call outlived the timeout, its READY would have arrived
	// after delay; four calls take longer than that.
	if err := prov.WaitEvaluated(ctx, ns, wl.Name, 4); err != nil {
		t.Fatal(err)
	}
	gate.assertGatedThroughout(ctx, t)
	if n := rec.transitions(wl.Name, sluicev1alpha1.WorkloadAdmitted); n != 0 {
		t.Errorf("workload was admitted %d times while every call timed out", n)
	}

	prov.SetDelay(0)
	final := waitPod(ctx, t, pod, "ungated once the provider answers in time", func(p *corev1.Pod) bool { return !hasGate(p) })
	if got := final.Labels["example.com/speed"]; got != "slow" {
		t.Errorf("pod label example.com/speed = %q, want the check's update slow", got)
	}
	waitCheckState(ctx, t, pod, check.Name, "Ready", func(st *sluicev1alpha1.AdmissionCheckState) bool {
		return st.State == sluicev1alpha1.CheckStateReady && st.Reason == "Placed"
	})
}

// TestFaultProviderDownThenUp: a provider that stops listening while a
// workload waits for it leaves the workload waiting, saying the provider
// is unavailable; restarted on the same address, it is asked again under
// the same evaluation key and its READY admits the workload with its
// updates.
func TestFaultProviderDownThenUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	prov := fakecheck.StartT(t) // PENDING until the test says otherwise
	ns := createNamespace(ctx, t, "fault-down")
	check := faultCheck("fault-down", prov.Target(), sluicev1alpha1.FailClosed)
	mustCreate(ctx, t, check)
	createQueues(ctx, t, ns, "fault-down", "1", check.Name)
	rec := recordEvents(ctx, t, ns, "fault-down")
	defer rec.stop()

	pod := newPod(ns, "down", "100m", "1s")
	createFaultPod(ctx, t, pod)
	gate := watchGate(ctx, t, pod)
	wl := waitWorkloadOf(ctx, t, pod, "QuotaReserved", func(w *sluicev1alpha1.Workload) bool {
		return meta.IsStatusConditionTrue(w.Status.Conditions, sluicev1alpha1.WorkloadQuotaReserved)
	})
	if err := prov.WaitEvaluated(ctx, ns, wl.Name, 1); err != nil {
		t.Fatal(err)
	}

	before, err := checkCallErrors(ctx, check.Name, "Unavailable")
	if err != nil {
		t.Fatal(err)
	}
	prov.Down()
	askedWhileUp := prov.EvaluateCount(ns, wl.Name)
	waitCheckState(ctx, t, pod, check.Name, "Pending with the provider unavailable", func(st *sluicev1alpha1.AdmissionCheckState) bool {
		return st.State == sluicev1alpha1.CheckStatePending && st.Reason == "NoAnswer" &&
			strings.Contains(st.Message, "no answer from the provider (Unavailable)")
	})
	// The admitter keeps trying the provider that is down.
	waitCheckCallErrors(ctx, t, check.Name, "Unavailable", before+3)
	if n := prov.EvaluateCount(ns, wl.Name); n != askedWhileUp {
		t.Errorf("the fake recorded %d calls while down, want none (%d before, %d now)", n-askedWhileUp, askedWhileUp, n)
	}
	if n := rec.transitions(wl.Name, sluicev1alpha1.WorkloadAdmitted); n != 0 {
		t.Errorf("workload was admitted %d times while its provider was down", n)
	}
	gate.assertGatedThroughout(ctx, t)

	prov.SetAnswer(ns, wl.Name, readyWithLabel("example.com/back", "yes"))
	if err := prov.Up(); err != nil {
		t.Fatal(err)
	}
	final := waitPod(ctx, t, pod, "ungated after the provider came back", func(p *corev1.Pod) bool { return !hasGate(p) })
	if got := final.Labels["example.com/back"]; got != "yes" {
		t.Errorf("pod label example.com/back = %q, want the update yes of the provider's READY", got)
	}
	admitted := waitWorkloadOf(ctx, t, pod, "Admitted", func(w *sluicev1alpha1.Workload) bool {
		return meta.IsStatusConditionTrue(w.Status.Conditions, sluicev1alpha1.WorkloadAdmitted)
	})
	if st := checkState(admitted, check.Name); st == nil || st.State != sluicev1alpha1.CheckStateReady || st.Reason != "Placed" {
		t.Errorf("check state = %+v, want Ready with the provider's reason Placed", st)
	}
	if n := prov.EvaluateCount(ns, wl.Name); n <= askedWhileUp {
		t.Errorf("the provider was asked %d times in all, want more than the %d before it went down", n, askedWhileUp)
	}
	keys := map[string]bool{}
	for _, c := range prov.Calls() {
		if c.GetWorkload().GetName() == wl.Name {
			keys[c.GetEvaluationKey()] = true
		}
	}
	if len(keys) != 1 {
		t.Errorf("the provider saw evaluation keys %v, want one: the reservation outlived the outage", keys)
	}
}

// TestFaultInvalidAnswer: answers that break the contract count as no
// answer. The pods stay gated, asked again and again, and each workload
// names the field and the rule its answer broke.
func TestFaultInvalidAnswer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	cases := map[string]bool{
		"update for a pod set the workload lacks": true,
		"label key under sluice.dev/":             true,
		"annotation key under kueue.x-k8s.io/":    true,
	}
	var invalid []fakecheck.InvalidAnswer
	for _, ia := range fakecheck.InvalidAnswers("main") {
		if cases[ia.Name] {
			invalid = append(invalid, ia)
		}
	}
	if len(invalid) != len(cases) {
		t.Fatalf("found %d of the %d invalid answers wanted in fakecheck.InvalidAnswers", len(invalid), len(cases))
	}

	prov := fakecheck.StartT(t) // PENDING until each workload gets its answer
	ns := createNamespace(ctx, t, "fault-invalid")
	check := faultCheck("fault-invalid", prov.Target(), sluicev1alpha1.FailClosed)
	mustCreate(ctx, t, check)
	createQueues(ctx, t, ns, "fault-invalid", "1", check.Name)
	rec := recordEvents(ctx, t, ns, "fault-invalid")
	defer rec.stop()

	type run struct {
		ia   fakecheck.InvalidAnswer
		pod  *corev1.Pod
		gate *gateWatch
		wl   string
	}
	runs := make([]*run, len(invalid))
	for i, ia := range invalid {
		pod := newPod(ns, fmt.Sprintf("invalid-%d", i), "100m", "1s")
		createFaultPod(ctx, t, pod)
		runs[i] = &run{ia: ia, pod: pod, gate: watchGate(ctx, t, pod)}
	}
	for _, r := range runs {
		wl := waitWorkloadOf(ctx, t, r.pod, "QuotaReserved", func(w *sluicev1alpha1.Workload) bool {
			return meta.IsStatusConditionTrue(w.Status.Conditions, sluicev1alpha1.WorkloadQuotaReserved)
		})
		r.wl = wl.Name
		prov.SetAnswer(ns, wl.Name, r.ia.Answer)
	}
	for _, r := range runs {
		want := "invalid answer from the provider: " + r.ia.Field + ": "
		wl := waitCheckState(ctx, t, r.pod, check.Name, "refusing the answer", func(st *sluicev1alpha1.AdmissionCheckState) bool {
			return strings.Contains(st.Message, want)
		})
		st := checkState(wl, check.Name)
		if st.State != sluicev1alpha1.CheckStatePending || st.Reason != "NoAnswer" || !strings.Contains(st.Message, r.ia.Rule) {
			t.Errorf("%s: check state = %s %s %q, want Pending, NoAnswer, naming %s and %q",
				r.ia.Name, st.State, st.Reason, st.Message, r.ia.Field, r.ia.Rule)
		}
		c := meta.FindStatusCondition(wl.Status.Conditions, sluicev1alpha1.WorkloadAdmitted)
		if c == nil || c.Status != "False" || c.Reason != sluicev1alpha1.ReasonWaitingForChecks || !containsAll(c.Message, r.ia.Field, r.ia.Rule) {
			t.Errorf("%s: Admitted condition = %+v, want False, %s, naming %s and %q",
				r.ia.Name, c, sluicev1alpha1.ReasonWaitingForChecks, r.ia.Field, r.ia.Rule)
		}
	}
	// Each refused answer was asked for twice more; none got through.
	for _, r := range runs {
		if err := prov.WaitEvaluated(ctx, ns, r.wl, prov.EvaluateCount(ns, r.wl)+2); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range runs {
		r.gate.assertGatedThroughout(ctx, t)
		if n := rec.transitions(r.wl, sluicev1alpha1.WorkloadAdmitted); n != 0 {
			t.Errorf("%s: workload %s was admitted %d times on an invalid answer", r.ia.Name, r.wl, n)
		}
	}
	if n, err := checkCallErrors(ctx, check.Name, "invalid_response"); err != nil || n < float64(2*len(runs)) {
		t.Errorf("admitter counted %v invalid answers from %s (%v), want at least %d", n, check.Name, err, 2*len(runs))
	}
}

// TestFaultConflictingUpdates: two checks whose READY updates set the same
// node-selector key to different values are reported as a conflict and
// the workload is not admitted: its reservation is given up, taken again,
// both checks are asked afresh and conflict again, and the pod stays
// gated throughout.
func TestFaultConflictingUpdates(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	const key = "example.com/zone"
	east, west := fakecheck.ConflictingReady("main", key, "east", "west")
	provA := fakecheck.StartT(t, fakecheck.WithDefaultAnswer(east))
	provB := fakecheck.StartT(t, fakecheck.WithDefaultAnswer(west))
	ns := createNamespace(ctx, t, "fault-conflict")
	checkA := faultCheck("fault-conflict-a", provA.Target(), sluicev1alpha1.FailClosed)
	checkB := faultCheck("fault-conflict-b", provB.Target(), sluicev1alpha1.FailClosed)
	mustCreate(ctx, t, checkA)
	mustCreate(ctx, t, checkB)
	createQueues(ctx, t, ns, "fault-conflict", "1", checkA.Name, checkB.Name)
	rec := recordEvents(ctx, t, ns, "fault-conflict")
	defer rec.stop()

	pod := newPod(ns, "conflict", "100m", "1s")
	createFaultPod(ctx, t, pod)
	gate := watchGate(ctx, t, pod)
	wl := waitWorkloadOf(ctx, t, pod, "created", func(*sluicev1alpha1.Workload) bool { return true })

	// Checks merge in name order, so b's value is the one that conflicts.
	wantMsg := fmt.Sprintf(`pod set main: in admission check %q: conflict for nodeSelector: key=%s, value1=east, value2=west`, checkB.Name, key)
	conflictCtx, cancelConflict := context.WithTimeout(ctx, time.Minute)
	defer cancelConflict()
	err := harness.Poll(conflictCtx, func() error {
		admitted, evicted := rec.conditionsSeen(wl.Name, sluicev1alpha1.WorkloadAdmitted), rec.conditionsSeen(wl.Name, sluicev1alpha1.WorkloadEvicted)
		if !hasCondition(admitted, "False", sluicev1alpha1.ReasonPodSetUpdateConflict, wantMsg) {
			return fmt.Errorf("no Admitted=False %s %q among %v", sluicev1alpha1.ReasonPodSetUpdateConflict, wantMsg, admitted)
		}
		if !hasCondition(evicted, "True", sluicev1alpha1.ReasonPodSetUpdateConflict, wantMsg) {
			return fmt.Errorf("no Evicted=True %s %q among %v", sluicev1alpha1.ReasonPodSetUpdateConflict, wantMsg, evicted)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("the conflict was never reported: %v", err)
	}
	// Giving the reservation up holds the workload back for the checks'
	// backoff: requeueAt lies after the eviction (both in whole seconds).
	released := 0
	for _, v := range rec.versionsOf(wl.Name) {
		ev := meta.FindStatusCondition(v.Status.Conditions, sluicev1alpha1.WorkloadEvicted)
		if ev == nil || ev.Status != "True" || ev.Reason != sluicev1alpha1.ReasonPodSetUpdateConflict || v.Status.Admission != nil {
			continue
		}
		released++
		if rs := v.Status.RequeueState; rs == nil || rs.RequeueAt == nil || !rs.RequeueAt.After(ev.LastTransitionTime.Time) {
			var at any = "unset"
			if rs != nil && rs.RequeueAt != nil {
				at = rs.RequeueAt.Time
			}
			t.Errorf("released for the conflict at %s with requeueAt %v, want a requeueAt after the release", ev.LastTransitionTime.Time, at)
		}
	}
	if released == 0 {
		t.Errorf("no recorded version of %s is released for the conflict, though its conditions say so", wl.Name)
	}

	// Given up and reserved again, the workload is asked afresh (a new
	// evaluation key for each check) and conflicts again.
	keysCtx, cancelKeys := context.WithTimeout(ctx, time.Minute)
	defer cancelKeys()
	err = harness.Poll(keysCtx, func() error {
		for _, p := range []*fakecheck.Provider{provA, provB} {
			if n := evaluationKeys(p, ns, wl.Name); n < 2 {
				return fmt.Errorf("a provider saw %d evaluation keys, want 2 reservations", n)
			}
		}
		if n := rec.reasonChanges(wl.Name, sluicev1alpha1.WorkloadAdmitted, sluicev1alpha1.ReasonPodSetUpdateConflict); n < 2 {
			return fmt.Errorf("the conflict was reported %d times, want 2", n)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("the workload was not reserved and refused again: %v", err)
	}
	gate.assertGatedThroughout(ctx, t)
	if n := rec.transitions(wl.Name, sluicev1alpha1.WorkloadAdmitted); n != 0 {
		t.Errorf("workload was admitted %d times with conflicting updates", n)
	}
}

// TestFaultIgnoreProviderDown: with failurePolicy Ignore, a provider that
// was never up does not hold the workload back: the check counts as Ready
// without updates, says the failure was ignored, and the pod is ungated
// without what the provider would have added.
func TestFaultIgnoreProviderDown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// Were it up, the provider would label the pods.
	prov := fakecheck.StartT(t, fakecheck.WithDown(), fakecheck.WithDefaultAnswer(readyWithLabel("example.com/advice", "given")))
	ns := createNamespace(ctx, t, "fault-ignore")
	check := faultCheck("fault-ignore", prov.Target(), sluicev1alpha1.IgnoreFailure)
	mustCreate(ctx, t, check)
	waitCheckActivity(ctx, t, check.Name, "inactive with its provider unreachable", func(c *metav1.Condition) bool {
		return c.Status == "False" && c.Reason == "ProviderUnreachable"
	})
	createQueues(ctx, t, ns, "fault-ignore", "1", check.Name)

	pod := newPod(ns, "ignored", "100m", "1s")
	createFaultPod(ctx, t, pod)
	final := waitPod(ctx, t, pod, "ungated with its provider down", func(p *corev1.Pod) bool { return !hasGate(p) })
	if v, ok := final.Labels["example.com/advice"]; ok {
		t.Errorf("pod carries example.com/advice=%s, which only the provider that is down could have asked for", v)
	}
	wl := waitWorkloadOf(ctx, t, pod, "Admitted", func(w *sluicev1alpha1.Workload) bool {
		return meta.IsStatusConditionTrue(w.Status.Conditions, sluicev1alpha1.WorkloadAdmitted)
	})
	st := checkState(wl, check.Name)
	switch {
	case st == nil:
		t.Fatalf("workload has no state for check %s: %s", check.Name, describe(wl))
	case st.State != sluicev1alpha1.CheckStateReady || st.Reason != "FailureIgnored" ||
		!containsAll(st.Message, "no answer from the provider (Unavailable)", "(ignored: failurePolicy is Ignore)"):
		t.Errorf("check state = %s %s %q, want Ready, FailureIgnored, saying the unavailable provider was ignored", st.State, st.Reason, st.Message)
	case len(st.PodSetUpdates) != 0:
		t.Errorf("ignored check has pod set updates %+v, want none", st.PodSetUpdates)
	}
	for _, info := range wl.Status.PodSetInfos {
		if _, ok := info.Labels["example.com/advice"]; ok {
			t.Errorf("pod set info %s has the down provider's label: %+v", info.Name, info.Labels)
		}
	}
	if n := len(prov.Calls()); n != 0 {
		t.Errorf("the provider that was down recorded %d calls", n)
	}
}

// evaluationKeys counts the evaluation keys p was asked under for one
// workload.
func evaluationKeys(p *fakecheck.Provider, ns, name string) int {
	keys := map[string]bool{}
	for _, c := range p.Calls() {
		if c.GetWorkload().GetNamespace() == ns && c.GetWorkload().GetName() == name {
			keys[c.GetEvaluationKey()] = true
		}
	}
	return len(keys)
}
