package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

// TestBudgetRestartKeepsTheRunningWorkload: a budget that fits one
// workload; A is admitted and runs; the budget provider is killed; B is
// submitted and reserves quota, its check without an answer; the provider
// restarts with nothing in memory, and the admitter asks it again about
// both, in an order the provider cannot rely on. A must stay admitted
// (never evicted, its pod never deleted) and B must never be admitted
// (its pod never loses its gate): it is refused for A's budget.
//
// The cases tilt the order. With the check's short retry, B's own retry
// reaches the restarted provider before the WatchChanges stream opens
// again and asks about A; with a long retry B is asked again only when
// the stream opens, together with A (A's call first, but the calls run
// concurrently). Either way the provider, warming up after its restart
// (the default --budget-restart-grace), answers B PENDING (RestartWarmUp)
// until A has been counted again, and then refuses it. Without the
// warm-up B could be answered READY first, admitted for a moment and
// then displaced by A (DisplacedByAdmitted).
func TestBudgetRestartKeepsTheRunningWorkload(t *testing.T) {
	for _, tc := range []struct {
		name  string
		retry *sluicev1alpha1.RetryPolicy // nil: faultCheck's, 200ms doubling to 1s
	}{
		{"the waiting workload asks first", nil},
		{"the reopened stream asks admitted workloads first", &sluicev1alpha1.RetryPolicy{
			InitialBackoff: &metav1.Duration{Duration: 10 * time.Minute}, MaxBackoff: &metav1.Duration{Duration: 10 * time.Minute},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { budgetRestart(t, tc.retry) })
	}
}

func budgetRestart(t *testing.T, retry *sluicev1alpha1.RetryPolicy) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ns := createNamespace(ctx, t, "budget-restart")
	budgets := filepath.Join(t.TempDir(), "budgets.yaml")
	if err := os.WriteFile(budgets, fmt.Appendf(nil, "namespaces:\n  %s:\n    hard: {cpu: 1}\n", ns), 0o644); err != nil {
		t.Fatal(err)
	}
	prov := startProvider(ctx, t, "checks-budget-"+ns, "--provider", "budget", "--budget-config", budgets)
	check := ns // cluster-scoped, so as unique as the namespace
	ac := faultCheck(check, prov.GRPCAddr, sluicev1alpha1.FailClosed)
	ac.Spec.Timeout = &metav1.Duration{Duration: 5 * time.Second}
	if retry != nil {
		ac.Spec.Retry = retry
	}
	mustCreate(ctx, t, ac)
	t.Cleanup(func() {
		if err := k8s.Delete(context.Background(), ac); client.IgnoreNotFound(err) != nil {
			t.Errorf("deleting AdmissionCheck %s: %v", check, err)
		}
	})
	jsWaitAdmissionCheck(ctx, t, check, "active, with contract revision 3 and the WatchChanges capability", func(ac *sluicev1alpha1.AdmissionCheck) bool {
		p := ac.Status.Provider
		return activeCheck(ac) && p != nil && p.ContractRevision == 3 && slices.Contains(p.Capabilities, "CAPABILITY_WATCH_CHANGES")
	})
	createQueues(ctx, t, ns, ns, "10", check)
	rec := recordEvents(ctx, t, ns, ns)
	defer rec.stop()

	podA := newPod(ns, "running", "1", "10m")
	createFaultPod(ctx, t, podA)
	wlA := waitWorkloadOf(ctx, t, podA, "Admitted", admitted)
	runningA := waitPod(ctx, t, podA, "running", running)

	// Kill the provider just after a probe, so that the next one (30s on)
	// comes after its restart: a probe that found it down would make the
	// check, and its queue, inactive, and B would not reserve quota.
	waitProbe(ctx, t, check)
	if err := prov.Kill(); err != nil {
		t.Fatal(err)
	}
	podB := newPod(ns, "waiting", "1", "10m")
	createFaultPod(ctx, t, podB)
	gateB := watchGate(ctx, t, podB)
	wlB := waitCheckState(ctx, t, podB, check, "Pending without an answer, holding quota", func(st *sluicev1alpha1.AdmissionCheckState) bool {
		return st.State == sluicev1alpha1.CheckStatePending && strings.Contains(st.Message, "no answer")
	})
	if wlB.Status.Admission == nil {
		t.Fatalf("workload B has no quota reservation while its check waits: %s", describe(wlB))
	}
	if err := prov.Start(); err != nil {
		t.Fatal(err)
	}
	readyCtx, cancelReady := context.WithTimeout(ctx, time.Minute)
	defer cancelReady()
	if err := prov.WaitReady(readyCtx); err != nil {
		t.Fatalf("budget provider not ready after its restart: %v\n%s", err, prov.Tail(20))
	}

	// The restarted provider refuses B, once A is counted again: B's
	// reservation is given up for a Retry. B's admission, or A's
	// eviction, ends the wait.
	refusedB := func(c *metav1.Condition) bool {
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == sluicev1alpha1.ReasonAdmissionCheck &&
			containsAll(c.Message, "admission check "+check, "Retry", "over its hard budget")
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		if rec.transitions(wlA.Name, sluicev1alpha1.WorkloadEvicted) > 0 {
			return false, fmt.Errorf("workload A evicted: %+v", rec.conditionsSeen(wlA.Name, sluicev1alpha1.WorkloadEvicted))
		}
		if rec.transitions(wlB.Name, sluicev1alpha1.WorkloadAdmitted) > 0 {
			return false, fmt.Errorf("workload B admitted: %+v", rec.conditionsSeen(wlB.Name, sluicev1alpha1.WorkloadAdmitted))
		}
		return rec.became(wlB.Name, sluicev1alpha1.WorkloadEvicted, refusedB) > 0, nil
	})
	if err != nil {
		t.Fatalf("after the provider's restart, B was not refused for A's budget while A kept running and B waited: %v; B's Evicted conditions %+v, Admitted %+v",
			err, rec.conditionsSeen(wlB.Name, sluicev1alpha1.WorkloadEvicted), rec.conditionsSeen(wlB.Name, sluicev1alpha1.WorkloadAdmitted))
	}

	// B waited out the warm-up, was never admitted and its pod never
	// lost its gate; it is not admitted now either.
	warmedUp := slices.ContainsFunc(rec.versionsOf(wlB.Name), func(w *sluicev1alpha1.Workload) bool {
		st := checkState(w, check)
		return st != nil && st.State == sluicev1alpha1.CheckStatePending && st.Reason == "RestartWarmUp"
	})
	if !warmedUp {
		t.Errorf("workload B's check was never Pending with reason RestartWarmUp after the provider's restart")
	}
	if n := rec.transitions(wlB.Name, sluicev1alpha1.WorkloadAdmitted); n != 0 {
		t.Errorf("workload B admitted %d times, want never: %+v", n, rec.conditionsSeen(wlB.Name, sluicev1alpha1.WorkloadAdmitted))
	}
	displaced := rec.became(wlB.Name, sluicev1alpha1.WorkloadEvicted, func(c *metav1.Condition) bool {
		return c != nil && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, "gives way")
	})
	if displaced != 0 {
		t.Errorf("workload B answered READY and displaced %d times, want never: %+v", displaced, rec.conditionsSeen(wlB.Name, sluicev1alpha1.WorkloadEvicted))
	}
	curB := getWorkload(ctx, t, ns, wlB.Name)
	if admitted(curB) {
		t.Errorf("workload B admitted after it was refused: %s", describe(curB))
	}
	gateB.assertGatedThroughout(ctx, t)

	// A never noticed: never evicted, still admitted with its check Ready,
	// the same pod still running.
	if n := rec.transitions(wlA.Name, sluicev1alpha1.WorkloadEvicted); n != 0 {
		t.Errorf("workload A evicted %d times, want never: %+v", n, rec.conditionsSeen(wlA.Name, sluicev1alpha1.WorkloadEvicted))
	}
	curA := getWorkload(ctx, t, ns, wlA.Name)
	if !admitted(curA) {
		t.Errorf("workload A no longer admitted: %s", describe(curA))
	}
	if st := checkState(curA, check); st == nil || st.State != sluicev1alpha1.CheckStateReady {
		t.Errorf("workload A's check state = %+v, want Ready", st)
	}
	if pod := getPod(ctx, t, podA); pod.UID != runningA.UID || !running(pod) {
		t.Errorf("A's pod: uid %s (was %s), phase %s, deleted %v; want the same pod still running", pod.UID, runningA.UID, pod.Status.Phase, pod.DeletionTimestamp != nil)
	}
}

func activeCheck(ac *sluicev1alpha1.AdmissionCheck) bool {
	for _, c := range ac.Status.Conditions {
		if c.Type == sluicev1alpha1.AdmissionCheckActive {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}

// waitProbe waits until the admitter probes the check's provider (a
// GetProviderInfo call counted in its metrics) once more.
func waitProbe(ctx context.Context, t *testing.T, check string) {
	t.Helper()
	before, err := probeCalls(ctx, check)
	if err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := probeCalls(ctx, check)
		return n > before, err
	})
	if err != nil {
		t.Fatalf("the admitter did not probe check %s again: %v", check, err)
	}
}

// probeCalls is the admitter's count of GetProviderInfo calls to check.
func probeCalls(ctx context.Context, check string) (uint64, error) {
	m, err := sluice.Admitter.Metric(ctx, "sluice_admitter_check_call_duration_seconds", map[string]string{"check": check, "method": "GetProviderInfo"})
	return m.GetHistogram().GetSampleCount(), err
}
