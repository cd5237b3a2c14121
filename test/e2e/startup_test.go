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
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

// setStartupDeadline gives ClusterQueue name a start-up deadline.
func setStartupDeadline(ctx context.Context, t *testing.T, name string, w *sluicev1alpha1.WaitForPodsReady) {
	t.Helper()
	var cq sluicev1alpha1.ClusterQueue
	if err := k8s.Get(ctx, client.ObjectKey{Name: name}, &cq); err != nil {
		t.Fatal(err)
	}
	cq.Spec.WaitForPodsReady = w
	if err := k8s.Update(ctx, &cq); err != nil {
		t.Fatal(err)
	}
}

// unschedulableGroup is a group of three pods that no node can take.
func unschedulableGroup(ns, prefix string) []*corev1.Pod {
	var pods []*corev1.Pod
	for i := range 3 {
		p := groupPod(ns, "stuck", fmt.Sprintf("%s-%d", prefix, i), "500m", 3, map[string]string{"kwok.sluice.dev/run-for": "10m"})
		p.Spec.NodeSelector = map[string]string{"sluice.dev/no-such-node": "true"}
		pods = append(pods, p)
	}
	return pods
}

func evictedFor(reason string) func(*sluicev1alpha1.Workload) bool {
	return func(w *sluicev1alpha1.Workload) bool {
		c := meta.FindStatusCondition(w.Status.Conditions, sluicev1alpha1.WorkloadEvicted)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == reason
	}
}

// TestStartupDeadlineEvictsGroupWhole: a group admitted in a queue with a
// start-up deadline whose pods cannot be scheduled misses it: every pod
// is deleted, and the Workload is evicted with reason PodsReadyTimeout and
// requeued with backoff. Its pods created again (as a framework would)
// are admitted only after requeueAt; missing the deadline beyond
// backoffLimitCount deactivates the Workload.
func TestStartupDeadlineEvictsGroupWhole(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := createNamespace(ctx, t, "startup-miss")
	createQueues(ctx, t, ns, "startup-miss", "4")
	setStartupDeadline(ctx, t, "startup-miss", &sluicev1alpha1.WaitForPodsReady{
		Timeout: metav1.Duration{Duration: 3 * time.Second}, Condition: sluicev1alpha1.PodsScheduled,
		RequeuingStrategy: &sluicev1alpha1.RequeuingStrategy{BackoffBaseSeconds: ptr.To[int32](4), BackoffLimitCount: ptr.To[int32](1)},
	})

	first := unschedulableGroup(ns, "a")
	for _, p := range first {
		mustCreate(ctx, t, p)
	}
	for _, p := range first {
		waitPod(ctx, t, p, "ungated", func(p *corev1.Pod) bool { return !hasGate(p) })
	}
	for _, p := range first {
		waitDeleted(ctx, t, p)
	}
	evicted := waitWorkloadOf(ctx, t, first[0], "evicted for the deadline, waiting for its pods", func(w *sluicev1alpha1.Workload) bool {
		return evictedFor(sluicev1alpha1.ReasonPodsReadyTimeout)(w) &&
			meta.IsStatusConditionFalse(w.Status.Conditions, sluicev1alpha1.WorkloadQuotaReserved)
	})
	rs := evicted.Status.RequeueState
	if rs == nil || ptr.Deref(rs.Count, 0) != 1 || rs.RequeueAt == nil {
		t.Fatalf("requeueState %+v, want count 1 and requeueAt set: %s", rs, describe(evicted))
	}
	if msg := meta.FindStatusCondition(evicted.Status.Conditions, sluicev1alpha1.WorkloadEvicted).Message; !strings.Contains(msg, "3s") {
		t.Fatalf("Evicted message %q does not name the timeout", msg)
	}
	waitClusterQueue(ctx, t, "startup-miss", "no quota held", cpuReservedIsZero)

	second := unschedulableGroup(ns, "b")
	for _, p := range second {
		mustCreate(ctx, t, p)
	}
	for _, p := range second {
		waitPod(ctx, t, p, "ungated again", func(p *corev1.Pod) bool { return !hasGate(p) })
	}
	again := getWorkload(ctx, t, ns, "stuck")
	if at := meta.FindStatusCondition(again.Status.Conditions, sluicev1alpha1.WorkloadQuotaReserved).LastTransitionTime; at.Before(rs.RequeueAt) {
		t.Fatalf("reserved again at %s, before requeueAt %s", at, rs.RequeueAt)
	}
	for _, p := range second {
		waitDeleted(ctx, t, p)
	}
	last := waitWorkloadOf(ctx, t, second[0], "deactivated", func(w *sluicev1alpha1.Workload) bool {
		return !ptr.Deref(w.Spec.Active, true) && evictedFor(sluicev1alpha1.ReasonRequeuingLimitExceeded)(w)
	})
	if last.UID != evicted.UID {
		t.Fatalf("the group's Workload was recreated (uid %s, was %s)", last.UID, evicted.UID)
	}
	waitClusterQueue(ctx, t, "startup-miss", "no quota held after the deactivation", cpuReservedIsZero)
	body, err := sluice.Admitter.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if series := `sluice_admitter_pods_ready_timeout_evictions_total{cluster_queue="startup-miss"} 2`; !strings.Contains(body, series) {
		t.Errorf("admitter metrics lack %q", series)
	}
}

// TestStartupDeadlineKeptByGroup: a group whose pods become Ready in time
// gets PodsReady=True and runs past its deadline to its end.
func TestStartupDeadlineKeptByGroup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := createNamespace(ctx, t, "startup-kept")
	createQueues(ctx, t, ns, "startup-kept", "4")
	const timeout = 8 * time.Second
	setStartupDeadline(ctx, t, "startup-kept", &sluicev1alpha1.WaitForPodsReady{Timeout: metav1.Duration{Duration: timeout}})

	run := map[string]string{"kwok.sluice.dev/run-for": "15s"}
	pods := []*corev1.Pod{
		groupPod(ns, "quick", "q-0", "500m", 3, run),
		groupPod(ns, "quick", "q-1", "500m", 3, run),
		groupPod(ns, "quick", "q-2", "500m", 3, run),
	}
	for _, p := range pods {
		mustCreate(ctx, t, p)
	}
	started := waitWorkloadOf(ctx, t, pods[0], "PodsReady", func(w *sluicev1alpha1.Workload) bool {
		return meta.IsStatusConditionTrue(w.Status.Conditions, sluicev1alpha1.WorkloadPodsReady)
	})
	deadline := meta.FindStatusCondition(started.Status.Conditions, sluicev1alpha1.WorkloadAdmitted).LastTransitionTime.Add(timeout)
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		w := getWorkload(ctx, t, ns, "quick")
		if meta.IsStatusConditionTrue(w.Status.Conditions, sluicev1alpha1.WorkloadEvicted) {
			return false, fmt.Errorf("evicted although its pods started: %s", describe(w))
		}
		return time.Now().After(deadline.Add(time.Second)), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		waitPod(ctx, t, p, "Succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
	}
	waitGroupEnded(ctx, t, "startup-kept", pods, sluicev1alpha1.ReasonSucceeded)
}
