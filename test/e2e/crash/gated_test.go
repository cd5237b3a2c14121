package crash

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/test/fakecheck"
)

// TestCrashGatedEviction crashes a service on each step of evicting a
// Workload that was admitted while no grouper ran, so its pod is still
// gated: nothing runs, the grouper says so, the quota and the check's
// reservation are released, and the Workload stays out until the user
// reactivates it; then it runs once.
func TestCrashGatedEviction(t *testing.T) {
	for _, point := range []string{"admitter/evict", "grouper/report-stopped", "admitter/release"} {
		t.Run(point, func(t *testing.T) { crashGatedEviction(t, point) })
	}
}

func crashGatedEviction(t *testing.T, point string) {
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	defer cancel()

	// Scenario: a 1-cpu queue with a check the test answers, one pod.
	ns := createNamespace(ctx, t, "gated")
	prov := fakecheck.StartT(t, fakecheck.WithCapabilities(
		checksv1.Capability_CAPABILITY_POD_SET_UPDATES, checksv1.Capability_CAPABILITY_RELEASE))
	createCheck(ctx, t, ns+"-check", prov.Target())
	createQueues(ctx, t, ns, userQueue, ns, "1", ns+"-check")
	hist := record(ctx, t, ns, ns)
	before := requestCounts(ctx, t)
	pod := newPod(ns, "gated", userQueue, "1", "2s")
	mustCreate(ctx, t, pod)
	wl := workloadOf(ctx, t, pod, "reserved", condIs(sluicev1alpha1.WorkloadQuotaReserved, metav1.ConditionTrue, ""))
	if err := prov.WaitEvaluated(ctx, ns, wl.Name, 1); err != nil {
		t.Fatalf("the check was never asked: %v", err)
	}
	// Without a grouper the admission cannot reach the pod.
	t.Cleanup(func() { ensureRunning(t, sluice.Grouper, false) })
	if err := sluice.Grouper.Kill(); err != nil {
		t.Fatal(err)
	}
	prov.SetDefaultAnswer(ready())
	wl = waitWorkload(ctx, t, wl, "Admitted", condIs(sluicev1alpha1.WorkloadAdmitted, metav1.ConditionTrue, ""))
	if cur := currentPod(ctx, t, pod); !gated(cur) {
		t.Fatal("pod was ungated with no grouper running")
	}
	key := evaluationKey(t, prov, wl)

	var c *crash
	if point == "admitter/evict" {
		c = arm(ctx, t, point)
	}
	setActive(ctx, t, wl, false)
	if c != nil {
		c.waitHit(ctx, t)
	}
	waitWorkload(ctx, t, wl, "evicting with its quota held", func(w *sluicev1alpha1.Workload) error {
		if err := condIs(sluicev1alpha1.WorkloadEvicted, metav1.ConditionTrue, sluicev1alpha1.ReasonInactive)(w); err != nil {
			return err
		}
		if !holdsQuota(w) {
			return errNotHeld
		}
		return nil
	})
	// The grouper comes back and finds nothing running.
	if point == "grouper/report-stopped" {
		c = arm(ctx, t, point)
	} else {
		if point == "admitter/release" {
			c = arm(ctx, t, point)
		}
		// Not waiting for readiness: the admitter it reports to may be
		// about to crash.
		if err := sluice.Grouper.Start(); err != nil {
			t.Fatal(err)
		}
	}
	if point != "admitter/evict" {
		c.waitHit(ctx, t)
	}
	if err := sluice.Grouper.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}

	// End state of the eviction: released, inactive, the pod untouched.
	waitWorkload(ctx, t, wl, "released and inactive", func(w *sluicev1alpha1.Workload) error {
		if err := condIs(sluicev1alpha1.WorkloadQuotaReserved, metav1.ConditionFalse, "")(w); err != nil {
			return err
		}
		if err := condIs(sluicev1alpha1.WorkloadEvicted, metav1.ConditionTrue, "")(w); err != nil {
			return err
		}
		if w.Status.Admission != nil || w.Spec.Active == nil || *w.Spec.Active {
			return errNotReleased
		}
		return nil
	})
	if cur := currentPod(ctx, t, pod); !gated(cur) || !hasFinalizer(cur) {
		t.Errorf("evicted pod: gates %v finalizers %v, want still gated with sluice's finalizer", cur.Spec.SchedulingGates, cur.Finalizers)
	}
	waitReserved(ctx, t, ns, "0")
	if err := prov.WaitReleased(ctx, key); err != nil {
		t.Errorf("the check's reservation was never released: %v", err)
	}

	// Reactivated, it goes through again and runs.
	setActive(ctx, t, wl, true)
	waitPod(ctx, t, pod, "Succeeded without sluice's finalizer", endedClean(corev1.PodSucceeded))
	waitWorkload(ctx, t, wl, "Finished", condIs(sluicev1alpha1.WorkloadFinished, metav1.ConditionTrue, sluicev1alpha1.ReasonSucceeded))
	settle(ctx, t, ns)
	writes := podWritesBetween(requestCounts(ctx, t), before)
	hist.stop()
	hist.check(t)

	if n := hist.transitions(wl.Name, sluicev1alpha1.WorkloadAdmitted); n != 2 {
		t.Errorf("workload went to Admitted=True %d times, want 2: before the eviction and after the reactivation", n)
	}
	if n := hist.ungates(pod.Name); n != 1 {
		t.Errorf("pod was ungated %d times, want 1", n)
	}
	if !writes.patches.is(2) {
		t.Errorf("the pod was patched %v times, want 2: one ungate and one finalizer removal", writes.patches)
	}
	if q := hist.maxCPUReserved(); q.Cmp(resource.MustParse("1")) > 0 {
		t.Errorf("ClusterQueue reported %s cpu reserved, want at most the pod's 1", q.String())
	}
}

func currentPod(ctx context.Context, t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	var cur corev1.Pod
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(pod), &cur); err != nil {
		t.Fatalf("getting pod %s: %v", pod.Name, err)
	}
	return &cur
}

// evaluationKey is the key the check saw for wl's current reservation.
func evaluationKey(t *testing.T, prov *fakecheck.Provider, wl *sluicev1alpha1.Workload) string {
	t.Helper()
	var key string
	for _, c := range prov.Calls() {
		if c.GetWorkload().GetNamespace() == wl.Namespace && c.GetWorkload().GetName() == wl.Name {
			key = c.GetEvaluationKey()
		}
	}
	if key == "" {
		t.Fatalf("the check was never asked about workload %s", wl.Name)
	}
	return key
}
