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
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/test/e2e/e2eutil"
)

// createPriorityClass makes a WorkloadPriorityClass, as the cluster's
// operator, removed when the test ends.
func createPriorityClass(ctx context.Context, t *testing.T, name string, value int32) {
	t.Helper()
	class := &sluicev1alpha1.WorkloadPriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
	mustCreate(ctx, t, class)
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), class) })
}

// withLabel returns pod with label key set to value.
func withLabel(pod *corev1.Pod, key, value string) *corev1.Pod {
	pod.Labels[key] = value
	return pod
}

// TestWorkloadPriorityClassOrdersPods: of two pods waiting in one queue,
// the one whose WorkloadPriorityClass is worth more runs first although it
// was created last; neither pod's scheduling priority changes.
func TestWorkloadPriorityClassOrdersPods(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns, alice := cohortNamespace(ctx, t, "wpc-order")
	const cq = "wpc-order"
	createCohortQueue(ctx, t, ns, cq, "", createFlavor(ctx, t, "wpc-order-flavor"), "1", cpuLimits{})
	createPriorityClass(ctx, t, "wpc-order-routine", 10)
	createPriorityClass(ctx, t, "wpc-order-urgent", 1000)

	holder := queuedPod(ns, "holder", cq, "1")
	createAs(ctx, t, alice, holder)
	waitPod(ctx, t, holder, "running", running)

	routine := withLabel(queuedPod(ns, "routine", cq, "1"), podkeys.PriorityClassLabel, "wpc-order-routine")
	createAs(ctx, t, alice, routine)
	waitWorkloadOf(ctx, t, routine, "pending", waitsWith("insufficient quota"))
	urgent := withLabel(queuedPod(ns, "urgent", cq, "1"), podkeys.PriorityClassLabel, "wpc-order-urgent")
	createAs(ctx, t, alice, urgent)
	wl := waitWorkloadOf(ctx, t, urgent, "pending", waitsWith("insufficient quota"))
	if ref := wl.Spec.PriorityClassRef; ref == nil || ref.Kind != sluicev1alpha1.WorkloadPriorityClassKind ||
		ref.Name != "wpc-order-urgent" || wl.Spec.Priority == nil || *wl.Spec.Priority != 1000 {
		t.Fatalf("the urgent pod's Workload: %s", describe(wl))
	}

	accepted(ctx, t, alice, "delete", "pod", holder.Name, "-n", ns, "--wait=false")
	waitPod(ctx, t, urgent, "running once the holder is gone", running)
	if cur := getPod(ctx, t, routine); !hasGate(cur) {
		t.Fatal("the routine pod was ungated ahead of, or beside, the urgent one")
	}
	for _, p := range []*corev1.Pod{urgent, routine} {
		if cur := getPod(ctx, t, p); cur.Spec.Priority != nil && *cur.Spec.Priority != 0 {
			t.Errorf("pod %s has scheduling priority %d; a WorkloadPriorityClass must leave it alone", p.Name, *cur.Spec.Priority)
		}
	}
	accepted(ctx, t, alice, "delete", "pod", urgent.Name, "-n", ns, "--wait=false")
	waitPod(ctx, t, routine, "running once the urgent pod is gone", running)
}

// TestPriorityAndRunTimeLabelsRefused: a namespace's user cannot create a
// pod naming a WorkloadPriorityClass that does not exist, nor one with a
// run-time cap that is not a positive number of seconds, and cannot
// change either label on a pod that exists. A pod sluice does not queue is
// not held to these rules.
func TestPriorityAndRunTimeLabelsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns, alice := cohortNamespace(ctx, t, "wpc-refused")
	const cq = "wpc-refused"
	createCohortQueue(ctx, t, ns, cq, "", createFlavor(ctx, t, "wpc-refused-flavor"), "1", cpuLimits{})
	createPriorityClass(ctx, t, "wpc-refused-batch", 5)
	createPriorityClass(ctx, t, "wpc-refused-urgent", 500)

	missing := withLabel(queuedPod(ns, "missing", cq, "1"), podkeys.PriorityClassLabel, "wpc-refused-nope")
	out, err := alice.KubectlStdin(ctx, podYAML(t, missing), "create", "-f", "-")
	if err == nil || !containsAll(out+err.Error(), "metadata.labels[kueue.x-k8s.io/priority-class]", `WorkloadPriorityClass "wpc-refused-nope" does not exist`) {
		t.Fatalf("a pod naming a missing class: %v\n%s", err, out)
	}
	for _, value := range []string{"0", "-5", "soon"} {
		capped := withLabel(queuedPod(ns, "capped", cq, "1"), podkeys.MaxExecTimeLabel, value)
		out, err := alice.KubectlStdin(ctx, podYAML(t, capped), "create", "-f", "-")
		if err == nil || !strings.Contains(out+err.Error(), "metadata.labels[kueue.x-k8s.io/max-exec-time-seconds]") {
			t.Fatalf("a pod with max-exec-time-seconds %q: %v\n%s", value, err, out)
		}
	}

	holder := queuedPod(ns, "holder", cq, "1")
	createAs(ctx, t, alice, holder)
	queued := withLabel(queuedPod(ns, "queued", cq, "1"), podkeys.PriorityClassLabel, "wpc-refused-batch")
	queued.Labels[podkeys.MaxExecTimeLabel] = "600"
	createAs(ctx, t, alice, queued)
	waitWorkloadOf(ctx, t, queued, "pending", waitsWith("insufficient quota"))
	for _, change := range [][]string{
		{"label", "pod", queued.Name, "--overwrite", podkeys.PriorityClassLabel + "=wpc-refused-urgent"},
		{"label", "pod", queued.Name, podkeys.PriorityClassLabel + "-"},
		{"label", "pod", queued.Name, "--overwrite", podkeys.MaxExecTimeLabel + "=60"},
		{"label", "pod", holder.Name, podkeys.PriorityClassLabel + "=wpc-refused-urgent"},
	} {
		refused(ctx, t, alice, []string{"metadata.labels[kueue.x-k8s.io/"}, append(change, "-n", ns)...)
	}

	// Not sluice's pod: its labels are its own business.
	unqueued := newPod(ns, "unqueued", "10m", "")
	delete(unqueued.Labels, podkeys.QueueNameLabel)
	unqueued.Labels[podkeys.PriorityClassLabel] = "wpc-refused-nope"
	unqueued.Labels[podkeys.MaxExecTimeLabel] = "soon"
	createAs(ctx, t, alice, unqueued)
	if cur := getPod(ctx, t, unqueued); hasGate(cur) {
		t.Fatal("sluice gated a pod it does not queue")
	}
}

// TestMaximumExecutionTime: a single pod and a group that run past their
// kueue.x-k8s.io/max-exec-time-seconds are evicted and deactivated, the
// group whole; the single pod is deleted for good, the group's Workload
// stays, inactive, for its pods to come back.
func TestMaximumExecutionTime(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns, alice := cohortNamespace(ctx, t, "max-exec")
	const cq = "max-exec"
	createCohortQueue(ctx, t, ns, cq, "", createFlavor(ctx, t, "max-exec-flavor"), "4", cpuLimits{})
	rec := recordEvents(ctx, t, ns, cq)
	defer rec.stop()

	single := withLabel(queuedPod(ns, "single", cq, "1"), podkeys.MaxExecTimeLabel, "3")
	createAs(ctx, t, alice, single)
	var group []*corev1.Pod
	for i := range 2 {
		p := groupPod(ns, "capped", fmt.Sprintf("rank-%d", i), "1", 2, nil)
		p.Labels[podkeys.QueueNameLabel] = cq
		p.Labels[podkeys.MaxExecTimeLabel] = "3"
		createAs(ctx, t, alice, p)
		group = append(group, p)
	}
	singleWl := waitWorkloadOf(ctx, t, single, "admitted", admitted)
	groupWl := waitWorkloadOf(ctx, t, group[0], "admitted", admitted)
	for _, wl := range []*sluicev1alpha1.Workload{singleWl, groupWl} {
		if wl.Spec.MaximumExecutionTimeSeconds == nil || *wl.Spec.MaximumExecutionTimeSeconds != 3 {
			t.Fatalf("workload %s does not carry the pods' cap: %s", wl.Name, describe(wl))
		}
	}

	for _, p := range append([]*corev1.Pod{single}, group...) {
		if err := e2eutil.WaitGone(ctx, k8s, p, time.Minute); err != nil {
			t.Fatalf("pod %s still there past its maximum execution time: %v", p.Name, err)
		}
	}
	for _, wl := range []*sluicev1alpha1.Workload{singleWl, groupWl} {
		waitEvictedFor(ctx, t, rec, wl.Name, sluicev1alpha1.ReasonMaximumExecutionTimeExceeded, "maximum execution time")
	}
	var cur sluicev1alpha1.Workload
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(groupWl), &cur); err != nil {
			return false, nil
		}
		return cur.Spec.Active != nil && !*cur.Spec.Active && cur.Status.Admission == nil &&
			!meta.IsStatusConditionTrue(cur.Status.Conditions, sluicev1alpha1.WorkloadQuotaReserved), nil
	})
	if err != nil {
		t.Fatalf("the group's Workload is not inactive without quota: %s", describe(&cur))
	}
}
