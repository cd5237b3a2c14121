package webhook

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/pkg/rolehash"
	"github.com/sluice-dev/sluice/test/harness"
)

var traceparentRE = regexp.MustCompile(`^00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]$`)

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func createNamespace(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := s.client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create namespace %s: %v", name, err)
	}
}

func newPod(ns, name string, labels, annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, Annotations: annotations},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name:  "main",
			Image: "registry.example/app:1",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("500m"),
			}},
		}}},
	}
}

func hasGate(pod *corev1.Pod, name string) int {
	n := 0
	for _, g := range pod.Spec.SchedulingGates {
		if g.Name == name {
			n++
		}
	}
	return n
}

// assertMarked checks every mark the webhook puts on a queued pod.
func assertMarked(t *testing.T, pod *corev1.Pod, queue string) {
	t.Helper()
	if got := pod.Labels[podkeys.QueueNameLabel]; got != queue {
		t.Errorf("queue-name = %q, want %q", got, queue)
	}
	if got := pod.Labels[podkeys.ManagedLabel]; got != "true" {
		t.Errorf("managed label = %q, want \"true\"", got)
	}
	if !slices.Contains(pod.Finalizers, podkeys.ManagedFinalizer) {
		t.Errorf("finalizers = %v, want %s", pod.Finalizers, podkeys.ManagedFinalizer)
	}
	if n := hasGate(pod, podkeys.AdmissionGate); n != 1 {
		t.Errorf("admission gate appears %d times in %v, want once", n, pod.Spec.SchedulingGates)
	}
	want, err := rolehash.Compute(&pod.Spec)
	if err != nil {
		t.Fatalf("rolehash.Compute: %v", err)
	}
	if got := pod.Annotations[podkeys.RoleHashAnnotation]; got != want {
		t.Errorf("role hash = %q, want %q (hash of the stored spec)", got, want)
	}
	if tp := pod.Annotations[podkeys.TraceparentAnnotation]; !traceparentRE.MatchString(tp) {
		t.Errorf("traceparent = %q, want a W3C trace context", tp)
	}
}

func assertUntouched(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	if _, ok := pod.Labels[podkeys.ManagedLabel]; ok {
		t.Errorf("managed label set on %s/%s", pod.Namespace, pod.Name)
	}
	if len(pod.Finalizers) != 0 || len(pod.Spec.SchedulingGates) != 0 || len(pod.Annotations) != 0 {
		t.Errorf("pod %s/%s was changed: finalizers %v gates %v annotations %v",
			pod.Namespace, pod.Name, pod.Finalizers, pod.Spec.SchedulingGates, pod.Annotations)
	}
}

func TestQueuedPodIsMarked(t *testing.T) {
	ctx := testContext(t)
	createNamespace(ctx, t, "team-a")
	pod := newPod("team-a", "single", map[string]string{podkeys.QueueNameLabel: "research"}, nil)
	pod.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/other"}}
	if err := s.client.Create(ctx, pod); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	assertMarked(t, pod, "research")
	if hasGate(pod, "example.com/other") != 1 {
		t.Errorf("the pod's own gate was lost: %v", pod.Spec.SchedulingGates)
	}

	// A role hash the user chose is replaced by the computed one.
	own := newPod("team-a", "own-hash", map[string]string{podkeys.QueueNameLabel: "research"},
		map[string]string{podkeys.RoleHashAnnotation: "driver"})
	if err := s.client.Create(ctx, own); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	assertMarked(t, own, "research")

	body, err := s.webhook.Metrics(ctx)
	if err != nil {
		t.Fatalf("read metrics: %v", err)
	}
	if v := metricValue(body, "sluice_webhook_pods_gated_total"); v < 2 {
		t.Errorf("sluice_webhook_pods_gated_total = %v, want at least 2", v)
	}

	// One webhook round trip per creation: the API server calls the
	// mutating webhook once for a valid pod's CREATE, and the validating
	// webhook not at all.
	beforeServer, beforeOwn := sluiceWebhookCalls(ctx, t), ownCalls(ctx, t)
	one := newPod("team-a", "one-round-trip", map[string]string{podkeys.QueueNameLabel: "research"}, nil)
	if err := s.client.Create(ctx, one); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	assertMarked(t, one, "research")
	afterServer, afterOwn := sluiceWebhookCalls(ctx, t), ownCalls(ctx, t)
	want := map[webhookCall]float64{{name: mutatingWebhook, operation: "CREATE"}: 1}
	if got := subtractCalls(afterServer, beforeServer); !maps.Equal(got, want) {
		t.Errorf("API server calls of sluice's webhooks for one pod CREATE = %v, want %v", got, want)
	}
	if got := subtractCalls(afterOwn, beforeOwn); !maps.Equal(got, map[string]float64{"mutating": 1}) {
		t.Errorf("requests the webhook answered for one pod CREATE = %v, want one mutating", got)
	}
}

const (
	mutatingWebhook   = "mutate.pods.sluice.dev"
	validatingWebhook = "validate.pods.sluice.dev"
)

// webhookCall identifies a series of apiserver_admission_webhook_request_total.
type webhookCall struct{ name, operation string }

// sluiceWebhookCalls returns how often the API server has called each of
// sluice's webhooks, by operation.
func sluiceWebhookCalls(ctx context.Context, t *testing.T) map[webhookCall]float64 {
	t.Helper()
	text, err := s.env.Metrics(ctx)
	if err != nil {
		t.Fatalf("read API server metrics: %v", err)
	}
	out := map[webhookCall]float64{}
	for _, m := range metricFamily(t, text, "apiserver_admission_webhook_request_total").GetMetric() {
		var c webhookCall
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "name":
				c.name = l.GetValue()
			case "operation":
				c.operation = l.GetValue()
			}
		}
		if c.name == mutatingWebhook || c.name == validatingWebhook {
			out[c] += m.GetCounter().GetValue()
		}
	}
	return out
}

// ownCalls returns how many requests the webhook has answered, by webhook.
func ownCalls(ctx context.Context, t *testing.T) map[string]float64 {
	t.Helper()
	text, err := s.webhook.Metrics(ctx)
	if err != nil {
		t.Fatalf("read webhook metrics: %v", err)
	}
	out := map[string]float64{}
	for _, m := range metricFamily(t, text, "sluice_webhook_admission_duration_seconds").GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "webhook" {
				out[l.GetValue()] += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

func metricFamily(t *testing.T, text, name string) *dto.MetricFamily {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("parse metrics: %v", err)
	}
	return families[name] // nil (no series) until the first sample
}

// subtractCalls returns after minus before, leaving out what did not change.
func subtractCalls[K comparable](after, before map[K]float64) map[K]float64 {
	out := map[K]float64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

func TestPodsLeftAlone(t *testing.T) {
	ctx := testContext(t)
	createNamespace(ctx, t, "team-b")
	createNamespace(ctx, t, "sluice-system")
	tests := []struct {
		name string
		pod  *corev1.Pod
	}{
		{name: "no queue and no default queue", pod: newPod("team-b", "plain", nil, nil)},
		{name: "kube-system", pod: newPod("kube-system", "queued", map[string]string{podkeys.QueueNameLabel: "q"}, nil)},
		{name: "sluice's own namespace", pod: newPod("sluice-system", "queued", map[string]string{podkeys.QueueNameLabel: "q"}, nil)},
		{name: "a Job's pod without a queue", pod: ownedBy(newPod("team-b", "job-pod", nil, nil), "batch/v1", "Job")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := s.client.Create(ctx, tc.pod); err != nil {
				t.Fatalf("create pod: %v", err)
			}
			assertUntouched(t, tc.pod)
		})
	}
}

// ownedBy makes pod controlled by an object of apiVersion and kind.
func ownedBy(pod *corev1.Pod, apiVersion, kind string) *corev1.Pod {
	pod.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: apiVersion, Kind: kind, Name: "owner", UID: "0c4b8a2e-4f1e-4f39-9d43-5d2b0e8d0a11", Controller: ptr.To(true),
	}}
	return pod
}

// createDefaultQueue creates the LocalQueue "default" in namespace.
func createDefaultQueue(ctx context.Context, t *testing.T, namespace string) {
	t.Helper()
	lq := &unstructured.Unstructured{}
	lq.SetAPIVersion("sluice.dev/v1alpha1")
	lq.SetKind("LocalQueue")
	lq.SetNamespace(namespace)
	lq.SetName("default")
	if err := unstructured.SetNestedField(lq.Object, "main", "spec", "clusterQueue"); err != nil {
		t.Fatal(err)
	}
	if err := s.client.Create(ctx, lq); err != nil {
		t.Fatalf("create LocalQueue default in %s: %v", namespace, err)
	}
}

// TestDefaultLocalQueue: a pod without a queue goes to the LocalQueue
// "default" only in a namespace a cluster admin opted in to defaulting; in
// any other it is created untouched, default queue or not.
func TestDefaultLocalQueue(t *testing.T) {
	ctx := testContext(t)
	optedIn := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-c", Labels: map[string]string{"sluice.dev/queue-defaulting": "enabled"}}}
	if err := s.client.Create(ctx, optedIn); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	createNamespace(ctx, t, "team-c-no-opt-in")
	// The LocalQueue of the namespace that did not opt in is created first:
	// once the webhook's watch has the later one, it has this one too.
	createDefaultQueue(ctx, t, "team-c-no-opt-in")
	createDefaultQueue(ctx, t, "team-c")
	// The webhook learns of the queue through its watch; retry until the
	// cache has it, removing pods created before.
	var pod *corev1.Pod
	err := harness.Poll(ctx, func() error {
		pod = newPod("team-c", "", nil, nil)
		pod.GenerateName = "defaulted-"
		if err := s.client.Create(ctx, pod); err != nil {
			return err
		}
		if pod.Labels[podkeys.QueueNameLabel] == "default" {
			return nil
		}
		_ = s.client.Delete(ctx, pod)
		return fmt.Errorf("pod %s got no default queue yet", pod.Name)
	})
	if err != nil {
		t.Fatal(err)
	}
	assertMarked(t, pod, "default")

	plain := newPod("team-c-no-opt-in", "not-defaulted", nil, nil)
	if err := s.client.Create(ctx, plain); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	assertUntouched(t, plain)
	if _, ok := plain.Labels[podkeys.QueueNameLabel]; ok {
		t.Errorf("pod in a namespace that did not opt in got queue %q", plain.Labels[podkeys.QueueNameLabel])
	}
}

// The messages below are documented in docs/webhook.md.
func TestInvalidPodsAreRefused(t *testing.T) {
	ctx := testContext(t)
	createNamespace(ctx, t, "team-d")
	// CREATE is judged by the mutating webhook, before it marks the pod.
	const denied = `admission webhook "mutate.pods.sluice.dev" denied the request: `
	tests := []struct {
		name        string
		labels      map[string]string
		annotations map[string]string
		message     string
	}{
		{
			name:    "group-without-count",
			labels:  map[string]string{podkeys.QueueNameLabel: "q", podkeys.PodGroupNameLabel: "g"},
			message: `Pod "group-without-count" is invalid: metadata.annotations[kueue.x-k8s.io/pod-group-total-count]: Required value: a pod that names a group must also declare how many pods the group has`,
		},
		{
			name:        "count-without-group",
			labels:      map[string]string{podkeys.QueueNameLabel: "q"},
			annotations: map[string]string{podkeys.PodGroupTotalCountAnnotation: "2"},
			message:     `Pod "count-without-group" is invalid: metadata.labels[kueue.x-k8s.io/pod-group-name]: Required value: a pod that declares a group size must also name its group`,
		},
		{
			name:        "zero-count",
			labels:      map[string]string{podkeys.QueueNameLabel: "q", podkeys.PodGroupNameLabel: "g"},
			annotations: map[string]string{podkeys.PodGroupTotalCountAnnotation: "0"},
			message:     `Pod "zero-count" is invalid: metadata.annotations[kueue.x-k8s.io/pod-group-total-count]: Invalid value: "0": a group must have at least 1 pod`,
		},
		{
			name:        "count-not-a-number",
			labels:      map[string]string{podkeys.QueueNameLabel: "q", podkeys.PodGroupNameLabel: "g"},
			annotations: map[string]string{podkeys.PodGroupTotalCountAnnotation: "three"},
			message:     `Pod "count-not-a-number" is invalid: metadata.annotations[kueue.x-k8s.io/pod-group-total-count]: Invalid value: "three": must be a whole number of pods`,
		},
		{
			name:    "bad-queue-name",
			labels:  map[string]string{podkeys.QueueNameLabel: "Team_A"},
			message: `Pod "bad-queue-name" is invalid: metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value: "Team_A": must be a DNS-1123 subdomain (`,
		},
		{
			name:    "managed-false",
			labels:  map[string]string{podkeys.QueueNameLabel: "q", podkeys.ManagedLabel: "false"},
			message: `Pod "managed-false" is invalid: metadata.labels[kueue.x-k8s.io/managed]: Forbidden: sluice sets this label itself; the only value allowed is "true"`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := s.client.Create(ctx, newPod("team-d", tc.name, tc.labels, tc.annotations))
			if err == nil {
				t.Fatal("pod was created; want it refused")
			}
			if !apierrors.IsInvalid(err) {
				t.Errorf("error reason = %v, want Invalid", apierrors.ReasonForError(err))
			}
			if !strings.HasPrefix(err.Error(), denied+tc.message) {
				t.Errorf("error =\n%s\nwant it to start with\n%s", err, denied+tc.message)
			}
			got := &corev1.Pod{}
			if err := s.client.Get(ctx, types.NamespacedName{Namespace: "team-d", Name: tc.name}, got); !apierrors.IsNotFound(err) {
				t.Errorf("get refused pod: %v, want NotFound", err)
			}
		})
	}
	body, err := s.webhook.Metrics(ctx)
	if err != nil {
		t.Fatalf("read metrics: %v", err)
	}
	if v := metricValue(body, `sluice_webhook_pods_rejected_total{reason="Forbidden:managed"}`); v < 1 {
		t.Errorf(`pods_rejected_total{reason="Forbidden:managed"} = %v, want at least 1`, v)
	}
}

func TestQueueOfRunningPodCannotChange(t *testing.T) {
	ctx := testContext(t)
	createNamespace(ctx, t, "team-e")
	pod := newPod("team-e", "runner", map[string]string{podkeys.QueueNameLabel: "first"}, nil)
	if err := s.client.Create(ctx, pod); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	relabel := func(c client.Client, queue string) error {
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, podkeys.QueueNameLabel, queue)
		return c.Patch(ctx, pod, client.RawPatch(types.MergePatchType, []byte(patch)))
	}

	// While gated the queue may change.
	if err := relabel(s.client, "second"); err != nil {
		t.Fatalf("change queue of gated pod: %v", err)
	}

	// Ungate and run it, as the grouper and kubelet would.
	ungate := []byte(`[{"op":"replace","path":"/spec/schedulingGates","value":[]}]`)
	if err := s.client.Patch(ctx, pod, client.RawPatch(types.JSONPatchType, ungate)); err != nil {
		t.Fatalf("ungate: %v", err)
	}
	pod.Status.Phase = corev1.PodRunning
	if err := s.client.Status().Update(ctx, pod); err != nil {
		t.Fatalf("set phase Running: %v", err)
	}

	validations := func() float64 {
		body, err := s.webhook.Metrics(ctx)
		if err != nil {
			t.Fatalf("read metrics: %v", err)
		}
		return metricValue(body, `sluice_webhook_admission_duration_seconds_count{webhook="validating"}`)
	}
	before := validations()

	// An update that touches no queueing key never reaches the webhook.
	if err := s.client.Patch(ctx, pod, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"unrelated":"x"}}}`))); err != nil {
		t.Fatalf("unrelated update: %v", err)
	}
	if got := validations(); got != before {
		t.Errorf("validating webhook was called %v times for an update of no queueing key, want 0", got-before)
	}

	err := relabel(s.client, "third")
	const want = `admission webhook "validate.pods.sluice.dev" denied the request: Pod "runner" is invalid: metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value: "third": the queue can only change while the pod waits for admission or after it has finished`
	if err == nil || err.Error() != want {
		t.Fatalf("change queue of running pod: error %v\nwant %s", err, want)
	}
	if got := validations(); got != before+1 {
		t.Errorf("validating webhook calls = %v, want %v", got, before+1)
	}

	// sluice's own service accounts are not validated.
	grantPodPatch(ctx, t, "team-e", "sluice-system", "grouper")
	cfg := rest.CopyConfig(s.env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:sluice-system:grouper"}
	own, err := client.New(cfg, client.Options{Scheme: s.client.Scheme()})
	if err != nil {
		t.Fatalf("impersonating client: %v", err)
	}
	if err := relabel(own, "fourth"); err != nil {
		t.Fatalf("update by sluice's service account: %v", err)
	}
}

// The grouper follows pods by the managed label: an update that removes it
// must reach the validating webhook (its match conditions include the
// label) and be refused, and so must one that changes it.
func TestManagedLabelCannotBeRemoved(t *testing.T) {
	ctx := testContext(t)
	createNamespace(ctx, t, "team-g")
	pod := newPod("team-g", "tracked", map[string]string{podkeys.QueueNameLabel: "q"}, nil)
	if err := s.client.Create(ctx, pod); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	assertMarked(t, pod, "q")

	const denied = `admission webhook "validate.pods.sluice.dev" denied the request: Pod "tracked" is invalid: metadata.labels[kueue.x-k8s.io/managed]: Forbidden: `
	tests := []struct {
		name  string
		value string // JSON value of the label in the merge patch
		want  string
	}{
		{name: "removed", value: "null", want: denied + "sluice tracks the pod by this label until it is deleted; it cannot be removed"},
		{name: "changed", value: `"false"`, want: denied + `sluice sets this label itself; the only value allowed is "true"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, podkeys.ManagedLabel, tc.value)
			err := s.client.Patch(ctx, pod.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(patch)))
			if err == nil || err.Error() != tc.want {
				t.Fatalf("patch managed label to %s: error %v\nwant %s", tc.value, err, tc.want)
			}
			got := &corev1.Pod{}
			if err := s.client.Get(ctx, client.ObjectKeyFromObject(pod), got); err != nil {
				t.Fatalf("get pod: %v", err)
			}
			if v := got.Labels[podkeys.ManagedLabel]; v != podkeys.ManagedLabelValue {
				t.Errorf("managed label after refused patch = %q, want %q", v, podkeys.ManagedLabelValue)
			}
		})
	}
}

// grantPodPatch lets a service account patch pods in namespace.
func grantPodPatch(ctx context.Context, t *testing.T, namespace, saNamespace, sa string) {
	t.Helper()
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "pod-patcher"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "patch"}}},
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "pod-patcher"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: saNamespace, Name: sa}},
	}
	for _, obj := range []client.Object{role, binding} {
		if err := s.client.Create(ctx, obj); err != nil {
			t.Fatalf("create %T: %v", obj, err)
		}
	}
}

// TestShutdownUnregisters runs a second webhook that manages no namespace,
// stops it with SIGTERM and checks that it exits cleanly and removes its
// configurations.
func TestShutdownUnregisters(t *testing.T) {
	ctx := testContext(t)
	const name = "sluice-webhook-shutdown"
	p, err := startWebhook(ctx, name, "--managed-namespaces", "sluice.dev/test-selects=nothing", "--unregister-on-exit")
	if err != nil {
		t.Fatal(err)
	}
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := s.client.Get(ctx, types.NamespacedName{Name: name}, cfg); err != nil {
		t.Fatalf("get validating configuration of a ready webhook: %v", err)
	}
	if got := cfg.Webhooks[0].NamespaceSelector.String(); !strings.Contains(got, "sluice.dev/test-selects") {
		t.Errorf("namespace selector = %s, want the --managed-namespaces one", got)
	}
	if err := p.Stop(20 * time.Second); err != nil {
		t.Fatalf("webhook exit after SIGTERM: %v\n%s", err, p.Tail(40))
	}
	for _, obj := range []client.Object{&admissionregistrationv1.MutatingWebhookConfiguration{}, &admissionregistrationv1.ValidatingWebhookConfiguration{}} {
		if err := s.client.Get(ctx, types.NamespacedName{Name: name}, obj); !apierrors.IsNotFound(err) {
			t.Errorf("%T %s after shutdown: %v, want NotFound", obj, name, err)
		}
	}
}

// metricValue returns the value of the sample whose name and labels start
// with prefix, or -1 when there is none.
func metricValue(body, prefix string) float64 {
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, prefix) || strings.HasPrefix(line, "#") {
			continue
		}
		rest := strings.TrimPrefix(line, prefix)
		if !strings.HasPrefix(rest, " ") && !strings.HasPrefix(rest, "{") {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err == nil {
			return v
		}
	}
	return -1
}

// TestManagedLabelWithoutQueueIsRefused: the grouper follows every pod
// labelled managed, and a pod that names no queue reaches no mutating
// webhook. So such a pod is refused at creation, and the label cannot be
// added later to a pod sluice did not queue.
func TestManagedLabelWithoutQueueIsRefused(t *testing.T) {
	ctx := testContext(t)
	createNamespace(ctx, t, "team-h")
	forged := newPod("team-h", "forged", map[string]string{podkeys.ManagedLabel: "true", podkeys.PodGroupNameLabel: "g"},
		map[string]string{podkeys.PodGroupTotalCountAnnotation: "2"})
	err := s.client.Create(ctx, forged)
	const want = `admission webhook "unqueued.pods.sluice.dev" denied the request: Pod "forged" is invalid: metadata.labels[kueue.x-k8s.io/managed]: Forbidden: ` +
		`sluice sets this label on the pods it queues, and this pod is not queued (it has no kueue.x-k8s.io/queue-name label, or its controller is left to Kueue); remove this label`
	if err == nil || err.Error() != want {
		t.Fatalf("create pod labelled managed without a queue: error %v\nwant %s", err, want)
	}

	plain := newPod("team-h", "plain", nil, nil)
	if err := s.client.Create(ctx, plain); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	assertUntouched(t, plain)
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"true"}}}`, podkeys.ManagedLabel)
	err = s.client.Patch(ctx, plain, client.RawPatch(types.MergePatchType, []byte(patch)))
	const wantAdded = `admission webhook "validate.pods.sluice.dev" denied the request: Pod "plain" is invalid: metadata.labels[kueue.x-k8s.io/managed]: Forbidden: ` +
		`sluice sets this label when it queues a pod at creation; it cannot be added later`
	if err == nil || err.Error() != wantAdded {
		t.Fatalf("add the managed label to a pod sluice did not queue: error %v\nwant %s", err, wantAdded)
	}
}
