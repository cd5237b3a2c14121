package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/test/e2e/e2eutil"
)

// groupPod is a pod of group name of total pods, asking for cpu.
func groupPod(ns, group, name, cpu string, total int, kwok map[string]string) *corev1.Pod {
	p := newPod(ns, name, cpu, "")
	delete(p.Annotations, "kwok.sluice.dev/run-for")
	for k, v := range kwok {
		p.Annotations[k] = v
	}
	p.Labels[podkeys.PodGroupNameLabel] = group
	p.Annotations[podkeys.PodGroupTotalCountAnnotation] = fmt.Sprint(total)
	return p
}

// TestStory2GroupAdmittedWhole: a master and two workers created
// beforehand are one workload with a pod set per role. While the queue
// cannot hold all three, none starts; once it can, all three are ungated,
// and the group finishes as a success when every pod succeeded, freeing
// the quota.
func TestStory2GroupAdmittedWhole(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := createNamespace(ctx, t, "story2")
	createQueues(ctx, t, ns, "story2", "1500m") // the group needs 2

	run := map[string]string{"kwok.sluice.dev/run-for": "2s"}
	pods := []*corev1.Pod{
		groupPod(ns, "train", "master", "1", 3, run),
		groupPod(ns, "train", "worker-0", "500m", 3, run),
		groupPod(ns, "train", "worker-1", "500m", 3, run),
	}
	for _, p := range pods {
		mustCreate(ctx, t, p)
	}
	wl := waitWorkloadOf(ctx, t, pods[0], "pending for lack of quota", func(w *sluicev1alpha1.Workload) bool {
		c := meta.FindStatusCondition(w.Status.Conditions, sluicev1alpha1.WorkloadQuotaReserved)
		return c != nil && c.Reason == sluicev1alpha1.ReasonPending
	})
	if wl.Name != "train" || len(wl.Spec.PodSets) != 2 || len(wl.OwnerReferences) != 0 || wl.Labels[sluicev1alpha1.PodGroupLabel] != "train" {
		t.Fatalf("workload %s: %d pod sets, owners %v, labels %v; want train with 2 pod sets (master, workers), no owners, labelled with its group",
			wl.Name, len(wl.Spec.PodSets), wl.OwnerReferences, wl.Labels)
	}
	counts := []int32{wl.Spec.PodSets[0].Count, wl.Spec.PodSets[1].Count}
	slices.Sort(counts)
	if !slices.Equal(counts, []int32{1, 2}) {
		t.Fatalf("pod set counts %v, want 1 master and 2 workers", counts)
	}
	for _, p := range pods {
		if cur := getPod(ctx, t, p); !hasGate(cur) {
			t.Fatalf("pod %s ungated while its group does not fit", p.Name)
		}
	}

	// Room for the whole group: every pod starts, and the group succeeds.
	var cq sluicev1alpha1.ClusterQueue
	if err := k8s.Get(ctx, client.ObjectKey{Name: "story2"}, &cq); err != nil {
		t.Fatal(err)
	}
	cq.Spec.ResourceGroups[0].Flavors[0].Resources[0].NominalQuota = resource.MustParse("4")
	if err := k8s.Update(ctx, &cq); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		final := waitPod(ctx, t, p, "Succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
		if final.Labels[podkeys.PodSetLabel] == "" || final.Annotations[podkeys.WorkloadAnnotation] != "train" {
			t.Errorf("pod %s ungated without its pod set label and workload annotation: %v %v", p.Name, final.Labels, final.Annotations)
		}
	}
	waitGroupEnded(ctx, t, "story2", pods, sluicev1alpha1.ReasonSucceeded)

	// Each pod's time from admission to ungating is in its queue's
	// histogram.
	body, err := sluice.Grouper.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	series := `sluice_grouper_admission_to_ungate_seconds_count{cluster_queue="story2"} 3`
	if !strings.Contains(body, series) {
		t.Errorf("grouper metrics lack %q", series)
	}
}

// waitGroupEnded waits until the group of pods finished with reason, its
// ClusterQueue holds nothing, and no pod keeps sluice's finalizer.
func waitGroupEnded(ctx context.Context, t *testing.T, clusterQueue string, pods []*corev1.Pod, reason string) {
	t.Helper()
	wl := waitWorkloadOf(ctx, t, pods[0], "Finished", func(w *sluicev1alpha1.Workload) bool {
		return meta.IsStatusConditionTrue(w.Status.Conditions, sluicev1alpha1.WorkloadFinished)
	})
	if c := meta.FindStatusCondition(wl.Status.Conditions, sluicev1alpha1.WorkloadFinished); c.Reason != reason {
		t.Errorf("Finished = %+v, want reason %s", c, reason)
	}
	waitClusterQueue(ctx, t, clusterQueue, "no reserving workloads", func(cq *sluicev1alpha1.ClusterQueue) bool {
		return cq.Status.ReservingWorkloads == 0 && cpuReservedIsZero(cq)
	})
	for _, p := range pods {
		waitPod(ctx, t, p, "finalizer removed", func(p *corev1.Pod) bool {
			return !slices.Contains(p.Finalizers, podkeys.ManagedFinalizer)
		})
	}
}

// TestStory2NonRetriableFailureEndsTheGroup: a pod that fails with
// retriable-in-group "false" ends its group once nothing else runs, and
// the group is reported as failed, not succeeded.
func TestStory2NonRetriableFailureEndsTheGroup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := createNamespace(ctx, t, "story2-fail")
	createQueues(ctx, t, ns, "story2-fail", "4")

	failing := groupPod(ns, "mpi", "launcher", "1", 2, map[string]string{"kwok.sluice.dev/fail-after": "1s"})
	failing.Annotations[podkeys.RetriableInGroupAnnotation] = "false"
	pods := []*corev1.Pod{failing, groupPod(ns, "mpi", "rank-0", "1", 2, map[string]string{"kwok.sluice.dev/run-for": "2s"})}
	for _, p := range pods {
		mustCreate(ctx, t, p)
	}
	// A non-retriable failure is a failure, not a success.
	waitGroupEnded(ctx, t, "story2-fail", pods, sluicev1alpha1.ReasonFailed)
}

// TestStory2DeactivatedAndResumed: deactivating an admitted group's
// Workload evicts it: its running pods are deleted (none is left
// Terminating), its quota is released, and the Workload stays, waiting for
// its pods. Pods of the group created again end the wait but stay gated
// while it is inactive; reactivated, the same Workload is admitted again
// whole and the new pods run to the group's end.
func TestStory2DeactivatedAndResumed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := createNamespace(ctx, t, "story2-resume")
	createQueues(ctx, t, ns, "story2-resume", "2")
	long := map[string]string{"kwok.sluice.dev/run-for": "10m"}
	first := []*corev1.Pod{groupPod(ns, "train", "a", "1", 2, long), groupPod(ns, "train", "b", "1", 2, long)}
	for _, p := range first {
		mustCreate(ctx, t, p)
	}
	for _, p := range first {
		waitPod(ctx, t, p, "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	}
	admitted := waitWorkloadOf(ctx, t, first[0], "Admitted", func(w *sluicev1alpha1.Workload) bool {
		return meta.IsStatusConditionTrue(w.Status.Conditions, sluicev1alpha1.WorkloadAdmitted)
	})

	setActive(ctx, t, admitted, false)
	for _, p := range first {
		waitDeleted(ctx, t, p)
	}
	waitClusterQueue(ctx, t, "story2-resume", "no quota held", cpuReservedIsZero)
	waiting := waitWorkloadOf(ctx, t, first[0], "evicted, waiting for its pods", func(w *sluicev1alpha1.Workload) bool {
		return meta.IsStatusConditionTrue(w.Status.Conditions, sluicev1alpha1.WorkloadEvicted) &&
			meta.IsStatusConditionFalse(w.Status.Conditions, sluicev1alpha1.WorkloadQuotaReserved) &&
			meta.IsStatusConditionTrue(w.Status.Conditions, sluicev1alpha1.WorkloadWaitingForReplacementPods)
	})
	if waiting.UID != admitted.UID {
		t.Fatalf("the group's Workload was recreated (uid %s, was %s); it must stay through the eviction", waiting.UID, admitted.UID)
	}

	short := map[string]string{"kwok.sluice.dev/run-for": "2s"}
	second := []*corev1.Pod{groupPod(ns, "train", "a-again", "1", 2, short), groupPod(ns, "train", "b-again", "1", 2, short)}
	for _, p := range second {
		mustCreate(ctx, t, p)
	}
	back := waitWorkloadOf(ctx, t, second[0], "no longer waiting for its pods", func(w *sluicev1alpha1.Workload) bool {
		return meta.IsStatusConditionFalse(w.Status.Conditions, sluicev1alpha1.WorkloadWaitingForReplacementPods)
	})
	if meta.IsStatusConditionTrue(back.Status.Conditions, sluicev1alpha1.WorkloadQuotaReserved) {
		t.Fatalf("an inactive workload reserved quota: %s", describe(back))
	}
	for _, p := range second {
		if !hasGate(getPod(ctx, t, p)) {
			t.Fatalf("pod %s ungated while its Workload is inactive", p.Name)
		}
	}

	setActive(ctx, t, back, true)
	for _, p := range second {
		waitPod(ctx, t, p, "Succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
	}
	waitGroupEnded(ctx, t, "story2-resume", second, sluicev1alpha1.ReasonSucceeded)
	if final := getWorkload(ctx, t, ns, "train"); final.UID != admitted.UID {
		t.Fatalf("the group finished in another Workload (uid %s, was %s)", final.UID, admitted.UID)
	}
}

// TestStory2WorkloadGoesWithItsPods: a group's Workload has no owners for
// garbage collection to follow; sluice deletes it once every pod of the
// group is gone, queued or finished alike.
func TestStory2WorkloadGoesWithItsPods(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := createNamespace(ctx, t, "story2-gone")
	createQueues(ctx, t, ns, "story2-gone", "1") // the queued group needs 2
	queued := []*corev1.Pod{groupPod(ns, "queued", "a", "1", 2, nil), groupPod(ns, "queued", "b", "1", 2, nil)}
	done := []*corev1.Pod{groupPod(ns, "done", "c", "500m", 1, map[string]string{"kwok.sluice.dev/run-for": "1s"})}
	for _, p := range append(slices.Clone(queued), done...) {
		mustCreate(ctx, t, p)
	}
	waitWorkloadOf(ctx, t, queued[0], "pending", func(w *sluicev1alpha1.Workload) bool {
		c := meta.FindStatusCondition(w.Status.Conditions, sluicev1alpha1.WorkloadQuotaReserved)
		return c != nil && c.Reason == sluicev1alpha1.ReasonPending
	})
	waitGroupEnded(ctx, t, "story2-gone", done, sluicev1alpha1.ReasonSucceeded)

	for _, p := range append(slices.Clone(queued), done...) {
		if err := k8s.Delete(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range append(slices.Clone(queued), done...) {
		waitDeleted(ctx, t, p)
	}
	for _, name := range []string{"queued", "done"} {
		waitWorkloadGone(ctx, t, ns, name)
	}
}

// TestStory2GroupNameUsedAgain: a batch system runs a group again under
// the same name while the pods of the finished run are still there. The
// finished run's Workload makes room (it is deleted), the new pods queue
// in a Workload of their own, and the earlier run's pods are left as they
// were: neither deleted as excess nor counted in the new run.
func TestStory2GroupNameUsedAgain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := createNamespace(ctx, t, "story2-again")
	createQueues(ctx, t, ns, "story2-again", "2")
	run := map[string]string{"kwok.sluice.dev/run-for": "1s"}
	first := []*corev1.Pod{groupPod(ns, "nightly", "a-1", "1", 2, run), groupPod(ns, "nightly", "b-1", "1", 2, run)}
	for _, p := range first {
		mustCreate(ctx, t, p)
	}
	waitGroupEnded(ctx, t, "story2-again", first, sluicev1alpha1.ReasonSucceeded)
	earlier := getWorkload(ctx, t, ns, "nightly")

	second := []*corev1.Pod{groupPod(ns, "nightly", "a-2", "1", 2, run), groupPod(ns, "nightly", "b-2", "1", 2, run)}
	for _, p := range second {
		mustCreate(ctx, t, p)
	}
	for _, p := range second {
		waitPod(ctx, t, p, "Succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
	}
	waitGroupEnded(ctx, t, "story2-again", second, sluicev1alpha1.ReasonSucceeded)
	later := getWorkload(ctx, t, ns, "nightly")
	if later.UID == earlier.UID {
		t.Fatalf("the second run finished in the first run's Workload (uid %s)", later.UID)
	}
	for _, p := range second {
		if got := getPod(ctx, t, p).Annotations[podkeys.WorkloadUIDAnnotation]; got != string(later.UID) {
			t.Errorf("pod %s was admitted in Workload uid %q, want %s", p.Name, got, later.UID)
		}
	}
	for _, p := range first {
		if cur := getPod(ctx, t, p); cur.DeletionTimestamp != nil || cur.Status.Phase != corev1.PodSucceeded {
			t.Errorf("the first run's pod %s was touched: phase %s, deleting %v", p.Name, cur.Status.Phase, cur.DeletionTimestamp != nil)
		}
	}
}

func setActive(ctx context.Context, t *testing.T, wl *sluicev1alpha1.Workload, active bool) {
	t.Helper()
	if err := e2eutil.SetActive(ctx, k8s, wl.Namespace, wl.Name, active); err != nil {
		t.Fatal(err)
	}
}

func getWorkload(ctx context.Context, t *testing.T, ns, name string) *sluicev1alpha1.Workload {
	t.Helper()
	var wl sluicev1alpha1.Workload
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &wl); err != nil {
		t.Fatal(err)
	}
	return &wl
}

// waitDeleted waits until pod is gone from the API server: deleted, and
// released by every finalizer.
func waitDeleted(ctx context.Context, t *testing.T, pod *corev1.Pod) {
	t.Helper()
	if err := e2eutil.WaitGone(ctx, k8s, pod.DeepCopy(), time.Minute); err != nil {
		t.Fatal(err)
	}
}

func waitWorkloadGone(ctx context.Context, t *testing.T, ns, name string) {
	t.Helper()
	wl := &sluicev1alpha1.Workload{}
	wl.Namespace, wl.Name = ns, name
	if err := e2eutil.WaitGone(ctx, k8s, wl, time.Minute); err != nil {
		t.Fatalf("%v: %s", err, describe(wl))
	}
}

// TestStory2FailedPodReplaced: a worker that fails keeps its place until a
// newer pod of its role replaces it; the replacement reuses the group's
// quota (the queue holds exactly the group), the failed pod is freed, and
// the group succeeds once its pods do.
func TestStory2FailedPodReplaced(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := createNamespace(ctx, t, "story2-replace")
	createQueues(ctx, t, ns, "story2-replace", "2")
	worker := groupPod(ns, "job", "worker-0", "1", 2, map[string]string{"kwok.sluice.dev/fail-after": "1s"})
	steady := groupPod(ns, "job", "worker-1", "1", 2, map[string]string{"kwok.sluice.dev/run-for": "20s"})
	mustCreate(ctx, t, worker)
	mustCreate(ctx, t, steady)
	waitPod(ctx, t, worker, "Failed", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
	if cur := getPod(ctx, t, worker); !slices.Contains(cur.Finalizers, podkeys.ManagedFinalizer) {
		t.Fatal("the failed pod lost sluice's finalizer before a replacement took its place")
	}
	waitWorkloadOf(ctx, t, steady, "WaitingForReplacementPods", func(w *sluicev1alpha1.Workload) bool {
		return meta.IsStatusConditionTrue(w.Status.Conditions, sluicev1alpha1.WorkloadWaitingForReplacementPods)
	})

	replacement := groupPod(ns, "job", "worker-0-retry", "1", 2, map[string]string{"kwok.sluice.dev/run-for": "1s"})
	mustCreate(ctx, t, replacement)
	waitWorkloadOf(ctx, t, steady, "no longer waiting for replacements", func(w *sluicev1alpha1.Workload) bool {
		return meta.IsStatusConditionFalse(w.Status.Conditions, sluicev1alpha1.WorkloadWaitingForReplacementPods)
	})
	waitPod(ctx, t, replacement, "Succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
	waitPod(ctx, t, worker, "freed by its replacement", func(p *corev1.Pod) bool {
		return !slices.Contains(p.Finalizers, podkeys.ManagedFinalizer)
	})
	waitGroupEnded(ctx, t, "story2-replace", []*corev1.Pod{steady, replacement}, sluicev1alpha1.ReasonSucceeded)
}

// TestStory2ExcessPods: pods beyond the total count are deleted, the
// youngest first, before admission; after admission a pod its role has no
// room for is deleted instead of ungated.
func TestStory2ExcessPods(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := createNamespace(ctx, t, "story2-excess")
	run := map[string]string{"kwok.sluice.dev/run-for": "30s"}
	pods := []*corev1.Pod{groupPod(ns, "g", "a", "1", 2, run), groupPod(ns, "g", "b", "1", 2, run)}
	for _, p := range pods {
		mustCreate(ctx, t, p)
	}
	// No queue exists yet, so nothing can be admitted: c is excess before
	// admission (created last; the name breaks a tie within a second).
	late := groupPod(ns, "g", "c", "1", 2, run)
	mustCreate(ctx, t, late)
	waitGone(ctx, t, late)
	createQueues(ctx, t, ns, "story2-excess", "4")
	for _, p := range pods {
		waitPod(ctx, t, p, "running", func(p *corev1.Pod) bool { return !hasGate(p) })
	}

	after := groupPod(ns, "g", "d", "1", 2, run)
	mustCreate(ctx, t, after)
	waitGone(ctx, t, after)
	for _, p := range pods {
		if cur := getPod(ctx, t, p); cur.DeletionTimestamp != nil {
			t.Fatalf("admitted pod %s deleted as excess", p.Name)
		}
	}
}

func waitGone(ctx context.Context, t *testing.T, pod *corev1.Pod) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var cur corev1.Pod
		err := k8s.Get(ctx, client.ObjectKeyFromObject(pod), &cur)
		return apierrors.IsNotFound(err) || (err == nil && cur.DeletionTimestamp != nil), nil
	})
	if err != nil {
		t.Fatalf("pod %s was never deleted as excess", pod.Name)
	}
}

// TestStory2MismatchedGroupIsNotQueued: pods of one group that name
// different queues make no workload, and one Warning event names them.
func TestStory2MismatchedGroupIsNotQueued(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := createNamespace(ctx, t, "story2-mismatch")
	createQueues(ctx, t, ns, "story2-mismatch", "4")
	a := groupPod(ns, "g", "a", "1", 2, nil)
	b := groupPod(ns, "g", "b", "1", 2, nil)
	b.Labels[podkeys.QueueNameLabel] = "other-queue"
	mustCreate(ctx, t, a)
	mustCreate(ctx, t, b)

	var warnings []eventsv1.Event
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var evs eventsv1.EventList
		if err := k8s.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return false, nil
		}
		warnings = warnings[:0]
		for _, e := range evs.Items {
			if e.Type == corev1.EventTypeWarning && e.Reason == "GroupMismatch" {
				warnings = append(warnings, e)
			}
		}
		return len(warnings) > 0, nil
	})
	if err != nil {
		t.Fatal("no GroupMismatch warning")
	}
	msg := warnings[0].Note
	for _, want := range []string{podkeys.QueueNameLabel, `"user-queue" (a)`, `"other-queue" (b)`} {
		if !strings.Contains(msg, want) {
			t.Errorf("warning %q does not say %q", msg, want)
		}
	}
	var list sluicev1alpha1.WorkloadList
	if err := k8s.List(ctx, &list, client.InNamespace(ns)); err != nil || len(list.Items) != 0 {
		t.Fatalf("workloads %d (err %v), want none for a group that disagrees", len(list.Items), err)
	}
	// Both pods woke several times meanwhile: still one event for the group.
	if len(warnings) != 1 || warnings[0].Series != nil {
		t.Errorf("%d warnings (series %v), want one for the group", len(warnings), warnings[0].Series)
	}
}

func getPod(ctx context.Context, t *testing.T, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	var cur corev1.Pod
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(p), &cur); err != nil {
		t.Fatal(err)
	}
	return &cur
}

// TestStory2OversizedGroupIsRefused: a group whose Workload etcd could not
// hold once admitted (five roles, each with a quarter MiB of annotations
// that its pod set copies) is refused for good: its pods stay gated, one
// warning names the size rule and the pod set that carries the most, and
// no Workload exists.
func TestStory2OversizedGroupIsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := createNamespace(ctx, t, "story2-oversized")
	createQueues(ctx, t, ns, "story2-oversized", "4")
	var pods []*corev1.Pod
	for i := range 5 {
		// A role each: the requests differ, and so do the role hashes.
		p := groupPod(ns, "g", fmt.Sprintf("p%d", i), fmt.Sprintf("%dm", 100*(i+1)), 5, nil)
		p.Annotations["example.com/notes"] = strings.Repeat(fmt.Sprint(i), 240<<10)
		mustCreate(ctx, t, p)
		pods = append(pods, p)
	}

	var refusal *eventsv1.Event
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var evs eventsv1.EventList
		if err := k8s.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return false, nil
		}
		for i, e := range evs.Items {
			if e.Type == corev1.EventTypeWarning && e.Reason == "SubmitFailed" {
				refusal = &evs.Items[i]
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal("no SubmitFailed warning for the oversized group")
	}
	for _, want := range []string{"workload.pod_sets: the Workload would be", "over the limit of 1048576", "carries", "make them smaller"} {
		if !strings.Contains(refusal.Note, want) {
			t.Errorf("warning %q does not say %q", refusal.Note, want)
		}
	}
	var list sluicev1alpha1.WorkloadList
	if err := k8s.List(ctx, &list, client.InNamespace(ns)); err != nil || len(list.Items) != 0 {
		t.Fatalf("workloads %d (err %v), want none for a group too large to admit", len(list.Items), err)
	}
	for _, p := range pods {
		if cur := getPod(ctx, t, p); !slices.ContainsFunc(cur.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool {
			return g.Name == podkeys.AdmissionGate
		}) {
			t.Errorf("pod %s lost its gate", p.Name)
		}
	}
}
