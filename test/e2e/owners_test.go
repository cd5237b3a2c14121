package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/test/e2e/e2eutil"
	"github.com/sluice-dev/sluice/test/harness"
)

var editJobs = []harness.Access{{Verb: "create", Group: "batch", Resource: "jobs"}, {Verb: "get", Group: "batch", Resource: "jobs"}}

// newJob is a Job of one pod whose template names the LocalQueue
// user-queue and runs for runFor under kwok.
func newJob(ns, name, cpu, runFor string) *batchv1.Job {
	pod := newPod(ns, "", cpu, runFor)
	return &batchv1.Job{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To[int32](3),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: pod.Labels, Annotations: pod.Annotations},
				Spec:       pod.Spec,
			},
		},
	}
}

// createJobAs creates job as u with kubectl.
func createJobAs(ctx context.Context, t *testing.T, u *harness.User, job *batchv1.Job) {
	t.Helper()
	out, err := yaml.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := u.KubectlStdin(ctx, string(out), "create", "-f", "-"); err != nil {
		t.Fatal(err)
	}
}

// waitJobPod polls until the Job has a pod that ok accepts, and returns it.
func waitJobPod(ctx context.Context, t *testing.T, job *batchv1.Job, what string, ok func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var found *corev1.Pod
	var seen []string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		var pods corev1.PodList
		if err := k8s.List(ctx, &pods, client.InNamespace(job.Namespace), client.MatchingLabels{batchv1.JobNameLabel: job.Name}); err != nil {
			return false, nil
		}
		seen = seen[:0]
		for i := range pods.Items {
			p := &pods.Items[i]
			seen = append(seen, fmt.Sprintf("%s phase %s gates %v labels %v", p.Name, p.Status.Phase, p.Spec.SchedulingGates, p.Labels))
			if ok(p) {
				found = p
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("Job %s never had a pod %s; pods: %v", job.Name, what, seen)
	}
	return found
}

// waitJob polls until ok accepts the Job's status.
func waitJob(ctx context.Context, t *testing.T, job *batchv1.Job, what string, ok func(*batchv1.Job) bool) *batchv1.Job {
	t.Helper()
	var cur batchv1.Job
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(job), &cur); err != nil {
			return false, nil
		}
		return ok(&cur), nil
	})
	if err != nil {
		t.Fatalf("Job %s never %s: status %+v", job.Name, what, cur.Status)
	}
	return &cur
}

// TestJobPodsQueuedWhenAlone: without Kueue the webhook's default
// --owners=auto means alone, and the pod of a Job whose template names a
// queue is queued like any pod: gated at creation, held while its queue
// lacks quota, admitted by sluice once it has it, and run to completion,
// which completes the Job. The Job is created by the namespace's user.
func TestJobPodsQueuedWhenAlone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := createNamespace(ctx, t, "owners-alone")
	// Too little quota at first: the pod must wait behind sluice's gate.
	createQueues(ctx, t, ns, "owners-alone", "500m")
	alice := newUser(ctx, t, ns, "alice", []string{"edit"}, editJobs...)

	job := newJob(ns, "train", "1", "1s")
	createJobAs(ctx, t, alice, job)
	pod := waitJobPod(ctx, t, job, "marked by sluice", func(p *corev1.Pod) bool {
		return p.Labels[podkeys.ManagedLabel] == podkeys.ManagedLabelValue
	})
	if !hasGate(pod) {
		t.Fatalf("Job's pod %s is not gated in a queue without room for it: gates %v", pod.Name, pod.Spec.SchedulingGates)
	}
	waitWorkloadOf(ctx, t, pod, "waiting for quota", func(w *sluicev1alpha1.Workload) bool {
		return meta.IsStatusConditionFalse(w.Status.Conditions, sluicev1alpha1.WorkloadQuotaReserved)
	})
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
		t.Fatal(err)
	}
	if !hasGate(pod) || pod.Spec.NodeName != "" {
		t.Fatalf("Job's pod left the gate without quota: gates %v node %q", pod.Spec.SchedulingGates, pod.Spec.NodeName)
	}

	var cq sluicev1alpha1.ClusterQueue
	if err := k8s.Get(ctx, client.ObjectKey{Name: "owners-alone"}, &cq); err != nil {
		t.Fatal(err)
	}
	cq.Spec.ResourceGroups[0].Flavors[0].Resources[0].NominalQuota = resource.MustParse("2")
	if err := k8s.Update(ctx, &cq); err != nil {
		t.Fatal(err)
	}
	wl := waitWorkloadOf(ctx, t, pod, "Admitted", func(w *sluicev1alpha1.Workload) bool {
		return meta.IsStatusConditionTrue(w.Status.Conditions, sluicev1alpha1.WorkloadAdmitted)
	})
	final := waitPod(ctx, t, pod, "Succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
	if final.Annotations[podkeys.WorkloadAnnotation] != wl.Name {
		t.Errorf("pod ran under workload %q, want %q", final.Annotations[podkeys.WorkloadAnnotation], wl.Name)
	}
	waitJob(ctx, t, job, "Complete", func(j *batchv1.Job) bool { return j.Status.Succeeded == 1 })
}

// TestEvictedJobPodCountsAgainstBackoffLimit checks what docs/webhook.md
// says of Jobs under --owners=alone: sluice stops an evicted pod by
// deleting it after setting DisruptionTarget (reason EvictedBySluice), so
// the Job controller counts the eviction as a failure against the Job's
// backoffLimit, unless the Job's podFailurePolicy ignores DisruptionTarget;
// either way it creates a replacement pod, which queues again.
func TestEvictedJobPodCountsAgainstBackoffLimit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := createNamespace(ctx, t, "owners-evict")
	createQueues(ctx, t, ns, "owners-evict", "4")
	alice := newUser(ctx, t, ns, "alice", []string{"edit"}, editJobs...)

	counted := newJob(ns, "counted", "1", "10m")
	ignored := newJob(ns, "ignored", "1", "10m")
	ignored.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
		Action:          batchv1.PodFailurePolicyActionIgnore,
		OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget}},
	}}}
	for _, job := range []*batchv1.Job{counted, ignored} {
		createJobAs(ctx, t, alice, job)
		first := waitJobPod(ctx, t, job, "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
		wl := waitWorkloadOf(ctx, t, first, "Admitted", func(w *sluicev1alpha1.Workload) bool {
			return meta.IsStatusConditionTrue(w.Status.Conditions, sluicev1alpha1.WorkloadAdmitted)
		})
		// Deactivating the Workload evicts it: the grouper stops its pod.
		if err := e2eutil.SetActive(ctx, k8s, ns, wl.Name, false); err != nil {
			t.Fatal(err)
		}
		waitJobPod(ctx, t, job, "replacing the evicted one", func(p *corev1.Pod) bool {
			return p.UID != first.UID && p.Labels[podkeys.ManagedLabel] == podkeys.ManagedLabelValue
		})
	}
	// Once the replacement exists, the Job controller has judged the
	// evicted pod.
	got := waitJob(ctx, t, counted, "counted the eviction", func(j *batchv1.Job) bool { return j.Status.Failed >= 1 })
	if got.Status.Failed != 1 {
		t.Errorf("Job without podFailurePolicy: failed = %d, want 1 (the eviction)", got.Status.Failed)
	}
	var cur batchv1.Job
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(ignored), &cur); err != nil {
		t.Fatal(err)
	}
	if cur.Status.Failed != 0 {
		t.Errorf("Job whose podFailurePolicy ignores DisruptionTarget: failed = %d, want 0", cur.Status.Failed)
	}
}
