package handler

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	jsonpatchapply "github.com/evanphx/json-patch/v5"
	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/services/webhook/internal/metrics"
	"github.com/sluice-dev/sluice/services/webhook/internal/validate"
	"gomodules.xyz/jsonpatch/v2"
	"k8s.io/apimachinery/pkg/api/equality"
)

// stubLookup answers from fixed sets; the real cache-backed lookup is
// exercised by the integration test against the API server.
type stubLookup struct {
	unmanaged     map[string]bool
	defaultQueues map[string]bool
	err           error
}

func (s stubLookup) NamespaceManaged(_ context.Context, ns string) (bool, error) {
	return !s.unmanaged[ns], s.err
}

func (s stubLookup) DefaultQueueExists(_ context.Context, ns string) (bool, error) {
	return s.defaultQueues[ns], s.err
}

func newMetrics(t *testing.T) (*metrics.Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatalf("metrics.New: %v", err)
	}
	return m, reg
}

// counter reads one counter sample from the registry; 0 when absent.
func counter(t *testing.T, reg *prometheus.Registry, name, reason string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			match := reason == ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					match = true
				}
			}
			if match {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func request(t *testing.T, op admissionv1.Operation, pod, old *corev1.Pod) admission.Request {
	t.Helper()
	raw := func(p *corev1.Pod) runtime.RawExtension {
		if p == nil {
			return runtime.RawExtension{}
		}
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatalf("encode pod: %v", err)
		}
		return runtime.RawExtension{Raw: b}
	}
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID:       "uid",
		Operation: op,
		Namespace: pod.Namespace,
		Object:    raw(pod),
		OldObject: raw(old),
	}}
}

func testPod(ns string, labels, annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: ns, Labels: labels, Annotations: annotations},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "app"}}},
	}
}

func patchedAnnotation(resp admission.Response, key string) string {
	for _, op := range resp.Patches {
		if m, ok := op.Value.(map[string]string); ok && op.Path == "/metadata/annotations" {
			return m[key]
		}
		if op.Path == "/metadata/annotations/"+strings.ReplaceAll(key, "/", "~1") {
			s, _ := op.Value.(string)
			return s
		}
	}
	return ""
}

func TestMutator(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	const parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	lookup := stubLookup{unmanaged: map[string]bool{"kube-system": true}, defaultQueues: map[string]bool{"with-default": true}}
	queued := map[string]string{podkeys.QueueNameLabel: "q"}

	tests := []struct {
		name        string
		lookup      Lookup
		tracer      trace.Tracer
		pod         *corev1.Pod
		op          admissionv1.Operation
		wantPatched bool
		wantCode    int32
		wantTraceID string
	}{
		{name: "queued pod", pod: testPod("team", queued, nil), wantPatched: true},
		{name: "default queue", pod: testPod("with-default", nil, nil), wantPatched: true},
		{name: "no queue", pod: testPod("team", nil, nil)},
		{name: "unmanaged namespace", pod: testPod("kube-system", queued, nil)},
		{name: "update is ignored", pod: testPod("team", queued, nil), op: admissionv1.Update},
		{
			name: "caller's trace continues", pod: testPod("team", queued, map[string]string{podkeys.TraceparentAnnotation: parent}),
			wantPatched: true, wantTraceID: "0af7651916cd43dd8448eb211c80319c",
		},
		{name: "tracing off still stamps a trace", tracer: noop.NewTracerProvider().Tracer("t"), pod: testPod("team", queued, nil), wantPatched: true},
		{name: "lookup failure fails closed", lookup: stubLookup{err: errors.New("boom")}, pod: testPod("team", queued, nil), wantCode: http.StatusInternalServerError},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, tracer, op := tc.lookup, tc.tracer, tc.op
			if l == nil {
				l = lookup
			}
			if tracer == nil {
				tracer = tp.Tracer("test")
			}
			if op == "" {
				op = admissionv1.Create
			}
			m, reg := newMetrics(t)
			h, err := NewMutator(l, m, tracer, propagation.TraceContext{})
			if err != nil {
				t.Fatalf("NewMutator: %v", err)
			}
			resp := h.Handle(context.Background(), request(t, op, tc.pod, nil))
			if tc.wantCode != 0 {
				if resp.Allowed || resp.Result == nil || resp.Result.Code != tc.wantCode {
					t.Fatalf("response = %+v, want refusal with code %d", resp.AdmissionResponse, tc.wantCode)
				}
				return
			}
			if !resp.Allowed {
				t.Fatalf("response refused: %+v", resp.Result)
			}
			if got := len(resp.Patches) > 0; got != tc.wantPatched {
				t.Fatalf("patched = %v (%+v), want %v", got, resp.Patches, tc.wantPatched)
			}
			wantGated := 0.0
			if tc.wantPatched {
				wantGated = 1
			}
			if got := counter(t, reg, "sluice_webhook_pods_gated_total", ""); got != wantGated {
				t.Errorf("pods gated = %v, want %v", got, wantGated)
			}
			if !tc.wantPatched {
				return
			}
			got := patchedAnnotation(resp, podkeys.TraceparentAnnotation)
			sc := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": got})
			span := trace.SpanContextFromContext(sc)
			if !span.IsValid() {
				t.Fatalf("traceparent %q is not a valid W3C trace context", got)
			}
			if tc.wantTraceID != "" && span.TraceID().String() != tc.wantTraceID {
				t.Errorf("trace id = %s, want the caller's %s", span.TraceID(), tc.wantTraceID)
			}
			if got == parent {
				t.Errorf("traceparent %q reuses the caller's span instead of starting %s", got, SpanName)
			}
		})
	}
}

func TestMutatorStartsNewTraces(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	h, err := NewMutator(stubLookup{}, mustMetrics(t), tp.Tracer("test"), propagation.TraceContext{})
	if err != nil {
		t.Fatalf("NewMutator: %v", err)
	}
	pod := testPod("team", map[string]string{podkeys.QueueNameLabel: "q"}, nil)
	a := patchedAnnotation(h.Handle(context.Background(), request(t, admissionv1.Create, pod, nil)), podkeys.TraceparentAnnotation)
	b := patchedAnnotation(h.Handle(context.Background(), request(t, admissionv1.Create, pod, nil)), podkeys.TraceparentAnnotation)
	if a == "" || a[3:35] == b[3:35] {
		t.Errorf("two pods share trace %q and %q; each pod must root its own trace", a, b)
	}
}

func TestValidator(t *testing.T) {
	running := func(p *corev1.Pod) *corev1.Pod { p.Status.Phase = corev1.PodRunning; return p }
	tests := []struct {
		name        string
		op          admissionv1.Operation
		pod, old    *corev1.Pod
		wantAllowed bool
		wantMessage string
		wantReason  string
	}{
		{name: "valid pod", op: admissionv1.Create, pod: testPod("team", map[string]string{podkeys.QueueNameLabel: "q"}, nil), wantAllowed: true},
		{
			name: "group without count", op: admissionv1.Create,
			pod:         testPod("team", map[string]string{podkeys.PodGroupNameLabel: "g"}, nil),
			wantMessage: `Pod "p" is invalid: metadata.annotations[kueue.x-k8s.io/pod-group-total-count]: Required value: ` + validate.DetailGroupNeedsCount,
			wantReason:  "Required:pod-group-total-count",
		},
		{
			name: "bad pod in unmanaged namespace", op: admissionv1.Create, wantAllowed: true,
			pod: testPod("kube-system", map[string]string{podkeys.ManagedLabel: "false"}, nil),
		},
		{
			name: "queue change while running", op: admissionv1.Update,
			old:         running(testPod("team", map[string]string{podkeys.QueueNameLabel: "a"}, nil)),
			pod:         running(testPod("team", map[string]string{podkeys.QueueNameLabel: "b"}, nil)),
			wantMessage: `Pod "p" is invalid: metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value: "b": ` + validate.DetailQueueImmutable,
			wantReason:  "Invalid:queue-name",
		},
		{name: "delete is not judged", op: admissionv1.Delete, pod: testPod("team", map[string]string{podkeys.ManagedLabel: "no"}, nil), wantAllowed: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, reg := newMetrics(t)
			h, err := NewValidator(stubLookup{unmanaged: map[string]bool{"kube-system": true}}, m)
			if err != nil {
				t.Fatalf("NewValidator: %v", err)
			}
			resp := h.Handle(context.Background(), request(t, tc.op, tc.pod, tc.old))
			if resp.Allowed != tc.wantAllowed {
				t.Fatalf("allowed = %v (%+v), want %v", resp.Allowed, resp.Result, tc.wantAllowed)
			}
			if tc.wantAllowed {
				return
			}
			if resp.Result.Message != tc.wantMessage {
				t.Errorf("message = %q\nwant      %q", resp.Result.Message, tc.wantMessage)
			}
			if resp.Result.Reason != metav1.StatusReasonInvalid || resp.Result.Code != http.StatusUnprocessableEntity {
				t.Errorf("status = %s/%d, want Invalid/422", resp.Result.Reason, resp.Result.Code)
			}
			if got := counter(t, reg, "sluice_webhook_pods_rejected_total", tc.wantReason); got != 1 {
				t.Errorf("pods rejected{reason=%q} = %v, want 1", tc.wantReason, got)
			}
		})
	}
}

func mustMetrics(t *testing.T) *metrics.Metrics {
	m, _ := newMetrics(t)
	return m
}

func TestMutatorValidatesCreate(t *testing.T) {
	lookup := stubLookup{}
	tests := []struct {
		name      string
		labels    map[string]string
		wantField string
	}{
		{name: "bad queue name", labels: map[string]string{podkeys.QueueNameLabel: "Not_A_Queue"}, wantField: `metadata.labels[kueue.x-k8s.io/queue-name]`},
		{name: "group name without total count", labels: map[string]string{podkeys.QueueNameLabel: "q", podkeys.PodGroupNameLabel: "g"}, wantField: `metadata.annotations[kueue.x-k8s.io/pod-group-total-count]`},
		{name: "managed label not true", labels: map[string]string{podkeys.ManagedLabel: "false"}, wantField: `metadata.labels[kueue.x-k8s.io/managed]`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, reg := newMetrics(t)
			h, err := NewMutator(lookup, m, noop.NewTracerProvider().Tracer("t"), propagation.TraceContext{})
			if err != nil {
				t.Fatal(err)
			}
			resp := h.Handle(context.Background(), request(t, admissionv1.Create, testPod("team", tc.labels, nil), nil))
			if resp.Allowed || resp.Result == nil || resp.Result.Code != http.StatusUnprocessableEntity {
				t.Fatalf("response = %+v, want a 422 refusal", resp.AdmissionResponse)
			}
			if len(resp.Patches) != 0 {
				t.Errorf("a refused pod was patched: %+v", resp.Patches)
			}
			if !strings.Contains(resp.Result.Message, tc.wantField) {
				t.Errorf("message %q does not name %s", resp.Result.Message, tc.wantField)
			}
			if got := counter(t, reg, "sluice_webhook_pods_rejected_total", ""); got != 1 {
				t.Errorf("pods rejected = %v, want 1", got)
			}
		})
	}
}

// A reinvocation (another mutating webhook changed the pod after sluice's)
// must leave sluice's marks, the trace context included, as they are.
func TestMutatorReinvocationIsStable(t *testing.T) {
	m, _ := newMetrics(t)
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	h, err := NewMutator(stubLookup{}, m, tp.Tracer("t"), propagation.TraceContext{})
	if err != nil {
		t.Fatal(err)
	}
	pod := testPod("team", map[string]string{podkeys.QueueNameLabel: "q"}, nil)
	first := h.Handle(context.Background(), request(t, admissionv1.Create, pod, nil))
	if !first.Allowed || len(first.Patches) == 0 {
		t.Fatalf("first invocation = %+v, want a patch", first.AdmissionResponse)
	}
	mutated := applyPatches(t, pod, first.Patches)

	second := h.Handle(context.Background(), request(t, admissionv1.Create, mutated, nil))
	if !second.Allowed {
		t.Fatalf("reinvocation refused: %+v", second.Result)
	}
	if again := applyPatches(t, mutated, second.Patches); !equality.Semantic.DeepEqual(again, mutated) {
		t.Errorf("reinvocation changed the pod:\nbefore %+v\nafter  %+v", mutated.ObjectMeta, again.ObjectMeta)
	}
}

func applyPatches(t *testing.T, pod *corev1.Pod, ops []jsonpatch.JsonPatchOperation) *corev1.Pod {
	t.Helper()
	doc, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(ops)
	if err != nil {
		t.Fatal(err)
	}
	patch, err := jsonpatchapply.DecodePatch(raw)
	if err != nil {
		t.Fatal(err)
	}
	out, err := patch.Apply(doc)
	if err != nil {
		t.Fatalf("applying %s: %v", raw, err)
	}
	var p corev1.Pod
	if err := json.Unmarshal(out, &p); err != nil {
		t.Fatal(err)
	}
	return &p
}
