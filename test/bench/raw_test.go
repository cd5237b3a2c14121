package bench

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/test/harness"
)

// rawResult is the rate of one raw pipeline: every pod created gated, then
// every pod ungated with one patch.
type rawResult struct{ createsPerSecond, patchesPerSecond, pipelinePerSecond float64 }

func (r rawResult) String() string {
	return fmt.Sprintf("%.0f gated-pod creates/s, %.0f ungate patches/s, %.0f pods/s created-and-ungated",
		r.createsPerSecond, r.patchesPerSecond, r.pipelinePerSecond)
}

// measureRaw creates n pods in ns and then ungates each with one plain
// patch: the ceiling sluice is held against. With gated the pods are
// created with the gate; without, something in the API server's admission
// (the gating webhook) must add it. atUngate, when not nil, is started as
// the ungates begin (to profile them).
func measureRaw(ctx context.Context, b *testing.B, cs kubernetes.Interface, ns string, gated bool, n int, atUngate func()) rawResult {
	names, createDur := createPods(ctx, b, cs, ns, gated, nil, n)
	if atUngate != nil {
		go atUngate()
	}
	patchDur := ungatePods(ctx, b, cs, ns, names)
	return rawResult{
		createsPerSecond:  float64(n) / createDur.Seconds(),
		patchesPerSecond:  float64(n) / patchDur.Seconds(),
		pipelinePerSecond: float64(n) / (createDur + patchDur).Seconds(),
	}
}

// createPods creates n pods carrying labels in ns, gated at creation (by
// the request when gated, else by the API server's admission), and
// returns their names and how long it took.
func createPods(ctx context.Context, b *testing.B, cs kubernetes.Interface, ns string, gated bool, labels map[string]string, n int) ([]string, time.Duration) {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("raw-%d", i)
	}
	start := time.Now()
	parallel(n, func(i int) error {
		p := benchPod(ns, names[i], "")
		p.Labels = labels
		if gated {
			p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: podkeys.AdmissionGate}}
		}
		created, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err == nil && !hasGate(created) {
			err = fmt.Errorf("pod %s was created without the gate", names[i])
		}
		return err
	}, b)
	return names, time.Since(start)
}

// ungatePods removes the gate from each of the named pods with one patch
// and returns how long it took.
func ungatePods(ctx context.Context, b *testing.B, cs kubernetes.Interface, ns string, names []string) time.Duration {
	ungate := []byte(`{"spec":{"schedulingGates":[{"$patch":"delete","name":"` + podkeys.AdmissionGate + `"}]}}`)
	start := time.Now()
	parallel(len(names), func(i int) error {
		_, err := cs.CoreV1().Pods(ns).Patch(ctx, names[i], types.StrategicMergePatchType, ungate, metav1.PatchOptions{})
		return err
	}, b)
	return time.Since(start)
}

// measureRawThroughWebhook is the raw pipeline with the pods gated at
// creation by the least a mutating webhook can do: add the gate. It is
// the ceiling of any system that gates pods with a webhook, as sluice and
// Kueue do, before it runs a line of its own logic; the gap between it and
// the raw pipeline is what the webhook round trip alone costs the API
// server.
func measureRawThroughWebhook(ctx context.Context, b *testing.B, cs kubernetes.Interface, n int) rawResult {
	ns := namespace(ctx, b, cs, "raw-webhook")
	unregister := startGatingWebhook(ctx, b, cs, ns)
	defer unregister()
	return measureRaw(ctx, b, cs, ns, false, n, nil)
}

// gatingPatch is the whole mutation of the gating webhook.
var gatingPatch = []byte(`[{"op":"add","path":"/spec/schedulingGates","value":[{"name":"` + podkeys.AdmissionGate + `"}]}]`)

// startGatingWebhook serves the gating webhook over TLS (HTTP/2, as the
// API server prefers) on loopback, registers it for pod creates in ns, and
// waits until the API server calls it. The returned function removes the
// registration and stops the server.
func startGatingWebhook(ctx context.Context, b *testing.B, cs kubernetes.Interface, ns string) func() {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(serveGate))
	srv.EnableHTTP2 = true
	srv.StartTLS()

	// httptest's certificate is its own CA, valid for 127.0.0.1.
	caBundle := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	url := srv.URL + "/gate"
	fail, none := admissionregistrationv1.Fail, admissionregistrationv1.SideEffectClassNone
	timeout := int32(10)
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-gate"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "gate.bench.sluice.dev",
			AdmissionReviewVersions: []string{"v1"},
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caBundle},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			TimeoutSeconds:          &timeout,
			NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{corev1.LabelMetadataName: ns},
			},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
			}},
		}},
	}
	hooks := cs.AdmissionregistrationV1().MutatingWebhookConfigurations()
	if _, err := hooks.Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
		srv.Close()
		b.Fatalf("registering the gating webhook: %v", err)
	}
	stop := func() {
		if err := hooks.Delete(context.WithoutCancel(ctx), cfg.Name, metav1.DeleteOptions{}); err != nil {
			b.Errorf("removing the gating webhook: %v", err)
		}
		srv.Close()
	}

	// The API server picks the registration up from an informer: poll with
	// a dry-run create until a pod comes back gated.
	probe := benchPod(ns, "probe", "")
	wait, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := harness.Poll(wait, func() error {
		p, err := cs.CoreV1().Pods(ns).Create(wait, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return err
		}
		if !hasGate(p) {
			return fmt.Errorf("the gating webhook is not called yet")
		}
		return nil
	})
	if err != nil {
		stop()
		b.Fatalf("waiting for the gating webhook: %v", err)
	}
	return stop
}

// serveGate answers an AdmissionReview with the gating patch.
func serveGate(w http.ResponseWriter, r *http.Request) {
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, fmt.Sprintf("decoding the AdmissionReview: %v", err), http.StatusBadRequest)
		return
	}
	patchType := admissionv1.PatchTypeJSONPatch
	review.Response = &admissionv1.AdmissionResponse{
		UID: review.Request.UID, Allowed: true, Patch: gatingPatch, PatchType: &patchType,
	}
	review.Request = nil
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(&review); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

func hasGate(p *corev1.Pod) bool {
	return slices.ContainsFunc(p.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == podkeys.AdmissionGate })
}
