package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/test/harness"
)

// defaultReplacementWindow is the admitter's documented default (see
// docs/grouper.md, "No pods left"); the suite runs the admitter without
// --pod-group-replacement-window and the queue sets none.
const defaultReplacementWindow = 30 * time.Second

// TestEmptyGroupGivesItsQuotaBack: a user deletes every pod of a running
// group (kubectl delete pods -l <group label>). The group keeps its quota
// for the default replacement window, in which its pods could come back;
// once the window passed with no pod, its Workload goes and the quota with
// it, and the group waiting in the queue is admitted.
func TestEmptyGroupGivesItsQuotaBack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ns := createNamespace(ctx, t, "emptied")
	createQueues(ctx, t, ns, "emptied", "2") // room for one group of two
	alice := newUser(ctx, t, ns, "alice", []string{"edit"}, append(slices.Clone(editPods),
		harness.Access{Verb: "list", Resource: "pods"}, harness.Access{Verb: "delete", Resource: "pods"})...)
	rec := recordEvents(ctx, t, ns, "emptied")
	defer rec.stop()

	long := map[string]string{"kwok.sluice.dev/run-for": "10m"}
	first := []*corev1.Pod{groupPod(ns, "first", "first-a", "1", 2, long), groupPod(ns, "first", "first-b", "1", 2, long)}
	second := []*corev1.Pod{groupPod(ns, "second", "second-a", "1", 2, long), groupPod(ns, "second", "second-b", "1", 2, long)}
	for _, p := range first {
		createAs(ctx, t, alice, p)
	}
	for _, p := range first {
		waitPod(ctx, t, p, "Running", running)
	}
	admitted := waitWorkloadOf(ctx, t, first[0], "Admitted", func(w *sluicev1alpha1.Workload) bool {
		return meta.IsStatusConditionTrue(w.Status.Conditions, sluicev1alpha1.WorkloadAdmitted)
	})
	for _, p := range second {
		createAs(ctx, t, alice, p)
	}
	waitWorkloadOf(ctx, t, second[0], "pending for quota", waitsForQuota)

	// Every pod of the first group goes; none is left Terminating.
	accepted(ctx, t, alice, "delete", "pods", "-l", podkeys.PodGroupNameLabel+"=first")
	for _, p := range first {
		waitDeleted(ctx, t, p)
	}
	held := waitWorkloadOf(ctx, t, first[0], "holding its quota with no pods", func(w *sluicev1alpha1.Workload) bool {
		c := meta.FindStatusCondition(w.Status.Conditions, sluicev1alpha1.WorkloadWaitingForReplacementPods)
		return w.Status.Admission != nil && c != nil && c.Status == metav1.ConditionTrue && c.Reason == sluicev1alpha1.ReasonNoPods
	})
	if held.UID != admitted.UID {
		t.Fatalf("the group's Workload was recreated (uid %s, was %s)", held.UID, admitted.UID)
	}
	c := meta.FindStatusCondition(held.Status.Conditions, sluicev1alpha1.WorkloadWaitingForReplacementPods)
	end := c.LastTransitionTime.Add(defaultReplacementWindow)
	if !strings.Contains(c.Message, end.UTC().Format(time.RFC3339)) {
		t.Fatalf("WaitingForReplacementPods message %q does not say the quota is held until %s", c.Message, end.UTC().Format(time.RFC3339))
	}

	// Through the window the group keeps its admission and its quota, and
	// the waiting group stays out; after it, the Workload goes promptly.
	var goneAt time.Time
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, defaultReplacementWindow+time.Minute, true, func(ctx context.Context) (bool, error) {
		now := time.Now()
		var cur sluicev1alpha1.Workload
		err := k8s.Get(ctx, client.ObjectKeyFromObject(held), &cur)
		switch {
		case apierrors.IsNotFound(err) || (err == nil && cur.DeletionTimestamp != nil):
			goneAt = now
			return true, nil
		case err != nil:
			return false, nil
		case cur.Status.Admission == nil:
			t.Fatalf("the emptied group lost its admission without its Workload being deleted: %s", describe(&cur))
		}
		var next sluicev1alpha1.Workload
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "second"}, &next); err == nil && next.Status.Admission != nil {
			t.Fatalf("the waiting group was reserved at %s, while the emptied group held its quota until %s", now, end)
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the emptied group's Workload was never deleted: %v", err)
	}
	if goneAt.Before(end) {
		t.Fatalf("the emptied group's Workload was deleted at %s, before its replacement window ended at %s", goneAt, end)
	}
	if late := goneAt.Sub(end); late > 15*time.Second {
		t.Errorf("the emptied group's Workload was deleted %s after its window ended, want promptly", late)
	}
	waitWorkloadGone(ctx, t, ns, "first")

	// Its quota is the waiting group's now.
	for _, p := range second {
		waitPod(ctx, t, p, "Running", running)
	}
	waitClusterQueue(ctx, t, "emptied", "the second group's 2 cpu reserved", func(cq *sluicev1alpha1.ClusterQueue) bool {
		q := cpuReserved(cq)
		return q.Cmp(resource.MustParse("2")) == 0 && cq.Status.ReservingWorkloads == 1
	})
	if q := rec.maxCPUReserved(); q.Cmp(resource.MustParse("2")) > 0 {
		t.Errorf("ClusterQueue reported %s cpu reserved, want at most one group's 2: the quota was given to the second group twice", q.String())
	}
	if n := rec.transitions("first", sluicev1alpha1.WorkloadQuotaReserved); n != 1 {
		t.Errorf("the emptied group reserved quota %d times, want once", n)
	}
}
