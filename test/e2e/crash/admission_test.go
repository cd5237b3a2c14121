package crash

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/test/fakecheck"
)

// caseTimeout bounds one case: a scenario, a crash and the recovery.
const caseTimeout = 2 * time.Minute

func ready() *checksv1.EvaluateResponse {
	return &checksv1.EvaluateResponse{State: checksv1.State_STATE_READY, Reason: "Ready", Message: "let in by the test"}
}

// TestCrashAdmission crashes a service on each step of one pod's way
// through a queue with one admission check (reservation and admission are
// two writes) to completion. However the crash falls, the pod runs once
// and ends Succeeded, its Workload Finished, with every decision taken
// once and every pod write made once.
func TestCrashAdmission(t *testing.T) {
	for _, point := range []string{
		"admitter/reserve", "admitter/admit", "grouper/submit", "grouper/ungate",
		"grouper/report-finish", "admitter/finish", "grouper/remove-finalizer",
	} {
		t.Run(point, func(t *testing.T) { crashAdmission(t, point) })
	}
}

func crashAdmission(t *testing.T, point string) {
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	defer cancel()

	// Scenario: a 1-cpu queue with a check that answers Ready, and one
	// 1-cpu pod that runs for 3s.
	ns := createNamespace(ctx, t, "admission")
	prov := fakecheck.StartT(t, fakecheck.WithDefaultAnswer(ready()))
	createCheck(ctx, t, ns+"-check", prov.Target())
	createQueues(ctx, t, ns, userQueue, ns, "1", ns+"-check")
	hist := record(ctx, t, ns, ns)
	before := requestCounts(ctx, t)

	// Crash point: armed before the pod exists, every point on its way
	// lies ahead.
	c := arm(ctx, t, point)
	pod := newPod(ns, "single", userQueue, "1", "3s")
	mustCreate(ctx, t, pod)
	c.waitHit(ctx, t)

	// End state.
	waitPod(ctx, t, pod, "Succeeded without sluice's finalizer", endedClean(corev1.PodSucceeded))
	wl := workloadOf(ctx, t, pod, "Finished", condIs(sluicev1alpha1.WorkloadFinished, metav1.ConditionTrue, sluicev1alpha1.ReasonSucceeded))
	settle(ctx, t, ns)
	writes := podWritesBetween(requestCounts(ctx, t), before)
	hist.stop()
	hist.check(t)

	if n := hist.transitions(wl.Name, sluicev1alpha1.WorkloadQuotaReserved); n != 1 {
		t.Errorf("workload went to QuotaReserved=True %d times, want exactly 1", n)
	}
	if n := hist.transitions(wl.Name, sluicev1alpha1.WorkloadAdmitted); n != 1 {
		t.Errorf("workload went to Admitted=True %d times, want exactly 1", n)
	}
	if q := hist.maxCPUReserved(); q.Cmp(resource.MustParse("1")) > 0 {
		t.Errorf("ClusterQueue reported %s cpu reserved, want at most the pod's 1", q.String())
	}
	if !writes.patches.is(2) {
		t.Errorf("the pod was patched %v times, want 2: one ungate and one finalizer removal", writes.patches)
	}
	if kwokStatus, _ := hist.kwokWrites(); !writes.statusPatches.is(kwokStatus) {
		t.Errorf("%v pod status patches, want only kwok's %d: the grouper has no pod status to write here", writes.statusPatches, kwokStatus)
	}
	if !writes.deletes.is(0) {
		t.Errorf("%v pod deletes, want none", writes.deletes)
	}
}
