package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/test/e2e/e2eutil"
	"github.com/sluice-dev/sluice/test/harness"
)

// setClusterQueueStopPolicy sets a ClusterQueue's stopPolicy, as its
// operator.
func setClusterQueueStopPolicy(ctx context.Context, t *testing.T, name string, p sluicev1alpha1.StopPolicy) {
	t.Helper()
	cq := &sluicev1alpha1.ClusterQueue{ObjectMeta: metav1.ObjectMeta{Name: name}}
	patch := client.RawPatch(client.Merge.Type(), []byte(fmt.Sprintf(`{"spec":{"stopPolicy":%q}}`, p)))
	if err := k8s.Patch(ctx, cq, patch); err != nil {
		t.Fatalf("setting stopPolicy %s on ClusterQueue %s: %v", p, name, err)
	}
}

// waitEvictedFor waits until the recorded history of the named workload
// holds Evicted=True with reason and a message containing text.
func waitEvictedFor(ctx context.Context, t *testing.T, rec *recorder, name, reason, text string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		for _, c := range rec.conditionsSeen(name, sluicev1alpha1.WorkloadEvicted) {
			if c.Status == metav1.ConditionTrue && c.Reason == reason && strings.Contains(c.Message, text) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("workload %s was never evicted with reason %s saying %q; Evicted conditions seen: %+v",
			name, reason, text, rec.conditionsSeen(name, sluicev1alpha1.WorkloadEvicted))
	}
}

// TestHoldAndDrainSinglePod: an operator drains a ClusterQueue. Its
// running single pod is deleted for good — nothing creates a plain pod
// again — and its Workload says so; a pod created while the queue is
// stopped waits, and runs once the queue admits again.
func TestHoldAndDrainSinglePod(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns, alice := cohortNamespace(ctx, t, "drain-single")
	const cq = "drain-single"
	flavor := createFlavor(ctx, t, "drain-single-flavor")
	createCohortQueue(ctx, t, ns, cq, "", flavor, "4", cpuLimits{})
	rec := recordEvents(ctx, t, ns, cq)
	defer rec.stop()

	pod := queuedPod(ns, "p", cq, "1")
	createAs(ctx, t, alice, pod)
	waitPod(ctx, t, pod, "running", running)
	wl := waitWorkloadOf(ctx, t, pod, "admitted", admitted)

	setClusterQueueStopPolicy(ctx, t, cq, sluicev1alpha1.HoldAndDrain)
	if err := e2eutil.WaitGone(ctx, k8s, pod, time.Minute); err != nil {
		t.Fatalf("the drained pod is still there: %v", err)
	}
	waitEvictedFor(ctx, t, rec, wl.Name, sluicev1alpha1.ReasonClusterQueueStopped,
		"ClusterQueue "+cq+" drains (stopPolicy HoldAndDrain): the pod is deleted and does not run again")

	again := queuedPod(ns, "p-again", cq, "1")
	createAs(ctx, t, alice, again)
	waitWorkloadOf(ctx, t, again, "waiting while the queue is stopped", waitsWith("ClusterQueue "+cq+" is inactive", "stopPolicy HoldAndDrain"))
	if cur := getPod(ctx, t, again); !hasGate(cur) {
		t.Fatal("a pod of a draining queue was ungated")
	}
	setClusterQueueStopPolicy(ctx, t, cq, sluicev1alpha1.None)
	waitPod(ctx, t, again, "running once the queue admits again", running)
}

// TestHoldAndDrainGroupOfALocalQueue: a namespace's user drains their
// LocalQueue. The running group's pods are all deleted; its Workload says
// why and waits for them; once the queue admits again and the pods are
// created again, the group runs again, whole.
func TestHoldAndDrainGroupOfALocalQueue(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns, alice := cohortNamespace(ctx, t, "drain-group")
	const cq = "drain-group"
	flavor := createFlavor(ctx, t, "drain-group-flavor")
	createCohortQueue(ctx, t, ns, cq, "", flavor, "4", cpuLimits{})
	if err := alice.WaitAllowed(ctx, harness.Access{Verb: "patch", Group: "sluice.dev", Resource: "localqueues"}); err != nil {
		t.Fatal(err)
	}
	rec := recordEvents(ctx, t, ns, cq)
	defer rec.stop()

	group := func() []*corev1.Pod {
		var pods []*corev1.Pod
		for i := range 2 {
			p := groupPod(ns, "ranks", fmt.Sprintf("rank-%d", i), "1", 2, nil)
			p.Labels[podkeys.QueueNameLabel] = cq
			pods = append(pods, p)
		}
		return pods
	}
	pods := group()
	for _, p := range pods {
		createAs(ctx, t, alice, p)
	}
	for _, p := range pods {
		waitPod(ctx, t, p, "running", running)
	}
	wl := waitWorkloadOf(ctx, t, pods[0], "admitted", admitted)

	accepted(ctx, t, alice, "patch", "localqueue", cq, "--type=merge", "-p", `{"spec":{"stopPolicy":"HoldAndDrain"}}`)
	for _, p := range pods {
		if err := e2eutil.WaitGone(ctx, k8s, p, time.Minute); err != nil {
			t.Fatalf("pod %s of the drained group is still there: %v", p.Name, err)
		}
	}
	waitEvictedFor(ctx, t, rec, wl.Name, sluicev1alpha1.ReasonLocalQueueStopped,
		"LocalQueue "+cq+" drains (stopPolicy HoldAndDrain): the group's pods are deleted; it queues again once they are all created again")
	waitGroupWaitsForPods(ctx, t, wl, "drained")

	accepted(ctx, t, alice, "patch", "localqueue", cq, "--type=merge", "-p", `{"spec":{"stopPolicy":"None"}}`)
	pods = group()
	for _, p := range pods {
		createAs(ctx, t, alice, p)
	}
	for _, p := range pods {
		waitPod(ctx, t, p, "running again", running)
	}
	if got := waitWorkloadOf(ctx, t, pods[0], "admitted again", admitted); got.UID != wl.UID {
		t.Errorf("the group came back as a new Workload (uid %s, was %s)", got.UID, wl.UID)
	}
}
