package webhook

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/pkg/podkeys"
)

// createPriorityClass creates the WorkloadPriorityClass name.
func createPriorityClass(ctx context.Context, t *testing.T, name string, value int64) {
	t.Helper()
	class := &unstructured.Unstructured{}
	class.SetAPIVersion("sluice.dev/v1alpha1")
	class.SetKind("WorkloadPriorityClass")
	class.SetName(name)
	if err := unstructured.SetNestedField(class.Object, value, "value"); err != nil {
		t.Fatal(err)
	}
	if err := s.client.Create(ctx, class); err != nil {
		t.Fatalf("create WorkloadPriorityClass %s: %v", name, err)
	}
	t.Cleanup(func() { _ = s.client.Delete(context.Background(), class) })
}

// assertRefused checks that creating pod failed with exactly want and
// that the pod does not exist.
func assertRefused(ctx context.Context, t *testing.T, pod *corev1.Pod, err error, want string) {
	t.Helper()
	if err == nil || err.Error() != want {
		t.Fatalf("create pod %s: error %v\nwant %s", pod.Name, err, want)
	}
	if !apierrors.IsInvalid(err) {
		t.Errorf("error reason = %v, want Invalid", apierrors.ReasonForError(err))
	}
	if err := s.client.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Errorf("get refused pod %s: %v, want NotFound", pod.Name, err)
	}
}

// A queued pod must name a WorkloadPriorityClass that exists; once the
// class exists the same pod is queued. The messages are documented in
// docs/webhook.md.
func TestPriorityClassMustExist(t *testing.T) {
	ctx := testContext(t)
	const ns = "team-priority"
	createNamespace(ctx, t, ns)
	labels := map[string]string{podkeys.QueueNameLabel: "q", podkeys.PriorityClassLabel: "urgent"}

	pod := newPod(ns, "urgent-job", labels, nil)
	err := s.client.Create(ctx, pod)
	assertRefused(ctx, t, pod, err, `admission webhook "mutate.pods.sluice.dev" denied the request: Pod "urgent-job" is invalid: `+
		`metadata.labels[kueue.x-k8s.io/priority-class]: Invalid value: "urgent": `+
		`WorkloadPriorityClass "urgent" does not exist: create it, or name one that does (kubectl get workloadpriorityclasses)`)

	createPriorityClass(ctx, t, "urgent", 1000)
	pod = newPod(ns, "urgent-job", labels, nil)
	if err := s.client.Create(ctx, pod); err != nil {
		t.Fatalf("create pod naming a class that exists: %v", err)
	}
	assertMarked(t, pod, "q")
	if got := pod.Labels[podkeys.PriorityClassLabel]; got != "urgent" {
		t.Errorf("priority class = %q, want the pod's own urgent", got)
	}
}

// A class created just before the pod naming it is found even when the
// webhook's watch has not delivered it yet: the webhook reads a class its
// cache lacks from the API server before refusing the pod. A second
// webhook, for one namespace only, watches through a proxy that never
// delivers the classes this test creates, so only that read can find them.
func TestPriorityClassCreatedJustBefore(t *testing.T) {
	ctx := testContext(t)
	const ns = "team-priority-lagging"
	proxy, kubeconfig := startHidingProxy(t, "workloadpriorityclasses", "lagging-")
	lagging, err := startWebhook(ctx, "sluice-webhook-lagging", "--kubeconfig", kubeconfig,
		"--managed-namespaces", "sluice.dev/test-lagging-watch=true", "--unregister-on-exit")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := lagging.Stop(20 * time.Second); err != nil {
			t.Errorf("stop the lagging webhook: %v\n%s", err, lagging.Tail(40))
		}
	})
	namespace := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"sluice.dev/test-lagging-watch": "true"}}}
	if err := s.client.Create(ctx, namespace); err != nil {
		t.Fatalf("create namespace: %v", err)
	}

	createPriorityClass(ctx, t, "lagging-urgent", 1000)
	pod := newPod(ns, "urgent-job", map[string]string{podkeys.QueueNameLabel: "q", podkeys.PriorityClassLabel: "lagging-urgent"}, nil)
	// Created once: a retry could hide a refusal.
	if err := s.client.Create(ctx, pod); err != nil {
		t.Fatalf("create pod naming a class the webhook's watch has not delivered: %v", err)
	}
	assertMarked(t, pod, "q")
	if got := proxy.reads.Load(); got != 1 {
		t.Errorf("the webhook read the class from the API server %d times, want once", got)
	}
}

// The priority class and the maximum execution time are fixed when a pod
// sluice queued is created: adding, changing or removing either is
// refused.
func TestPriorityClassAndMaxExecTimeAreFixed(t *testing.T) {
	ctx := testContext(t)
	const ns = "team-priority-fixed"
	createNamespace(ctx, t, ns)
	createPriorityClass(ctx, t, "fixed-low", 10)
	createPriorityClass(ctx, t, "fixed-high", 100)
	pod := newPod(ns, "fixed", map[string]string{podkeys.QueueNameLabel: "q", podkeys.PriorityClassLabel: "fixed-low"}, nil)
	if err := s.client.Create(ctx, pod); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	assertMarked(t, pod, "q")

	const denied = `admission webhook "validate.pods.sluice.dev" denied the request: Pod "fixed" is invalid: `
	const classRule = `the priority class is fixed when the pod is created; to change it, create the pod again`
	const timeRule = `the maximum execution time is fixed when the pod is created; to change it, create the pod again`
	tests := []struct {
		name  string
		key   string
		value string // JSON value of the label in the merge patch
		want  string
	}{
		{"class changed", podkeys.PriorityClassLabel, `"fixed-high"`,
			denied + `metadata.labels[kueue.x-k8s.io/priority-class]: Invalid value: "fixed-high": ` + classRule},
		{"class removed", podkeys.PriorityClassLabel, "null",
			denied + `metadata.labels[kueue.x-k8s.io/priority-class]: Forbidden: ` + classRule},
		{"time added", podkeys.MaxExecTimeLabel, `"600"`,
			denied + `metadata.labels[kueue.x-k8s.io/max-exec-time-seconds]: Invalid value: "600": ` + timeRule},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, tc.key, tc.value)
			err := s.client.Patch(ctx, pod.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(patch)))
			if err == nil || err.Error() != tc.want {
				t.Fatalf("patch %s to %s: error %v\nwant %s", tc.key, tc.value, err, tc.want)
			}
			got := &corev1.Pod{}
			if err := s.client.Get(ctx, client.ObjectKeyFromObject(pod), got); err != nil {
				t.Fatalf("get pod: %v", err)
			}
			if got.Labels[podkeys.PriorityClassLabel] != "fixed-low" || got.Labels[podkeys.MaxExecTimeLabel] != "" {
				t.Errorf("labels after the refused patch = %v, want them as created", got.Labels)
			}
		})
	}
}

// The maximum execution time of a queued pod is a whole number of
// seconds from 1 to 2147483647.
func TestMaxExecTimeMustBePositiveSeconds(t *testing.T) {
	ctx := testContext(t)
	const ns = "team-exec-time"
	createNamespace(ctx, t, ns)
	const rule = `must be a whole number of seconds from 1 to 2147483647`
	for _, tc := range []struct{ name, value string }{
		{"exec-zero", "0"},
		{"exec-duration", "1h"},
		{"exec-beyond-int32", "2147483648"},
	} {
		pod := newPod(ns, tc.name, map[string]string{podkeys.QueueNameLabel: "q", podkeys.MaxExecTimeLabel: tc.value}, nil)
		err := s.client.Create(ctx, pod)
		assertRefused(ctx, t, pod, err, fmt.Sprintf(`admission webhook "mutate.pods.sluice.dev" denied the request: Pod %q is invalid: `+
			`metadata.labels[kueue.x-k8s.io/max-exec-time-seconds]: Invalid value: %q: %s`, tc.name, tc.value, rule))
	}
	pod := newPod(ns, "exec-hour", map[string]string{podkeys.QueueNameLabel: "q", podkeys.MaxExecTimeLabel: "3600"}, nil)
	if err := s.client.Create(ctx, pod); err != nil {
		t.Fatalf("create pod with a maximum execution time of an hour: %v", err)
	}
	assertMarked(t, pod, "q")
}

// sluice is never in the way of a pod it does not queue: one naming no
// queue is created untouched whatever it says of priority or run time,
// and may change those labels later.
func TestUnqueuedPodKeepsItsPriorityLabels(t *testing.T) {
	ctx := testContext(t)
	const ns = "team-priority-unqueued"
	createNamespace(ctx, t, ns)
	pod := newPod(ns, "not-queued", map[string]string{podkeys.PriorityClassLabel: "Not_A_Class", podkeys.MaxExecTimeLabel: "soon"}, nil)
	if err := s.client.Create(ctx, pod); err != nil {
		t.Fatalf("create unqueued pod: %v", err)
	}
	assertUntouched(t, pod)
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"missing",%q:null}}}`, podkeys.PriorityClassLabel, podkeys.MaxExecTimeLabel)
	if err := s.client.Patch(ctx, pod, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatalf("change the labels of an unqueued pod: %v", err)
	}
}
