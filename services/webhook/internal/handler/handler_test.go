package handler

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	jsonpatchapply "github.com/evanphx/json-patch/v5"
	"github.com/sluice-dev/sluice/pkg/podgroup"
	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/pkg/rolehash"
	"github.com/sluice-dev/sluice/services/webhook/internal/metrics"
	"github.com/sluice-dev/sluice/services/webhook/internal/mutate"
	"github.com/sluice-dev/sluice/services/webhook/internal/validate"
	"gomodules.xyz/jsonpatch/v2"
	"k8s.io/apimachinery/pkg/api/equality"
)

// stubLookup answers from fixed sets; the real cache-backed lookup is
// exercised by the integration test against the API server.
type stubLookup struct {
	unmanaged     map[string]bool
	defaultQueues map[string]bool
	declared      validate.Group  // what DeclaredGroup tells of every group
	runs          bool            // what GroupRuns tells of every group
	classes       map[string]bool // the WorkloadPriorityClasses that exist
	classLookups  *int            // counts PriorityClassExists calls when set
	classErr      error           // fails PriorityClassExists alone
	err           error
}

func (s stubLookup) PriorityClassExists(_ context.Context, name string) (bool, error) {
	if s.classLookups != nil {
		*s.classLookups++
	}
	if s.classErr != nil {
		return false, s.classErr
	}
	return s.classes[name], s.err
}

func (s stubLookup) NamespaceManaged(_ context.Context, ns string) (bool, error) {
	return !s.unmanaged[ns], s.err
}

func (s stubLookup) DeclaredGroup(context.Context, string, string, string) (validate.Group, error) {
	return s.declared, s.err
}

func (s stubLookup) GroupRuns(context.Context, string, string) (bool, error) {
	return s.runs, s.err
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
		// defaulting sends the request to DefaultPath's handler.
		defaulting bool
	}{
		{name: "queued pod", pod: testPod("team", queued, nil), wantPatched: true},
		{name: "default queue, opted in", pod: testPod("with-default", nil, nil), defaulting: true, wantPatched: true},
		{name: "default queue, not opted in", pod: testPod("with-default", nil, nil)},
		{name: "own queue, opted in", pod: testPod("with-default", queued, nil), defaulting: true, wantPatched: true},
		{name: "no default queue, opted in", pod: testPod("team", nil, nil), defaulting: true},
		{name: "no queue", pod: testPod("team", nil, nil)},
		{name: "unmanaged namespace", pod: testPod("kube-system", queued, nil)},
		{name: "update is ignored", pod: testPod("team", queued, nil), op: admissionv1.Update},
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
			var handler admission.Handler = h
			if tc.defaulting {
				handler = h.DefaultingWebhook().Handler
			}
			resp := handler.Handle(context.Background(), request(t, op, tc.pod, nil))
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
			if !parseTraceparent(got).IsValid() {
				t.Fatalf("traceparent %q is not a valid W3C trace context", got)
			}
		})
	}
}

// The pod's trace continues the trace context of the HTTP request that
// delivers the admission review, the create request's as kube-apiserver
// sends it; without one the pod roots a trace of its own. The request
// goes through the webhook as the service serves it.
func TestMutatorContinuesTheRequestTrace(t *testing.T) {
	const (
		requestTrace = "0af7651916cd43dd8448eb211c80319c"
		requestSpan  = "b7ad6b7169203331"
		header       = "00-" + requestTrace + "-" + requestSpan + "-01"
	)
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tests := []struct {
		name      string
		tracer    trace.Tracer
		header    string // the traceparent header of the HTTP request
		wantTrace string // empty: a new trace
		// wantRequestSpan: the pod's trace context names the request's
		// span, as the webhook records no span of its own.
		wantRequestSpan bool
	}{
		{name: "request trace, tracing on", tracer: tp.Tracer("t"), header: header, wantTrace: requestTrace},
		{name: "request trace, tracing off", tracer: noop.NewTracerProvider().Tracer("t"), header: header, wantTrace: requestTrace, wantRequestSpan: true},
		{name: "no request trace, tracing on", tracer: tp.Tracer("t")},
		{name: "no request trace, tracing off", tracer: noop.NewTracerProvider().Tracer("t")},
		{name: "a malformed header is ignored", tracer: tp.Tracer("t"), header: "00-not-a-trace-01"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, err := NewMutator(stubLookup{}, mustMetrics(t), tc.tracer, propagation.TraceContext{})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(h.Webhook())
			t.Cleanup(srv.Close)

			pod := testPod("team", map[string]string{podkeys.QueueNameLabel: "q"}, nil)
			resp := postReview(t, srv.URL, tc.header, request(t, admissionv1.Create, pod, nil))
			if !resp.Allowed {
				t.Fatalf("refused: %+v", resp.Result)
			}
			final := applyRawPatch(t, pod, resp.Patch)
			stamped := final.Annotations[podkeys.TraceparentAnnotation]
			sc := parseTraceparent(stamped)
			if !sc.IsValid() {
				t.Fatalf("traceparent %q is not a valid W3C trace context", stamped)
			}
			if tc.wantTrace == "" {
				if sc.TraceID().String() == requestTrace {
					t.Errorf("trace id = %s, want a new trace", sc.TraceID())
				}
				return
			}
			if got := sc.TraceID().String(); got != tc.wantTrace {
				t.Errorf("trace id = %s, want the request's %s", got, tc.wantTrace)
			}
			if got := sc.SpanID().String(); (got == requestSpan) != tc.wantRequestSpan {
				t.Errorf("span id = %s; the request's is %s: want it named %v", got, requestSpan, tc.wantRequestSpan)
			}
		})
	}
}

// postReview sends req in an AdmissionReview to a webhook server, as
// kube-apiserver does, with traceparent as the HTTP request's trace
// context when not empty, and returns the response.
func postReview(t *testing.T, url, traceparent string, req admission.Request) admissionv1.AdmissionResponse {
	t.Helper()
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request:  &req.AdmissionRequest,
	}
	body, err := json.Marshal(review)
	if err != nil {
		t.Fatal(err)
	}
	httpReq, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	httpReq.Header.Set("Content-Type", "application/json")
	if traceparent != "" {
		httpReq.Header.Set("traceparent", traceparent)
	}
	httpResp, err := http.DefaultClient.Do(httpReq)
	if err != nil {
		t.Fatalf("post admission review: %v", err)
	}
	defer httpResp.Body.Close()
	var out admissionv1.AdmissionReview
	if err := json.NewDecoder(httpResp.Body).Decode(&out); err != nil || out.Response == nil {
		t.Fatalf("decode admission response (HTTP %d): %v", httpResp.StatusCode, err)
	}
	return *out.Response
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
		{
			name: "managed label removed", op: admissionv1.Update,
			old:         running(testPod("team", map[string]string{podkeys.QueueNameLabel: "a", podkeys.ManagedLabel: podkeys.ManagedLabelValue}, nil)),
			pod:         running(testPod("team", map[string]string{podkeys.QueueNameLabel: "a"}, nil)),
			wantMessage: `Pod "p" is invalid: metadata.labels[kueue.x-k8s.io/managed]: Forbidden: ` + validate.DetailManagedRemoved,
			wantReason:  "Forbidden:managed",
		},
		{
			// The validating webhook sees a pod after sluice's mutating
			// one stamped its trace context: only that key is sluice's.
			name: "create with sluice.dev/ keys", op: admissionv1.Create,
			pod: testPod("team", map[string]string{podkeys.QueueNameLabel: "q"},
				map[string]string{podkeys.TraceparentAnnotation: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", podkeys.WorkloadAnnotation: "w"}),
			wantMessage: `Pod "p" is invalid: metadata.annotations[sluice.dev/workload]: Forbidden: ` + validate.DetailSluiceKey,
			wantReason:  "Forbidden:sluice.dev",
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

// Each CREATE rule is enforced by the mutating webhook with the documented
// message (docs/webhook.md), exactly as the validating webhook words it, and
// a refused pod is not patched.
func TestMutatorValidatesCreate(t *testing.T) {
	queued := func(kv ...string) map[string]string {
		m := map[string]string{podkeys.QueueNameLabel: "q"}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	count := func(n string) map[string]string { return map[string]string{podkeys.PodGroupTotalCountAnnotation: n} }
	tests := []struct {
		name        string
		labels      map[string]string
		annotations map[string]string
		wantMessage string
		wantReasons []string
	}{
		{
			name:        "group without count",
			labels:      queued(podkeys.PodGroupNameLabel, "g"),
			wantMessage: `Pod "p" is invalid: metadata.annotations[kueue.x-k8s.io/pod-group-total-count]: Required value: a pod that names a group must also declare how many pods the group has`,
			wantReasons: []string{"Required:pod-group-total-count"},
		},
		{
			name:        "count without group",
			labels:      queued(),
			annotations: count("2"),
			wantMessage: `Pod "p" is invalid: metadata.labels[kueue.x-k8s.io/pod-group-name]: Required value: a pod that declares a group size must also name its group`,
			wantReasons: []string{"Required:pod-group-name"},
		},
		{
			name:        "group name not a subdomain",
			labels:      queued(podkeys.PodGroupNameLabel, "G_1"),
			annotations: count("2"),
			wantMessage: `Pod "p" is invalid: metadata.labels[kueue.x-k8s.io/pod-group-name]: Invalid value: "G_1": must be a DNS-1123 subdomain (`,
			wantReasons: []string{"Invalid:pod-group-name"},
		},
		{
			name:        "count not a whole number",
			labels:      queued(podkeys.PodGroupNameLabel, "g"),
			annotations: count("three"),
			wantMessage: `Pod "p" is invalid: metadata.annotations[kueue.x-k8s.io/pod-group-total-count]: Invalid value: "three": must be a whole number of pods`,
			wantReasons: []string{"Invalid:pod-group-total-count"},
		},
		{
			name:        "count below one",
			labels:      queued(podkeys.PodGroupNameLabel, "g"),
			annotations: count("0"),
			wantMessage: `Pod "p" is invalid: metadata.annotations[kueue.x-k8s.io/pod-group-total-count]: Invalid value: "0": a group must have at least 1 pod`,
			wantReasons: []string{"Invalid:pod-group-total-count"},
		},
		{
			name:        "queue name not a subdomain",
			labels:      map[string]string{podkeys.QueueNameLabel: "Not_A_Queue"},
			wantMessage: `Pod "p" is invalid: metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value: "Not_A_Queue": must be a DNS-1123 subdomain (`,
			wantReasons: []string{"Invalid:queue-name"},
		},
		{
			name:        "managed label not true",
			labels:      queued(podkeys.ManagedLabel, "false"),
			wantMessage: `Pod "p" is invalid: metadata.labels[kueue.x-k8s.io/managed]: Forbidden: sluice sets this label itself; the only value allowed is "true"`,
			wantReasons: []string{"Forbidden:managed"},
		},
		{
			name:        "every broken rule at once",
			labels:      map[string]string{podkeys.QueueNameLabel: "q", podkeys.PodGroupNameLabel: "g", podkeys.ManagedLabel: "no"},
			wantMessage: `Pod "p" is invalid: [metadata.annotations[kueue.x-k8s.io/pod-group-total-count]: Required value: ` + validate.DetailGroupNeedsCount + `, metadata.labels[kueue.x-k8s.io/managed]: Forbidden: ` + validate.DetailManagedValue + `]`,
			wantReasons: []string{"Required:pod-group-total-count", "Forbidden:managed"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, reg := newMetrics(t)
			h, err := NewMutator(stubLookup{}, m, noop.NewTracerProvider().Tracer("t"), propagation.TraceContext{})
			if err != nil {
				t.Fatal(err)
			}
			req := request(t, admissionv1.Create, testPod("team", tc.labels, tc.annotations), nil)
			resp := h.Handle(context.Background(), req)
			if resp.Allowed || resp.Result == nil {
				t.Fatalf("response = %+v, want a refusal", resp.AdmissionResponse)
			}
			if len(resp.Patches) != 0 || resp.Patch != nil {
				t.Errorf("a refused pod was patched: %+v", resp.Patches)
			}
			if !strings.HasPrefix(resp.Result.Message, tc.wantMessage) {
				t.Errorf("message = %q\nwant it to start with %q", resp.Result.Message, tc.wantMessage)
			}
			if resp.Result.Reason != metav1.StatusReasonInvalid || resp.Result.Code != http.StatusUnprocessableEntity {
				t.Errorf("status = %s/%d, want Invalid/422", resp.Result.Reason, resp.Result.Code)
			}
			if resp.Result.Details == nil || len(resp.Result.Details.Causes) != len(tc.wantReasons) {
				t.Errorf("details = %+v, want %d causes", resp.Result.Details, len(tc.wantReasons))
			}
			for _, reason := range tc.wantReasons {
				if got := counter(t, reg, "sluice_webhook_pods_rejected_total", reason); got != 1 {
					t.Errorf("pods rejected{reason=%q} = %v, want 1", reason, got)
				}
			}
			if got := counter(t, reg, "sluice_webhook_pods_gated_total", ""); got != 0 {
				t.Errorf("pods gated = %v, want 0", got)
			}

			// The validating webhook words the same refusal identically.
			v, err := NewValidator(stubLookup{}, mustMetrics(t))
			if err != nil {
				t.Fatal(err)
			}
			if want := v.Handle(context.Background(), req).Result; !equality.Semantic.DeepEqual(resp.Result, want) {
				t.Errorf("mutating refusal %+v differs from the validating one %+v", resp.Result, want)
			}
		})
	}
}

// TestDeclaredWorker: a worker of a declared group is judged from what the
// lookup has seen of its group; only a refusal asks for the names of the
// pods already in its role.
func TestDeclaredWorker(t *testing.T) {
	declared := []podgroup.Set{{Name: "driver", Count: 1}, {Name: "worker", Count: 2, Template: &corev1.PodTemplateSpec{}}}
	names := func(names ...string) func() []string { return func() []string { return names } }
	const full = `Pod "p" is invalid: metadata.labels[kueue.x-k8s.io/pod-group-role]: Forbidden: ` +
		`group spark declares 2 pods of role worker and has 2 already (w0, w1)`
	tests := []struct {
		name    string
		role    string
		group   validate.Group
		err     error
		want    string // message of the refusal; empty: admitted
		wantErr bool
	}{
		{name: "room in its role", role: "worker", group: validate.Group{Sets: declared, InRole: 1}},
		{name: "role full", role: "worker", group: validate.Group{Sets: declared, InRole: 2, NamesInRole: names("w1", "w0")}, want: full},
		{name: "a pod left the full role meanwhile", role: "worker", group: validate.Group{Sets: declared, InRole: 2, NamesInRole: names("w0")}},
		{name: "role not declared", role: "executor", group: validate.Group{Sets: declared},
			want: `Pod "p" is invalid: metadata.labels[kueue.x-k8s.io/pod-group-role]: Unsupported value: "executor": supported values: "driver", "worker"`},
		{name: "declaration not seen yet", role: "executor", group: validate.Group{InRole: 5}},
		{name: "lookup fails", role: "worker", err: errors.New("boom"), wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.group.NamesInRole == nil {
				tc.group.NamesInRole = func() []string {
					t.Error("the names of the role's pods were asked for to admit a worker")
					return nil
				}
			}
			h, err := NewMutator(stubLookup{declared: tc.group, err: tc.err}, mustMetrics(t), noop.NewTracerProvider().Tracer("t"), propagation.TraceContext{})
			if err != nil {
				t.Fatal(err)
			}
			pod := testPod("team", map[string]string{podkeys.QueueNameLabel: "q", podkeys.PodGroupNameLabel: "spark", podkeys.PodGroupRoleLabel: tc.role}, nil)
			resp := h.Handle(context.Background(), request(t, admissionv1.Create, pod, nil))
			switch {
			case tc.wantErr:
				if resp.Allowed || resp.Result == nil || resp.Result.Code != http.StatusInternalServerError {
					t.Fatalf("response = %+v, want an error", resp.AdmissionResponse)
				}
			case tc.want == "":
				if !resp.Allowed {
					t.Fatalf("refused: %+v", resp.Result)
				}
			default:
				if resp.Allowed || resp.Result == nil || resp.Result.Message != tc.want {
					t.Fatalf("response = %+v, want a refusal %q", resp.AdmissionResponse, tc.want)
				}
			}
		})
	}
}

// A reinvocation (another mutating webhook changed the pod after sluice's)
// validates the final pod again and restores only the marks that are
// missing: nothing is added twice, the trace context stays as the first
// invocation stamped it, and the role hash is that of the final spec.
func TestMutatorReinvocation(t *testing.T) {
	const requestTrace = "0af7651916cd43dd8448eb211c80319c"
	tests := []struct {
		name string
		// requestTrace is the trace of the create request, sent by the API
		// server with both calls (each from a span of its own).
		requestTrace string
		// change is what another mutating webhook does after sluice's.
		change      func(p *corev1.Pod)
		wantMessage string // non-empty: the reinvocation refuses the pod
	}{
		{name: "nothing changed", change: func(*corev1.Pod) {}},
		{
			name: "another webhook adds a label, a gate and a finalizer",
			change: func(p *corev1.Pod) {
				p.Labels["team"] = "x"
				p.Spec.SchedulingGates = append(p.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: "example.com/gate"})
				p.Finalizers = append(p.Finalizers, "example.com/fin")
			},
		},
		{
			name: "another webhook drops sluice's gate and finalizer",
			change: func(p *corev1.Pod) {
				p.Spec.SchedulingGates = nil
				p.Finalizers = nil
			},
		},
		{
			name: "another webhook changes the spec",
			change: func(p *corev1.Pod) {
				p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}
			},
		},
		{name: "inside the create request's trace", requestTrace: requestTrace, change: func(p *corev1.Pod) { p.Labels["team"] = "x" }},
		{
			name:        "another webhook breaks a rule",
			change:      func(p *corev1.Pod) { p.Labels[podkeys.PodGroupNameLabel] = "g" },
			wantMessage: `Pod "p" is invalid: metadata.annotations[kueue.x-k8s.io/pod-group-total-count]: Required value: ` + validate.DetailGroupNeedsCount,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, reg := newMetrics(t)
			tp := sdktrace.NewTracerProvider()
			t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			h, err := NewMutator(stubLookup{}, m, tp.Tracer("t"), propagation.TraceContext{})
			if err != nil {
				t.Fatal(err)
			}
			call := func(span string) context.Context {
				if tc.requestTrace == "" {
					return context.Background()
				}
				return requestContext("00-" + tc.requestTrace + "-" + span + "-01")
			}
			pod := testPod("team", map[string]string{podkeys.QueueNameLabel: "q"}, nil)
			first := h.Handle(call("1111111111111111"), request(t, admissionv1.Create, pod, nil))
			if !first.Allowed || len(first.Patches) == 0 {
				t.Fatalf("first invocation = %+v, want a patch", first.AdmissionResponse)
			}
			marked := applyPatches(t, pod, first.Patches)
			tc.change(marked)

			second := h.Handle(call("2222222222222222"), request(t, admissionv1.Create, marked, nil))
			if tc.wantMessage != "" {
				if second.Allowed || second.Result == nil || second.Result.Message != tc.wantMessage {
					t.Fatalf("reinvocation = %+v, want refusal %q", second.AdmissionResponse, tc.wantMessage)
				}
				return
			}
			if !second.Allowed {
				t.Fatalf("reinvocation refused: %+v", second.Result)
			}
			final := applyPatches(t, marked, second.Patches)
			if again := h.Handle(call("3333333333333333"), request(t, admissionv1.Create, final, nil)); len(again.Patches) != 0 {
				t.Errorf("third invocation patched a fully marked pod: %+v", again.Patches)
			}

			want := marked.DeepCopy()
			hash, err := rolehash.Compute(&want.Spec)
			if err != nil {
				t.Fatal(err)
			}
			want.Annotations[podkeys.RoleHashAnnotation] = hash
			want.Labels[podkeys.ManagedLabel] = podkeys.ManagedLabelValue
			if !slices.Contains(want.Finalizers, podkeys.ManagedFinalizer) {
				want.Finalizers = append(want.Finalizers, podkeys.ManagedFinalizer)
			}
			if !slices.ContainsFunc(want.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == podkeys.AdmissionGate }) {
				want.Spec.SchedulingGates = append(want.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: podkeys.AdmissionGate})
			}
			if !equality.Semantic.DeepEqual(final, want) {
				t.Errorf("reinvocation made\n%+v\nwant\n%+v", final, want)
			}
			if got, was := final.Annotations[podkeys.TraceparentAnnotation], marked.Annotations[podkeys.TraceparentAnnotation]; got != was {
				t.Errorf("traceparent = %q after reinvocation, want the first invocation's %q", got, was)
			}
			if got := parseTraceparent(final.Annotations[podkeys.TraceparentAnnotation]).TraceID().String(); tc.requestTrace != "" && got != tc.requestTrace {
				t.Errorf("trace id = %s, want the create request's %s", got, tc.requestTrace)
			}
			if got := counter(t, reg, "sluice_webhook_pods_gated_total", ""); got != 1 {
				t.Errorf("pods gated = %v after two invocations for one pod, want 1", got)
			}
		})
	}
}

// requestContext is the context of an admission request whose HTTP request
// carried traceparent, as Mutator.Webhook makes it.
func requestContext(traceparent string) context.Context {
	return propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": traceparent})
}

// A new pod may carry no sluice.dev/ key, with one exception: a
// reinvocation finds the trace context the first invocation stamped, on a
// pod that carries every mark of that invocation. Each refusal has the
// documented message (docs/webhook.md), is counted, and patches nothing.
func TestMutatorRefusesSluiceKeys(t *testing.T) {
	const (
		stamped      = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
		sameTrace    = "00-0af7651916cd43dd8448eb211c80319c-1111111111111111-01"
		otherTrace   = "00-99999999999999999999999999999999-1111111111111111-01"
		forbidden    = ": Forbidden: only sluice may write keys under sluice.dev/; remove this key"
		traceRefusal = `Pod "p" is invalid: metadata.annotations[sluice.dev/traceparent]` + forbidden
	)
	// marked is a pod with the marks an earlier invocation leaves but the
	// trace context, less the keys in drop, plus the given keys.
	marked := func(labels, annotations map[string]string, drop ...string) *corev1.Pod {
		l := map[string]string{podkeys.QueueNameLabel: "q", podkeys.ManagedLabel: podkeys.ManagedLabelValue}
		a := map[string]string{podkeys.RoleHashAnnotation: "0123abcd"}
		maps.Copy(l, labels)
		maps.Copy(a, annotations)
		for _, key := range drop {
			delete(l, key)
			delete(a, key)
		}
		return testPod("team", l, a)
	}
	queued := map[string]string{podkeys.QueueNameLabel: "q"}
	withTrace := func(tp string) map[string]string { return map[string]string{podkeys.TraceparentAnnotation: tp} }
	tests := []struct {
		name         string
		pod          *corev1.Pod
		requestTrace string // traceparent header of the admission request
		wantMessage  string // empty: allowed
		wantRejected float64
	}{
		{
			name:         "a forged workload uid",
			pod:          testPod("team", queued, map[string]string{podkeys.WorkloadUIDAnnotation: "forged"}),
			wantMessage:  `Pod "p" is invalid: metadata.annotations[sluice.dev/workload-uid]` + forbidden,
			wantRejected: 1,
		},
		{
			name:         "a sluice.dev/ label, on a pod sluice does not queue",
			pod:          testPod("team", map[string]string{"sluice.dev/team": "a"}, nil),
			wantMessage:  `Pod "p" is invalid: metadata.labels[sluice.dev/team]` + forbidden,
			wantRejected: 1,
		},
		{
			name: "every key at once, on a pod with the marks of an earlier invocation",
			pod: marked(map[string]string{"sluice.dev/x": "y"},
				map[string]string{podkeys.TraceparentAnnotation: stamped, podkeys.WorkloadAnnotation: "w", podkeys.WorkloadUIDAnnotation: "u"}),
			wantMessage: `Pod "p" is invalid: [metadata.labels[sluice.dev/x]` + forbidden +
				`, metadata.annotations[sluice.dev/workload]` + forbidden + `, metadata.annotations[sluice.dev/workload-uid]` + forbidden + `]`,
			wantRejected: 3,
		},
		{
			name:         "a trace context the user wrote to continue their trace",
			pod:          testPod("team", queued, withTrace(stamped)),
			wantMessage:  traceRefusal,
			wantRejected: 1,
		},
		{
			name:         "a trace context with the managed label but no role hash",
			pod:          marked(nil, withTrace(stamped), podkeys.RoleHashAnnotation),
			wantMessage:  traceRefusal,
			wantRejected: 1,
		},
		{
			// Unqueued, the pod may not carry the managed label either:
			// every broken rule is reported at once.
			name: "a trace context with the other marks but no queue",
			pod:  marked(nil, withTrace(stamped), podkeys.QueueNameLabel),
			wantMessage: `Pod "p" is invalid: [metadata.annotations[sluice.dev/traceparent]` + forbidden +
				`, metadata.labels[kueue.x-k8s.io/managed]: Forbidden: ` + validate.DetailManagedUnqueued + `]`,
			wantRejected: 1,
		},
		{
			name:         "a trace context with a role hash but no managed label",
			pod:          marked(nil, withTrace(stamped), podkeys.ManagedLabel),
			wantMessage:  traceRefusal,
			wantRejected: 1,
		},
		{
			name:         "every mark but a malformed trace context",
			pod:          marked(nil, withTrace("00-0af7651916cd43dd8448eb211c80319c")),
			wantMessage:  traceRefusal,
			wantRejected: 1,
		},
		{
			name:         "every mark, but the trace context is not of the request's trace",
			pod:          marked(nil, withTrace(otherTrace)),
			requestTrace: stamped,
			wantMessage:  traceRefusal,
			wantRejected: 1,
		},
		{name: "a reinvocation inside the request's trace", pod: marked(nil, withTrace(stamped)), requestTrace: sameTrace},
		{name: "a reinvocation for a request without a trace context", pod: marked(nil, withTrace(stamped))},
		{
			name: "keys of other owners under subdomains of sluice.dev",
			pod:  testPod("team", map[string]string{podkeys.QueueNameLabel: "q", "nodepool.sluice.dev/x": "y"}, map[string]string{"kwok.sluice.dev/run-for": "1s"}),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, reg := newMetrics(t)
			h, err := NewMutator(stubLookup{}, m, noop.NewTracerProvider().Tracer("t"), propagation.TraceContext{})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if tc.requestTrace != "" {
				ctx = requestContext(tc.requestTrace)
			}
			resp := h.Handle(ctx, request(t, admissionv1.Create, tc.pod, nil))
			if got := counter(t, reg, "sluice_webhook_pods_rejected_total", "Forbidden:sluice.dev"); got != tc.wantRejected {
				t.Errorf(`pods rejected{reason="Forbidden:sluice.dev"} = %v, want %v`, got, tc.wantRejected)
			}
			if tc.wantMessage == "" {
				if !resp.Allowed {
					t.Fatalf("refused: %+v", resp.Result)
				}
				if tp, ok := tc.pod.Annotations[podkeys.TraceparentAnnotation]; ok {
					if got := applyPatches(t, tc.pod, resp.Patches).Annotations[podkeys.TraceparentAnnotation]; got != tp {
						t.Errorf("traceparent = %q after reinvocation, want the stamped %q kept", got, tp)
					}
				}
				return
			}
			if resp.Allowed || resp.Result == nil {
				t.Fatalf("response = %+v, want a refusal", resp.AdmissionResponse)
			}
			if resp.Result.Message != tc.wantMessage {
				t.Errorf("message = %q\nwant      %q", resp.Result.Message, tc.wantMessage)
			}
			if resp.Result.Reason != metav1.StatusReasonInvalid || resp.Result.Code != http.StatusUnprocessableEntity {
				t.Errorf("status = %s/%d, want Invalid/422", resp.Result.Reason, resp.Result.Code)
			}
			if len(resp.Patches) != 0 {
				t.Errorf("a refused pod was patched: %+v", resp.Patches)
			}
		})
	}
}

func applyPatches(t *testing.T, pod *corev1.Pod, ops []jsonpatch.JsonPatchOperation) *corev1.Pod {
	t.Helper()
	raw, err := json.Marshal(ops)
	if err != nil {
		t.Fatal(err)
	}
	return applyRawPatch(t, pod, raw)
}

// applyRawPatch applies a JSON patch to pod as the API server does.
func applyRawPatch(t *testing.T, pod *corev1.Pod, raw []byte) *corev1.Pod {
	t.Helper()
	doc, err := json.Marshal(pod)
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

// TestMutatorGangScheduling: with the flag on, a pod of a group with a
// total count is linked to its group's PodGroup once, reinvocations add no
// second operation, and nothing else is linked; with the flag off nothing
// is.
func TestMutatorGangScheduling(t *testing.T) {
	groupLabels := map[string]string{podkeys.QueueNameLabel: "q", podkeys.PodGroupNameLabel: "train"}
	counted := map[string]string{podkeys.PodGroupTotalCountAnnotation: "2"}
	tests := []struct {
		name        string
		on          bool
		labels      map[string]string
		annotations map[string]string
		other       string // a PodGroup the pod names at creation
		runs        bool   // the group runs already
		want        string // podGroupName after admission; empty: none
	}{
		{name: "on: group with a total count", on: true, labels: groupLabels, annotations: counted, want: "train"},
		{name: "off: group with a total count", labels: groupLabels, annotations: counted},
		{name: "on: single pod", on: true, labels: map[string]string{podkeys.QueueNameLabel: "q"}},
		{name: "on: group whose pods name another PodGroup", on: true, labels: groupLabels, annotations: counted, other: "mine", want: "mine"},
		{name: "on: a replacement in a group that runs binds alone", on: true, labels: groupLabels, annotations: counted, runs: true},
		{name: "off: a replacement in a group that runs", labels: groupLabels, annotations: counted, runs: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, err := NewMutator(stubLookup{runs: tc.runs}, mustMetrics(t), noop.NewTracerProvider().Tracer("t"), propagation.TraceContext{},
				WithGangScheduling(tc.on))
			if err != nil {
				t.Fatal(err)
			}
			pod := testPod("team", tc.labels, tc.annotations)
			if tc.other != "" {
				pod.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: &tc.other}
			}
			first := h.Handle(context.Background(), request(t, admissionv1.Create, pod, nil))
			if !first.Allowed {
				t.Fatalf("refused: %+v", first.Result)
			}
			marked := applyPatches(t, pod, first.Patches)
			got := ""
			if sg := marked.Spec.SchedulingGroup; sg != nil && sg.PodGroupName != nil {
				got = *sg.PodGroupName
			}
			if got != tc.want {
				t.Fatalf("spec.schedulingGroup.podGroupName = %q, want %q", got, tc.want)
			}
			// Reinvoked after another webhook added a label: no operation
			// touches the scheduling group again.
			marked.Labels["team"] = "x"
			second := h.Handle(context.Background(), request(t, admissionv1.Create, marked, nil))
			for _, op := range second.Patches {
				if strings.HasPrefix(op.Path, "/spec/schedulingGroup") {
					t.Errorf("reinvocation patched %s again: %+v", op.Path, op)
				}
			}
		})
	}
}

// A pod sluice does not queue may not carry the managed label, by which
// the grouper follows the pods sluice queued: the defaulting webhook
// refuses it when it finds no default queue, as does the validating one
// the API server sends such pods to everywhere else.
func TestUnqueuedPodWithManagedLabelIsRefused(t *testing.T) {
	const want = `Pod "p" is invalid: metadata.labels[kueue.x-k8s.io/managed]: Forbidden: ` + validate.DetailManagedUnqueued
	pod := testPod("team", map[string]string{podkeys.ManagedLabel: podkeys.ManagedLabelValue}, nil)
	job := testPod("team", map[string]string{podkeys.QueueNameLabel: "q", podkeys.ManagedLabel: podkeys.ManagedLabelValue}, nil)
	job.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "j", UID: "u", Controller: ptr.To(true)}}

	h, err := NewMutator(stubLookup{}, mustMetrics(t), noop.NewTracerProvider().Tracer("t"), propagation.TraceContext{},
		WithLeftToKueue(func() []schema.GroupKind { return mutate.KueueOwners }))
	if err != nil {
		t.Fatal(err)
	}
	v, err := NewValidator(stubLookup{}, mustMetrics(t))
	if err != nil {
		t.Fatal(err)
	}
	for name, handle := range map[string]func() admission.Response{
		"defaulting, no default queue": func() admission.Response {
			return h.DefaultingWebhook().Handler.Handle(context.Background(), request(t, admissionv1.Create, pod, nil))
		},
		"validating CREATE": func() admission.Response {
			return v.Handle(context.Background(), request(t, admissionv1.Create, pod, nil))
		},
		"a Job's pod left to Kueue": func() admission.Response {
			return h.Handle(context.Background(), request(t, admissionv1.Create, job, nil))
		},
	} {
		t.Run(name, func(t *testing.T) {
			resp := handle()
			if resp.Allowed || resp.Result == nil || resp.Result.Message != want {
				t.Fatalf("response = %+v, want refusal %q", resp.AdmissionResponse, want)
			}
		})
	}
}

// The owners preset is read per request: a Job's pod is queued while
// sluice is alone and left alone once Kueue queues Jobs.
func TestMutatorOwnersPresetChanges(t *testing.T) {
	var left []schema.GroupKind
	h, err := NewMutator(stubLookup{}, mustMetrics(t), noop.NewTracerProvider().Tracer("t"), propagation.TraceContext{},
		WithLeftToKueue(func() []schema.GroupKind { return left }))
	if err != nil {
		t.Fatal(err)
	}
	pod := testPod("team", map[string]string{podkeys.QueueNameLabel: "q"}, nil)
	pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "j", UID: "u", Controller: ptr.To(true)}}
	for _, step := range []struct {
		name        string
		left        []schema.GroupKind
		wantPatched bool
	}{
		{"alone", nil, true},
		{"beside Kueue", mutate.KueueOwners, false},
		{"Kueue removed", nil, true},
	} {
		left = step.left
		resp := h.Handle(context.Background(), request(t, admissionv1.Create, pod, nil))
		if !resp.Allowed || (len(resp.Patches) > 0) != step.wantPatched {
			t.Errorf("%s: allowed %v, patches %v; want patched %v", step.name, resp.Allowed, resp.Patches, step.wantPatched)
		}
	}
}

// The priority class and the maximum execution time are judged only on the
// pods sluice queues, at creation by the mutating webhook, and a class is
// looked up only for them: sluice never stands in the way of a pod it
// leaves alone.
func TestMutatorJudgesQueuedKeys(t *testing.T) {
	const missing = `Pod "p" is invalid: metadata.labels[kueue.x-k8s.io/priority-class]: Invalid value: "urgent": ` +
		`WorkloadPriorityClass "urgent" does not exist: create it, or name one that does (kubectl get workloadpriorityclasses)`
	labels := func(kv ...string) map[string]string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	queue, class, exec := podkeys.QueueNameLabel, podkeys.PriorityClassLabel, podkeys.MaxExecTimeLabel
	job := func(p *corev1.Pod) *corev1.Pod {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "j", UID: "u", Controller: ptr.To(true)}}
		return p
	}
	tests := []struct {
		name        string
		pod         *corev1.Pod
		classes     map[string]bool
		classErr    error
		defaulting  bool
		wantLookups int
		wantPatched bool
		wantMessage string // non-empty: refused with this message
		wantReasons []string
		wantCode    int32 // non-zero: failed with this code
	}{
		{
			name: "a class that exists", pod: testPod("team", labels(queue, "q", class, "urgent", exec, "3600"), nil),
			classes: map[string]bool{"urgent": true}, wantLookups: 1, wantPatched: true,
		},
		{
			name: "a class that does not exist", pod: testPod("team", labels(queue, "q", class, "urgent"), nil),
			wantLookups: 1, wantMessage: missing, wantReasons: []string{"Invalid:priority-class"},
		},
		{
			name: "a defaulted pod naming a class that does not exist", pod: testPod("with-default", labels(class, "urgent"), nil),
			defaulting: true, wantLookups: 1, wantMessage: missing, wantReasons: []string{"Invalid:priority-class"},
		},
		{
			name: "a maximum execution time that is not a number of seconds", pod: testPod("team", labels(queue, "q", exec, "1h"), nil),
			wantMessage: `Pod "p" is invalid: metadata.labels[kueue.x-k8s.io/max-exec-time-seconds]: Invalid value: "1h": ` + validate.DetailMaxExecTimeNotPositive,
			wantReasons: []string{"Invalid:max-exec-time-seconds"},
		},
		{
			name:        "reported with the other broken rules",
			pod:         testPod("team", labels(queue, "q", podkeys.PodGroupNameLabel, "g", class, "urgent"), nil),
			wantLookups: 1,
			wantMessage: `Pod "p" is invalid: [metadata.annotations[kueue.x-k8s.io/pod-group-total-count]: Required value: ` + validate.DetailGroupNeedsCount + `, ` +
				strings.TrimPrefix(missing, `Pod "p" is invalid: `) + `]`,
			wantReasons: []string{"Required:pod-group-total-count", "Invalid:priority-class"},
		},
		{name: "a pod naming no queue", pod: testPod("team", labels(class, "Not_A_Class", exec, "never"), nil)},
		{name: "a pod without a default queue, opted in", pod: testPod("team", labels(class, "urgent"), nil), defaulting: true},
		{name: "a Job's pod left to Kueue", pod: job(testPod("team", labels(queue, "q", class, "urgent", exec, "0"), nil))},
		{
			name: "the lookup fails closed", pod: testPod("team", labels(queue, "q", class, "urgent"), nil),
			classErr: errors.New("boom"), wantLookups: 1, wantCode: http.StatusInternalServerError,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var lookups int
			l := stubLookup{defaultQueues: map[string]bool{"with-default": true}, classes: tc.classes, classLookups: &lookups, classErr: tc.classErr}
			m, reg := newMetrics(t)
			h, err := NewMutator(l, m, noop.NewTracerProvider().Tracer("t"), propagation.TraceContext{},
				WithLeftToKueue(func() []schema.GroupKind { return mutate.KueueOwners }))
			if err != nil {
				t.Fatal(err)
			}
			var handler admission.Handler = h
			if tc.defaulting {
				handler = h.DefaultingWebhook().Handler
			}
			resp := handler.Handle(context.Background(), request(t, admissionv1.Create, tc.pod, nil))
			if lookups != tc.wantLookups {
				t.Errorf("WorkloadPriorityClass lookups = %d, want %d", lookups, tc.wantLookups)
			}
			switch {
			case tc.wantCode != 0:
				if resp.Allowed || resp.Result == nil || resp.Result.Code != tc.wantCode {
					t.Fatalf("response = %+v, want a failure with code %d", resp.AdmissionResponse, tc.wantCode)
				}
			case tc.wantMessage != "":
				if resp.Allowed || resp.Result == nil || !strings.HasPrefix(resp.Result.Message, tc.wantMessage) {
					t.Fatalf("response = %+v\nwant a refusal starting with %q", resp.AdmissionResponse, tc.wantMessage)
				}
				if len(resp.Patches) != 0 {
					t.Errorf("a refused pod was patched: %+v", resp.Patches)
				}
				for _, reason := range tc.wantReasons {
					if got := counter(t, reg, "sluice_webhook_pods_rejected_total", reason); got != 1 {
						t.Errorf("pods rejected{reason=%q} = %v, want 1", reason, got)
					}
				}
				if tc.defaulting {
					return
				}
				// The validating webhook words the same refusal identically.
				v, err := NewValidator(l, mustMetrics(t))
				if err != nil {
					t.Fatal(err)
				}
				if want := v.Handle(context.Background(), request(t, admissionv1.Create, tc.pod, nil)).Result; !equality.Semantic.DeepEqual(resp.Result, want) {
					t.Errorf("mutating refusal %+v differs from the validating one %+v", resp.Result, want)
				}
			default:
				if !resp.Allowed {
					t.Fatalf("refused: %+v", resp.Result)
				}
				if got := len(resp.Patches) > 0; got != tc.wantPatched {
					t.Errorf("patched = %v, want %v", got, tc.wantPatched)
				}
			}
		})
	}
}

// An update may not add, change or remove the priority class or the
// maximum execution time of a pod sluice queued.
func TestValidatorRefusesChangesFixedAtCreation(t *testing.T) {
	managed := func(kv ...string) *corev1.Pod {
		labels := map[string]string{podkeys.QueueNameLabel: "q", podkeys.ManagedLabel: podkeys.ManagedLabelValue}
		for i := 0; i+1 < len(kv); i += 2 {
			labels[kv[i]] = kv[i+1]
		}
		return testPod("team", labels, nil)
	}
	tests := []struct {
		name     string
		old, pod *corev1.Pod
		want     string
		reason   string
	}{
		{
			name: "class changed", old: managed(podkeys.PriorityClassLabel, "low"), pod: managed(podkeys.PriorityClassLabel, "urgent"),
			want:   `Pod "p" is invalid: metadata.labels[kueue.x-k8s.io/priority-class]: Invalid value: "urgent": ` + validate.DetailPriorityClassImmutable,
			reason: "Invalid:priority-class",
		},
		{
			name: "class removed", old: managed(podkeys.PriorityClassLabel, "low"), pod: managed(),
			want:   `Pod "p" is invalid: metadata.labels[kueue.x-k8s.io/priority-class]: Forbidden: ` + validate.DetailPriorityClassImmutable,
			reason: "Forbidden:priority-class",
		},
		{
			name: "time added", old: managed(), pod: managed(podkeys.MaxExecTimeLabel, "60"),
			want:   `Pod "p" is invalid: metadata.labels[kueue.x-k8s.io/max-exec-time-seconds]: Invalid value: "60": ` + validate.DetailMaxExecTimeImmutable,
			reason: "Invalid:max-exec-time-seconds",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, reg := newMetrics(t)
			var lookups int
			h, err := NewValidator(stubLookup{classLookups: &lookups}, m)
			if err != nil {
				t.Fatal(err)
			}
			resp := h.Handle(context.Background(), request(t, admissionv1.Update, tc.pod, tc.old))
			if resp.Allowed || resp.Result == nil || resp.Result.Message != tc.want {
				t.Fatalf("response = %+v\nwant a refusal %q", resp.AdmissionResponse, tc.want)
			}
			if got := counter(t, reg, "sluice_webhook_pods_rejected_total", tc.reason); got != 1 {
				t.Errorf("pods rejected{reason=%q} = %v, want 1", tc.reason, got)
			}
			if lookups != 0 {
				t.Errorf("an update looked up %d WorkloadPriorityClasses, want none", lookups)
			}
		})
	}
}
