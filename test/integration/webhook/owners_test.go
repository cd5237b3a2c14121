package webhook

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/test/harness"
)

// kueueWorkloadCRD is a stand-in for Kueue's Workload CRD: with
// --owners=auto the webhook looks only at whether a CRD of this name
// exists.
func kueueWorkloadCRD() *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "workloads.kueue.x-k8s.io"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "kueue.x-k8s.io",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "workloads", Singular: "workload", Kind: "Workload", ListKind: "WorkloadList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1beta1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptr.To(true),
				}},
			}},
		},
	}
}

// createJobPod creates a pod that names a queue and is controlled by a
// Job, and reports whether the webhook queued it.
func createJobPod(ctx context.Context, namespace string) (*corev1.Pod, bool, error) {
	pod := ownedBy(newPod(namespace, "", map[string]string{podkeys.QueueNameLabel: "q"}, nil), "batch/v1", "Job")
	pod.GenerateName = "job-pod-"
	if err := s.client.Create(ctx, pod); err != nil {
		return nil, false, err
	}
	return pod, pod.Labels[podkeys.ManagedLabel] == podkeys.ManagedLabelValue, nil
}

// waitJobPodQueued polls, creating a Job's pod each time, until the webhook
// queues it (queued) or leaves it alone (!queued); pods of other answers
// are removed.
func waitJobPodQueued(ctx context.Context, t *testing.T, namespace string, queued bool) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	err := harness.Poll(ctx, func() error {
		p, got, err := createJobPod(ctx, namespace)
		if err != nil {
			return err
		}
		if got == queued {
			pod = p
			return nil
		}
		_ = s.client.Delete(ctx, p)
		return fmt.Errorf("Job's pod %s: queued %v, want %v", p.Name, got, queued)
	})
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

// ownersPreset reads which owners preset the webhook's gauge says is in
// effect.
func ownersPreset(ctx context.Context, t *testing.T) string {
	t.Helper()
	text, err := s.webhook.Metrics(ctx)
	if err != nil {
		t.Fatalf("read webhook metrics: %v", err)
	}
	var inEffect []string
	for _, m := range metricFamily(t, text, "sluice_webhook_owners_preset").GetMetric() {
		if m.GetGauge().GetValue() != 1 {
			continue
		}
		for _, l := range m.GetLabel() {
			if l.GetName() == "preset" {
				inEffect = append(inEffect, l.GetValue())
			}
		}
	}
	if len(inEffect) != 1 {
		t.Fatalf("sluice_webhook_owners_preset is 1 for %v, want exactly one preset", inEffect)
	}
	return inEffect[0]
}

// TestOwnersAutoFollowsKueue: with the default --owners=auto, a Job's pod
// that names a queue is queued while Kueue is not installed, left to Kueue
// once its Workload CRD exists, and queued again once the CRD is deleted;
// the gauge and the log follow. A pod no Kueue kind controls is queued
// throughout.
func TestOwnersAutoFollowsKueue(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	createNamespace(ctx, t, "owners")

	assertMarked(t, waitJobPodQueued(ctx, t, "owners", true), "q")
	if got := ownersPreset(ctx, t); got != "alone" {
		t.Errorf("owners preset without Kueue = %q, want alone", got)
	}
	if log, err := os.ReadFile(s.webhook.LogPath); err != nil || !strings.Contains(string(log), `"owners preset in effect" logger=owners owners=auto inEffect=alone`) {
		t.Errorf("webhook log (%v) does not tell the preset in effect at start", err)
	}

	crd := kueueWorkloadCRD()
	if err := s.client.Create(ctx, crd); err != nil {
		t.Fatalf("create CRD %s: %v", crd.Name, err)
	}
	t.Cleanup(func() {
		if err := s.client.Delete(context.Background(), crd); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete CRD %s: %v", crd.Name, err)
		}
	})
	assertUntouched(t, waitJobPodQueued(ctx, t, "owners", false))
	if got := ownersPreset(ctx, t); got != "beside-kueue" {
		t.Errorf("owners preset with Kueue = %q, want beside-kueue", got)
	}
	if !strings.Contains(s.webhook.Tail(400), "Kueue's Workload CRD appeared") {
		t.Errorf("webhook log does not say Kueue appeared:\n%s", s.webhook.Tail(40))
	}
	single := newPod("owners", "no-owner", map[string]string{podkeys.QueueNameLabel: "q"}, nil)
	if err := s.client.Create(ctx, single); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	assertMarked(t, single, "q")

	if err := s.client.Delete(ctx, crd); err != nil {
		t.Fatalf("delete CRD %s: %v", crd.Name, err)
	}
	// Deleting a CRD takes a moment: its instances are removed first.
	if err := harness.Poll(ctx, func() error {
		err := s.client.Get(ctx, client.ObjectKeyFromObject(crd), &apiextensionsv1.CustomResourceDefinition{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return errors.Join(errors.New("CRD still there"), err)
	}); err != nil {
		t.Fatal(err)
	}
	assertMarked(t, waitJobPodQueued(ctx, t, "owners", true), "q")
	if got := ownersPreset(ctx, t); got != "alone" {
		t.Errorf("owners preset after Kueue left = %q, want alone", got)
	}
	if !strings.Contains(s.webhook.Tail(400), "Kueue's Workload CRD disappeared") {
		t.Errorf("webhook log does not say Kueue disappeared:\n%s", s.webhook.Tail(40))
	}
}

// TestOwnersFlagIsChecked: a webhook given an unknown preset does not
// start, and says which flag is wrong.
func TestOwnersFlagIsChecked(t *testing.T) {
	ctx := testContext(t)
	for _, args := range [][]string{{"--owners", "kueue"}, {"--kueue-owners", "Job"}} {
		p, err := launchWebhook("sluice-webhook-bad-owners", args...)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.WaitExited(ctx); err != nil {
			t.Fatalf("webhook with %v: %v", args, err)
		}
		if exited, err := p.Exited(); !exited || err == nil {
			t.Errorf("webhook with %v: exited %v, error %v; want a failed exit", args, exited, err)
		}
		if tail := p.Tail(10); !strings.Contains(tail, args[0]) {
			t.Errorf("webhook with %v says\n%s\nwant it to name %s", args, tail, args[0])
		}
	}
}

// TestDefaultQueueWithoutOptInIsLogged: a webhook starting in a cluster
// where a managed namespace has a LocalQueue "default" but no opt-in label
// says so once, naming the namespace, so that operators upgrading from a
// sluice that defaulted everywhere notice; an opted-in namespace is not
// named.
func TestDefaultQueueWithoutOptInIsLogged(t *testing.T) {
	ctx := testContext(t)
	const selectorKey = "sluice.dev/test-legacy"
	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: "legacy", Labels: map[string]string{selectorKey: "on"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "legacy-opted-in", Labels: map[string]string{selectorKey: "on", "sluice.dev/queue-defaulting": "enabled"}}},
	} {
		if err := s.client.Create(ctx, ns); err != nil {
			t.Fatalf("create namespace %s: %v", ns.Name, err)
		}
		createDefaultQueue(ctx, t, ns.Name)
	}
	p, err := startWebhook(ctx, "sluice-webhook-legacy", "--managed-namespaces", selectorKey+"=on", "--unregister-on-exit")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(20 * time.Second); err != nil {
			t.Errorf("stop webhook: %v", err)
		}
	})
	const says = "has not opted in to queue defaulting"
	var named []string
	for _, line := range strings.Split(p.Tail(400), "\n") {
		if strings.Contains(line, says) {
			named = append(named, line)
		}
	}
	if len(named) != 1 || !strings.Contains(named[0], "namespace=legacy ") || !strings.Contains(named[0], "sluice.dev/queue-defaulting=enabled") {
		t.Errorf("webhook log lines saying %q: %q; want one, naming namespace legacy and the label", says, named)
	}
}
