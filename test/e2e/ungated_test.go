package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
)

const (
	// ungatedMetric counts the pods the grouper found ungated by someone
	// else, by what it did with them (result).
	ungatedMetric = "sluice_grouper_pods_ungated_without_admission_total"
	// ungatedReason is the reason of the grouper's Warning event on a pod
	// it stops for that.
	ungatedReason = "UngatedWithoutAdmission"
)

// TestUngatedWithoutAdmission: in a queue its first pod fills, the next
// pods wait gated. A pod whose gate someone removes by hand, leaving
// sluice's finalizer, would run beyond the queue's quota: sluice stops it
// as it stops an evicted pod, says why in a Warning event, and its
// workload ends as a failure, while the first pod runs on. A pod released
// on purpose, gate and finalizer removed together as grouper release-all
// does, is left to run. The test acts as cluster admin: the admission
// policy that refuses the patch to namespace users lets an admin through,
// so this is the case the grouper alone must catch.
func TestUngatedWithoutAdmission(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ns := createNamespace(ctx, t, "ungated")
	createQueues(ctx, t, ns, "ungated", "2")
	rec := recordEvents(ctx, t, ns, "ungated")
	defer rec.stop()

	first := newPod(ns, "first", "2", "10m")
	createFaultPod(ctx, t, first)
	firstWL := waitWorkloadOf(ctx, t, first, "Admitted", admitted)
	waitPod(ctx, t, first, "running", running)

	t.Run("gate removed alone: stopped", func(t *testing.T) {
		pod := newPod(ns, "bypass", "2", "10m")
		createFaultPod(ctx, t, pod)
		wl := waitWorkloadOf(ctx, t, pod, "pending for want of quota", waitsForQuota)
		jsonPatchPod(ctx, t, pod, gateRemovalPatch(t, getPod(ctx, t, pod), false))

		// Gone entirely: stopped, and its end reported before sluice let
		// go of it.
		waitPodGone(ctx, t, pod)
		ev := waitPodEvent(ctx, t, pod, corev1.EventTypeWarning, ungatedReason)
		if !containsAll(ev.Note, podkeys.AdmissionGate, "without an admission", "evicted pod", "grouper release-all", podkeys.ManagedFinalizer) {
			t.Errorf("event note %q does not say what happened, what sluice does and how to release pods on purpose", ev.Note)
		}
		// The workload ends through the pod's finish, which quotes the
		// DisruptionTarget condition the stop put on the pod.
		waitConditionBecame(ctx, t, rec, wl.Name, sluicev1alpha1.WorkloadFinished, "Finished as failed, stopped by sluice", func(c *metav1.Condition) bool {
			return c != nil && c.Status == metav1.ConditionTrue && c.Reason == sluicev1alpha1.ReasonFailed &&
				containsAll(c.Message, "stopped by sluice", podkeys.AdmissionGate, "without an admission")
		})
		if n := rec.transitions(wl.Name, sluicev1alpha1.WorkloadQuotaReserved); n != 0 {
			t.Errorf("workload %s reserved quota %d times, want never: the queue is full", wl.Name, n)
		}
	})

	t.Run("gate and finalizer removed: left alone", func(t *testing.T) {
		pod := newPod(ns, "released", "2", "10m")
		createFaultPod(ctx, t, pod)
		waitWorkloadOf(ctx, t, pod, "pending for want of quota", waitsForQuota)
		before := grouperCounter(ctx, t, ungatedMetric, "released")
		jsonPatchPod(ctx, t, pod, gateRemovalPatch(t, getPod(ctx, t, pod), true))

		// The grouper has judged the pod once it counted it.
		if err := waitGrouperCounter(ctx, ungatedMetric, "released", before+1); err != nil {
			t.Fatalf("the grouper never counted pod %s as released: %v; the pod: %s", pod.Name, err, podState(ctx, pod))
		}
		cur := waitPod(ctx, t, pod, "running, released", running)
		if hasGate(cur) || slices.Contains(cur.Finalizers, podkeys.ManagedFinalizer) {
			t.Errorf("released pod got sluice's gate or finalizer back: gates %v finalizers %v", cur.Spec.SchedulingGates, cur.Finalizers)
		}
		if ev := findPodEvent(ctx, t, pod, corev1.EventTypeWarning, ungatedReason); ev != nil {
			t.Errorf("released pod was taken for one ungated without an admission: %q", ev.Note)
		}
	})

	// The first pod ran on throughout, admitted and never evicted.
	if cur := getPod(ctx, t, first); !running(cur) {
		t.Errorf("first pod no longer running: phase %s, deleted %v", cur.Status.Phase, cur.DeletionTimestamp != nil)
	}
	if n := rec.transitions(firstWL.Name, sluicev1alpha1.WorkloadEvicted); n != 0 {
		t.Errorf("first workload evicted %d times, want never", n)
	}
	if q := rec.maxCPUReserved(); q.Cmp(resource.MustParse("2")) > 0 {
		t.Errorf("ClusterQueue reserved up to %s cpu, want at most its 2", q.String())
	}
}

// waitsForQuota is a submitted workload the queue has no room for.
func waitsForQuota(w *sluicev1alpha1.Workload) bool {
	c := meta.FindStatusCondition(w.Status.Conditions, sluicev1alpha1.WorkloadQuotaReserved)
	return c != nil && c.Status == metav1.ConditionFalse && c.Reason == sluicev1alpha1.ReasonPending
}

// gateRemovalPatch is the JSON patch a person would send to remove
// sluice's gate from pod, and with finalizerToo sluice's finalizer as well
// (what grouper release-all removes). Each removal is guarded by a test of
// the entry at its index.
func gateRemovalPatch(t *testing.T, pod *corev1.Pod, finalizerToo bool) []byte {
	t.Helper()
	type op struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value string `json:"value,omitempty"`
	}
	gate := slices.IndexFunc(pod.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == podkeys.AdmissionGate })
	if gate < 0 {
		t.Fatalf("pod %s is not gated: %v", pod.Name, pod.Spec.SchedulingGates)
	}
	gatePath := "/spec/schedulingGates/" + strconv.Itoa(gate)
	ops := []op{{Op: "test", Path: gatePath + "/name", Value: podkeys.AdmissionGate}, {Op: "remove", Path: gatePath}}
	if finalizerToo {
		fin := slices.Index(pod.Finalizers, podkeys.ManagedFinalizer)
		if fin < 0 {
			t.Fatalf("pod %s lacks sluice's finalizer: %v", pod.Name, pod.Finalizers)
		}
		finPath := "/metadata/finalizers/" + strconv.Itoa(fin)
		ops = append(ops, op{Op: "test", Path: finPath, Value: podkeys.ManagedFinalizer}, op{Op: "remove", Path: finPath})
	}
	data, err := json.Marshal(ops)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func jsonPatchPod(ctx context.Context, t *testing.T, pod *corev1.Pod, patch []byte) {
	t.Helper()
	target := &corev1.Pod{}
	target.Namespace, target.Name = pod.Namespace, pod.Name
	if err := k8s.Patch(ctx, target, client.RawPatch(types.JSONPatchType, patch)); err != nil {
		t.Fatalf("patching pod %s/%s with %s: %v", pod.Namespace, pod.Name, patch, err)
	}
}

// waitPodGone waits until pod is gone from the API server (deleted, and
// released by every finalizer), and says what it last was when not.
func waitPodGone(ctx context.Context, t *testing.T, pod *corev1.Pod) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := k8s.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s still there: %s", pod.Namespace, pod.Name, podState(ctx, pod))
	}
}

// podState says what a test needs to know of pod now.
func podState(ctx context.Context, pod *corev1.Pod) string {
	// The test's own deadline may have passed: this read is what it
	// reports.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var cur corev1.Pod
	err := k8s.Get(ctx, client.ObjectKeyFromObject(pod), &cur)
	switch {
	case apierrors.IsNotFound(err):
		return "gone"
	case err != nil:
		return err.Error()
	}
	return fmt.Sprintf("phase %s, gates %v, finalizers %v, deleted %v", cur.Status.Phase, cur.Spec.SchedulingGates,
		cur.Finalizers, cur.DeletionTimestamp != nil)
}

// findPodEvent returns the event of the type and reason regarding pod
// (by uid), or nil.
func findPodEvent(ctx context.Context, t *testing.T, pod *corev1.Pod, eventType, reason string) *eventsv1.Event {
	t.Helper()
	var evs eventsv1.EventList
	if err := k8s.List(ctx, &evs, client.InNamespace(pod.Namespace)); err != nil {
		t.Fatalf("listing events in %s: %v", pod.Namespace, err)
	}
	for i := range evs.Items {
		e := &evs.Items[i]
		if e.Regarding.UID == pod.UID && e.Type == eventType && e.Reason == reason {
			return e
		}
	}
	return nil
}

func waitPodEvent(ctx context.Context, t *testing.T, pod *corev1.Pod, eventType, reason string) *eventsv1.Event {
	t.Helper()
	var ev *eventsv1.Event
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		ev = findPodEvent(ctx, t, pod, eventType, reason)
		return ev != nil, nil
	})
	if err != nil {
		t.Fatalf("no %s event %s on pod %s/%s", eventType, reason, pod.Namespace, pod.Name)
	}
	return ev
}

// waitConditionBecame waits until rec has seen the named workload's
// condition of condType come to satisfy is.
func waitConditionBecame(ctx context.Context, t *testing.T, rec *recorder, name, condType, what string, is func(*metav1.Condition) bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return rec.became(name, condType, is) > 0, nil
	})
	if err != nil {
		t.Fatalf("workload %s never %s: %s conditions seen %+v", name, what, condType, rec.conditionsSeen(name, condType))
	}
}

// grouperCounter reads the grouper's counter name for the given result
// label; a series not there yet counts 0.
func grouperCounter(ctx context.Context, t *testing.T, name, result string) float64 {
	t.Helper()
	v, err := readGrouperCounter(ctx, name, result)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func readGrouperCounter(ctx context.Context, name, result string) (float64, error) {
	return sluice.Grouper.Counter(ctx, name, map[string]string{"result": result})
}

// waitGrouperCounter waits until the grouper's counter name for result
// reaches want.
func waitGrouperCounter(ctx context.Context, name, result string, want float64) error {
	var got float64
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		v, err := readGrouperCounter(ctx, name, result)
		if err != nil {
			last = err
			return false, nil
		}
		got = v
		return got >= want, nil
	})
	if err != nil {
		return fmt.Errorf("%s{result=%q} = %v, want %v (last error reading it: %v)", name, result, got, want, last)
	}
	return nil
}
