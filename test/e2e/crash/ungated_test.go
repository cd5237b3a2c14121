package crash

import (
	"context"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
)

// TestCrashUngatedWithoutAdmission crashes the grouper on each step of
// stopping a pod someone removed sluice's gate from (an administrator,
// whom the admission policy lets through): marked DisruptionTarget, then
// deleted. Whether the grouper dies between the two writes or after both,
// the restarted grouper reads the same state from the pod and ends it: the
// pod is marked and deleted once, its workload ends, and the pod that
// holds the queue's quota runs on.
func TestCrashUngatedWithoutAdmission(t *testing.T) {
	for _, point := range []string{"grouper/disrupt", "grouper/delete"} {
		t.Run(point, func(t *testing.T) { crashUngated(t, point) })
	}
}

func crashUngated(t *testing.T, point string) {
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	defer cancel()

	// Scenario: a 1-cpu queue; P1 runs and holds it, P2 waits, gated;
	// then someone removes P2's gate by hand.
	ns := createNamespace(ctx, t, "ungated")
	createQueues(ctx, t, ns, userQueue, ns, "1")
	hist := record(ctx, t, ns, ns)
	p1 := newPod(ns, "p1", userQueue, "1", "")
	mustCreate(ctx, t, p1)
	waitPod(ctx, t, p1, "Running", phaseIs(corev1.PodRunning))
	p2 := newPod(ns, "p2", userQueue, "1", "")
	mustCreate(ctx, t, p2)
	wl2 := workloadOf(ctx, t, p2, "waiting for quota", condIs(sluicev1alpha1.WorkloadQuotaReserved, metav1.ConditionFalse, ""))

	c := arm(ctx, t, point)
	removeGate(ctx, t, p2)
	c.waitHit(ctx, t)

	// End state: P2 gone, and its workload with it (the garbage collector
	// deletes a single pod's Workload once the pod is gone, so the
	// workload's end is judged by its history), P1 still running.
	waitGone(ctx, t, p2)
	waitGone(ctx, t, wl2)
	if cur := currentPod(ctx, t, p1); cur.Status.Phase != corev1.PodRunning || cur.DeletionTimestamp != nil {
		t.Errorf("P1 is %s (deleting: %t), want it running", cur.Status.Phase, cur.DeletionTimestamp != nil)
	}
	settle(ctx, t, ns)
	hist.stop()
	hist.check(t)
	finished, ok := first(hist.workloadEvents(wl2.Name), func(e event[*sluicev1alpha1.Workload]) bool {
		return e.typ != watch.Deleted && isTrue(e.obj, sluicev1alpha1.WorkloadFinished)
	})
	if !ok {
		t.Errorf("P2's workload never Finished")
	} else if r := condReason(finished.obj, sluicev1alpha1.WorkloadFinished); r != sluicev1alpha1.ReasonFailed {
		t.Errorf("P2's workload Finished with reason %q, want %q", r, sluicev1alpha1.ReasonFailed)
	}

	p2Events := hist.podEvents(p2.Name)
	var marks, deletions int
	var markedAt, deletedAt uint64
	var wasMarked bool
	for i, e := range p2Events {
		if e.typ == watch.Deleted {
			continue
		}
		if c := podCondition(e.obj, corev1.DisruptionTarget); c != nil && c.Status == corev1.ConditionTrue && c.Reason == disruptionReason {
			if i == 0 || podCondition(p2Events[i-1].obj, corev1.DisruptionTarget) == nil {
				marks++
				markedAt, wasMarked = e.rev, true
			}
		}
		if e.obj.DeletionTimestamp != nil && (i == 0 || p2Events[i-1].obj.DeletionTimestamp == nil) {
			deletions++
			deletedAt = e.rev
		}
	}
	if marks != 1 || deletions != 1 {
		t.Errorf("P2 was marked DisruptionTarget %d times and deleted %d times, want once each", marks, deletions)
	}
	if wasMarked && markedAt > deletedAt {
		t.Errorf("P2 was deleted (revision %d) before it was marked (revision %d)", deletedAt, markedAt)
	}
	if q := hist.maxCPUReserved(); q.Cmp(resource.MustParse("1")) > 0 {
		t.Errorf("ClusterQueue reported %s cpu reserved, want at most its 1 cpu quota", q.String())
	}
	if n := hist.ungates(p1.Name); n != 1 {
		t.Errorf("P1 was ungated %d times, want 1", n)
	}
}

// removeGate removes sluice's gate, and nothing else, from pod's current
// version, as an administrator would by hand.
func removeGate(ctx context.Context, t *testing.T, pod *corev1.Pod) {
	t.Helper()
	cur := currentPod(ctx, t, pod)
	for i, g := range cur.Spec.SchedulingGates {
		if g.Name != podkeys.AdmissionGate {
			continue
		}
		path := "/spec/schedulingGates/" + strconv.Itoa(i)
		patch := []byte(`[{"op":"test","path":"` + path + `/name","value":"` + podkeys.AdmissionGate + `"},{"op":"remove","path":"` + path + `"}]`)
		if err := k8s.Patch(ctx, cur, client.RawPatch(types.JSONPatchType, patch)); err != nil {
			t.Fatalf("removing the gate of %s: %v", pod.Name, err)
		}
		return
	}
	t.Fatalf("%s has no gate %s", pod.Name, podkeys.AdmissionGate)
}
