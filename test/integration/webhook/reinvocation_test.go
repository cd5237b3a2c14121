package webhook

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/test/harness"
)

// actionLabel tells the second webhook what to do to a pod after sluice's
// webhook has marked it.
const actionLabel = "test.sluice.dev/then"

// laterWebhook is a mutating webhook that the API server calls after
// sluice's (its configuration's name sorts after sluice's). It records the
// trace context each pod carried when it arrived, i.e. the one sluice's
// first invocation stamped.
type laterWebhook struct {
	mu   sync.Mutex
	seen map[string]string // pod name -> traceparent on arrival
}

func (w *laterWebhook) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	review := &admissionv1.AdmissionReview{}
	if err := json.NewDecoder(r.Body).Decode(review); err != nil || review.Request == nil {
		http.Error(rw, fmt.Sprintf("decode admission review: %v", err), http.StatusBadRequest)
		return
	}
	pod := &corev1.Pod{}
	if err := json.Unmarshal(review.Request.Object.Raw, pod); err != nil {
		http.Error(rw, fmt.Sprintf("decode pod: %v", err), http.StatusBadRequest)
		return
	}
	w.mu.Lock()
	w.seen[pod.Name] = pod.Annotations[podkeys.TraceparentAnnotation]
	w.mu.Unlock()

	var patch []map[string]any
	switch pod.Labels[actionLabel] {
	case "add-label":
		patch = []map[string]any{{"op": "add", "path": "/metadata/labels/relabelled", "value": "yes"}}
	case "drop-gates":
		// Removes every scheduling gate and finalizer, sluice's included.
		patch = []map[string]any{
			{"op": "remove", "path": "/spec/schedulingGates"},
			{"op": "remove", "path": "/metadata/finalizers"},
		}
	case "break":
		// A group name without a total count breaks one of sluice's rules.
		patch = []map[string]any{{"op": "add", "path": "/metadata/labels/" + strings.ReplaceAll(podkeys.PodGroupNameLabel, "/", "~1"), "value": "g"}}
	}
	resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
	if patch != nil {
		raw, err := json.Marshal(patch)
		if err != nil {
			http.Error(rw, err.Error(), http.StatusInternalServerError)
			return
		}
		resp.Patch = raw
		resp.PatchType = ptr.To(admissionv1.PatchTypeJSONPatch)
	}
	review.Response, review.Request = resp, nil
	rw.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(rw).Encode(review)
}

func (w *laterWebhook) traceparentSeen(pod string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seen[pod]
}

// registerLaterWebhook serves a laterWebhook over HTTPS on loopback and
// registers it for pod CREATE in namespace.
func registerLaterWebhook(ctx context.Context, t *testing.T, namespace string) *laterWebhook {
	t.Helper()
	w := &laterWebhook{seen: map[string]string{}}
	srv := httptest.NewTLSServer(w)
	t.Cleanup(srv.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "zz-later-pod-webhook"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:         "later.pods.test.sluice.dev",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To(srv.URL + "/mutate"), CABundle: ca},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
			}},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: namespace}},
			FailurePolicy:     ptr.To(admissionregistrationv1.Fail),
			SideEffects:       ptr.To(admissionregistrationv1.SideEffectClassNone),
			// Never: only sluice's webhook is reinvoked.
			ReinvocationPolicy:      ptr.To(admissionregistrationv1.NeverReinvocationPolicy),
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	if err := s.client.Create(ctx, cfg); err != nil {
		t.Fatalf("register the later webhook: %v", err)
	}
	t.Cleanup(func() {
		if err := s.client.Delete(context.Background(), cfg); err != nil {
			t.Errorf("remove the later webhook: %v", err)
		}
	})
	// The API server picks up new configurations through a watch: probe
	// until a pod passes through the later webhook.
	err := harness.Poll(ctx, func() error {
		probe := newPod(namespace, "", map[string]string{actionLabel: "add-label"}, nil)
		probe.GenerateName = "probe-"
		if err := s.client.Create(ctx, probe); err != nil {
			return err
		}
		_ = s.client.Delete(ctx, probe)
		if probe.Labels["relabelled"] != "yes" {
			return fmt.Errorf("pod %s did not pass through the later webhook yet", probe.Name)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestReinvocationSeesFinalPod shows that sluice's mutating webhook, which
// also validates CREATE, runs again when a later mutating webhook changes
// the pod: it judges the final pod and keeps its marks single and stable.
func TestReinvocationSeesFinalPod(t *testing.T) {
	ctx := testContext(t)
	const ns = "team-f"
	createNamespace(ctx, t, ns)
	later := registerLaterWebhook(ctx, t, ns)

	for _, action := range []string{"add-label", "drop-gates"} {
		t.Run(action, func(t *testing.T) {
			before := sluiceWebhookCalls(ctx, t)
			pod := newPod(ns, action, map[string]string{podkeys.QueueNameLabel: "research", actionLabel: action}, nil)
			if err := s.client.Create(ctx, pod); err != nil {
				t.Fatalf("create pod: %v", err)
			}
			assertMarked(t, pod, "research")
			if action == "add-label" && pod.Labels["relabelled"] != "yes" {
				t.Errorf("the later webhook's label was lost: %v", pod.Labels)
			}
			if n := len(pod.Finalizers); n != 1 {
				t.Errorf("finalizers = %v, want sluice's once", pod.Finalizers)
			}
			// Tracing is off in this suite, so continuing a trace would
			// keep the traceparent too; the handler's unit test covers a
			// recording tracer.
			first := later.traceparentSeen(pod.Name)
			if got := pod.Annotations[podkeys.TraceparentAnnotation]; first == "" || got != first {
				t.Errorf("traceparent = %q, want %q as sluice's first invocation stamped it", got, first)
			}
			want := map[webhookCall]float64{{name: mutatingWebhook, operation: "CREATE"}: 2}
			if got := subtractCalls(sluiceWebhookCalls(ctx, t), before); !maps.Equal(got, want) {
				t.Errorf("API server calls of sluice's webhooks = %v, want %v (first call and reinvocation)", got, want)
			}
		})
	}

	// Both calls carry the create request's trace context: the
	// reinvocation recognises the trace context the first call stamped
	// as sluice's own, of the same trace.
	t.Run("inside the create request's trace", func(t *testing.T) {
		const trace = "5af7651916cd43dd8448eb211c80319c"
		pod := newPod(ns, "traced-later", map[string]string{podkeys.QueueNameLabel: "research", actionLabel: "add-label"}, nil)
		if err := tracingClient(t, "00-"+trace+"-b7ad6b7169203331-01").Create(ctx, pod); err != nil {
			t.Fatalf("create pod: %v", err)
		}
		assertMarked(t, pod, "research")
		first := later.traceparentSeen(pod.Name)
		if got := pod.Annotations[podkeys.TraceparentAnnotation]; got != first || traceID(got) != trace {
			t.Errorf("traceparent = %q, want %q as sluice's first invocation stamped it, of trace %s", got, first, trace)
		}
	})

	t.Run("break", func(t *testing.T) {
		err := s.client.Create(ctx, newPod(ns, "broken-later", map[string]string{podkeys.QueueNameLabel: "research", actionLabel: "break"}, nil))
		const want = `admission webhook "mutate.pods.sluice.dev" denied the request: Pod "broken-later" is invalid: metadata.annotations[kueue.x-k8s.io/pod-group-total-count]: Required value: a pod that names a group must also declare how many pods the group has, ` +
			`unless it declares the group's pod sets in kueue.x-k8s.io/pod-group-sets or names its role in kueue.x-k8s.io/pod-group-role`
		if err == nil || err.Error() != want {
			t.Fatalf("create a pod a later webhook makes invalid: error %v\nwant %s", err, want)
		}
		if !apierrors.IsInvalid(err) {
			t.Errorf("error reason = %v, want Invalid", apierrors.ReasonForError(err))
		}
		if err := s.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "broken-later"}, &corev1.Pod{}); !apierrors.IsNotFound(err) {
			t.Errorf("get refused pod: %v, want NotFound", err)
		}
	})
}
