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

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/test/harness"
)

// The change-of-mind tests run the checks binary's other built-in
// providers, budget and approval, each as a process of its own serving
// plaintext on loopback (which the admitter allows without spec.tls), and
// withdraw an answer they gave: the admitter must evict the workload.

// startProvider starts the checks binary with args as a provider process
// of its own, waits until it is ready, and stops it when the test ends.
func startProvider(ctx context.Context, t *testing.T, name string, args ...string) *harness.Service {
	t.Helper()
	svc, err := sluice.NewProvider(name, args...)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := svc.Stop(10 * time.Second); err != nil {
			t.Errorf("stopping %s: %v", name, err)
		}
	})
	readyCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := svc.WaitReady(readyCtx); err != nil {
		t.Fatalf("%s not ready: %v\n%s", name, err, svc.Tail(20))
	}
	return svc
}

// createWatchedCheck creates an AdmissionCheck on the plaintext loopback
// provider svc and waits until it is active and its status records the
// provider's WatchChanges capability, so that a withdrawn answer reaches
// the admitter.
func createWatchedCheck(ctx context.Context, t *testing.T, name string, svc *harness.Service) {
	t.Helper()
	check := faultCheck(name, svc.GRPCAddr, sluicev1alpha1.FailClosed)
	check.Spec.Timeout = &metav1.Duration{Duration: 5 * time.Second}
	mustCreate(ctx, t, check)
	t.Cleanup(func() {
		if err := k8s.Delete(context.Background(), check); client.IgnoreNotFound(err) != nil {
			t.Errorf("deleting AdmissionCheck %s: %v", name, err)
		}
	})
	jsWaitAdmissionCheck(ctx, t, name, "active with the WatchChanges capability", func(ac *sluicev1alpha1.AdmissionCheck) bool {
		return meta.IsStatusConditionTrue(ac.Status.Conditions, sluicev1alpha1.AdmissionCheckActive) &&
			ac.Status.Provider != nil &&
			slices.ContainsFunc(ac.Status.Provider.Capabilities, func(c string) bool { return strings.Contains(strings.ToUpper(c), "WATCH") })
	})
}

func admitted(w *sluicev1alpha1.Workload) bool {
	return meta.IsStatusConditionTrue(w.Status.Conditions, sluicev1alpha1.WorkloadAdmitted)
}

func running(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil
}

// evictedByCheck is a workload evicted because admission check check now
// answers with reason why.
func evictedByCheck(check, why string) func(c *metav1.Condition) bool {
	return func(c *metav1.Condition) bool {
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == sluicev1alpha1.ReasonAdmissionCheck &&
			containsAll(c.Message, "admission check "+check, "("+why+")")
	}
}

// waitEvictedBy waits until rec has seen workload name evicted by check
// for an answer with reason why, and fails if it was evicted so more than
// once.
func waitEvictedBy(ctx context.Context, t *testing.T, rec *recorder, name, check, why string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return rec.became(name, sluicev1alpha1.WorkloadEvicted, evictedByCheck(check, why)) > 0, nil
	})
	if err != nil {
		t.Fatalf("workload %s never evicted by check %s: Evicted conditions seen %+v", name, check,
			rec.conditionsSeen(name, sluicev1alpha1.WorkloadEvicted))
	}
	if n := rec.became(name, sluicev1alpha1.WorkloadEvicted, evictedByCheck(check, why)); n != 1 {
		t.Errorf("workload %s evicted by %s %d times, want 1", name, check, n)
	}
}

// TestBudgetCutEvictsNewest: two pods admitted one after the other
// through the budget check run; the budget is then cut below what they
// use. The newer workload is evicted (its pod deleted); the older stays
// admitted and keeps running.
func TestBudgetCutEvictsNewest(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ns := createNamespace(ctx, t, "budget-cut")
	budgets := filepath.Join(t.TempDir(), "budgets.yaml")
	writeBudget := func(hard string) {
		t.Helper()
		data := fmt.Sprintf("namespaces:\n  %s:\n    hard: {cpu: %s}\n", ns, hard)
		// Written whole and renamed in place, so that a reload never
		// reads half a file.
		tmp := budgets + ".tmp"
		if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, budgets); err != nil {
			t.Fatal(err)
		}
	}
	writeBudget("3")
	prov := startProvider(ctx, t, "checks-budget-"+ns, "--provider", "budget",
		"--budget-config", budgets, "--budget-reload-interval", "200ms")
	const check = "budget-cut"
	createWatchedCheck(ctx, t, check, prov)
	createQueues(ctx, t, ns, "budget-cut", "10", check)
	rec := recordEvents(ctx, t, ns, "budget-cut")
	defer rec.stop()

	older := newPod(ns, "older", "1", "10m")
	createFaultPod(ctx, t, older)
	olderWL := waitWorkloadOf(ctx, t, older, "Admitted", admitted)
	waitPod(ctx, t, older, "running", running)
	newer := newPod(ns, "newer", "1", "10m")
	createFaultPod(ctx, t, newer)
	newerWL := waitWorkloadOf(ctx, t, newer, "Admitted", admitted)
	waitPod(ctx, t, newer, "running", running)
	for _, w := range []*sluicev1alpha1.Workload{olderWL, newerWL} {
		if st := checkState(w, check); st == nil || st.State != sluicev1alpha1.CheckStateReady {
			t.Fatalf("workload %s admitted with check state %+v, want Ready", w.Name, st)
		}
	}

	writeBudget("1")
	waitGone(ctx, t, newer)
	waitEvictedBy(ctx, t, rec, newerWL.Name, check, "BudgetCut")
	for _, c := range rec.conditionsSeen(newerWL.Name, sluicev1alpha1.WorkloadEvicted) {
		t.Logf("newer workload's Evicted condition: %s %s %q", c.Status, c.Reason, c.Message)
	}

	// The older is untouched: still admitted, its pod still running,
	// never evicted.
	cur := getPod(ctx, t, older)
	if !running(cur) {
		t.Errorf("older pod %s no longer running after the cut: phase %s deleted %v", older.Name, cur.Status.Phase, cur.DeletionTimestamp != nil)
	}
	wl := getWorkload(ctx, t, ns, olderWL.Name)
	if !admitted(wl) {
		t.Errorf("older workload no longer admitted after the cut: %s", describe(wl))
	}
	if n := rec.transitions(olderWL.Name, sluicev1alpha1.WorkloadEvicted); n != 0 {
		t.Errorf("older workload %s evicted %d times, want never", olderWL.Name, n)
	}
	if st := checkState(wl, check); st == nil || st.State != sluicev1alpha1.CheckStateReady {
		t.Errorf("older workload's check state after the cut = %+v, want Ready", st)
	}
}

// TestApprovalWithdrawnEvicts: a pod waits on the approval check, whose
// message gives the command that approves it; annotating the Workload as
// it says admits the pod, which runs; removing the annotation evicts the
// workload and its pod is deleted.
func TestApprovalWithdrawnEvicts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	kc, err := harness.WriteKubeconfig(ctx, env, t.TempDir(), "checks-approval")
	if err != nil {
		t.Fatal(err)
	}
	ns := createNamespace(ctx, t, "approval")
	prov := startProvider(ctx, t, "checks-approval-"+ns, "--provider", "approval", "--kubeconfig", kc)
	const check = "approval-withdrawn"
	createWatchedCheck(ctx, t, check, prov)
	createQueues(ctx, t, ns, "approval-withdrawn", "10", check)
	rec := recordEvents(ctx, t, ns, "approval-withdrawn")
	defer rec.stop()

	pod := newPod(ns, "needs-approval", "1", "10m")
	createFaultPod(ctx, t, pod)
	gate := watchGate(ctx, t, pod)
	const annotation = "approval.checks.sluice.dev/approved-by"
	wl := waitCheckState(ctx, t, pod, check, "Pending, awaiting approval", func(st *sluicev1alpha1.AdmissionCheckState) bool {
		return st.State == sluicev1alpha1.CheckStatePending && st.Reason == "AwaitingApproval"
	})
	command := fmt.Sprintf("kubectl annotate workloads.sluice.dev -n %s %s %s=", ns, wl.Name, annotation)
	if st := checkState(wl, check); !strings.Contains(st.Message, command) {
		t.Errorf("check message %q does not give the command %q", st.Message, command)
	}
	gate.assertGatedThroughout(ctx, t)

	// Approve, as the message says.
	patch := client.MergeFrom(wl.DeepCopy())
	if wl.Annotations == nil {
		wl.Annotations = map[string]string{}
	}
	wl.Annotations[annotation] = "e2e-admin"
	if err := k8s.Patch(ctx, wl, patch); err != nil {
		t.Fatalf("approving workload %s: %v", wl.Name, err)
	}
	approved := waitWorkloadOf(ctx, t, pod, "Admitted once approved", admitted)
	if st := checkState(approved, check); st == nil || st.State != sluicev1alpha1.CheckStateReady || st.Reason != "Approved" ||
		!strings.Contains(st.Message, "e2e-admin") {
		t.Errorf("check state once approved = %+v, want Ready, Approved, naming e2e-admin", st)
	}
	waitPod(ctx, t, pod, "running once approved", running)

	// Withdraw the approval.
	cur := getWorkload(ctx, t, ns, wl.Name)
	patch = client.MergeFrom(cur.DeepCopy())
	delete(cur.Annotations, annotation)
	if err := k8s.Patch(ctx, cur, patch); err != nil {
		t.Fatalf("withdrawing approval of %s: %v", wl.Name, err)
	}
	waitGone(ctx, t, pod)
	waitEvictedBy(ctx, t, rec, wl.Name, check, "AwaitingApproval")
	for _, c := range rec.conditionsSeen(wl.Name, sluicev1alpha1.WorkloadEvicted) {
		t.Logf("Evicted condition: %s %s %q", c.Status, c.Reason, c.Message)
	}
}
