package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/test/harness"
)

// TestWebhookDownStopsOnlySluicePods: with the webhook SIGKILLed (it
// cannot unregister), the API server still creates the pods sluice is not
// asked to queue, since it never calls the webhook for them, and refuses
// every pod sluice must queue rather than let it run ungated: a pod that
// names a queue, any pod of a namespace that opted in to queue defaulting,
// and a pod that forges sluice's managed label. Pods are created by
// namespace users bound to edit, never by an admin. Once the webhook is
// back, a queued pod is gated again.
func TestWebhookDownStopsOnlySluicePods(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	plainNS := createNamespace(ctx, t, "webhook-down")
	optedIn := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		GenerateName: "webhook-down-defaulting-",
		Labels:       map[string]string{"sluice.dev/queue-defaulting": "enabled"},
	}}
	mustCreate(ctx, t, optedIn)
	createQueues(ctx, t, plainNS, "webhook-down", "2")
	mustCreate(ctx, t, &sluicev1alpha1.LocalQueue{
		ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: optedIn.Name},
		Spec:       sluicev1alpha1.LocalQueueSpec{ClusterQueue: "webhook-down"},
	})
	alice := newUser(ctx, t, plainNS, "alice", []string{"edit"}, editPods...)
	bob := newUser(ctx, t, optedIn.Name, "bob", []string{"edit"}, editPods...)

	restart := func() {
		if exited, _ := sluice.Webhook.Exited(); !exited {
			return
		}
		if err := sluice.Webhook.Start(); err != nil {
			t.Errorf("restart webhook: %v", err)
			return
		}
		rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer rcancel()
		if err := sluice.Webhook.WaitReady(rctx); err != nil {
			t.Errorf("restarted webhook: %v", err)
		}
	}
	// The following tests need the webhook, whatever happens here.
	t.Cleanup(restart)
	if err := sluice.Webhook.Kill(); err != nil {
		t.Fatal(err)
	}

	// Not sluice's: created at once, and left as it was.
	plain := newPod(plainNS, "plain", "100m", "1s")
	delete(plain.Labels, podkeys.QueueNameLabel)
	createAs(ctx, t, alice, plain)
	if hasGate(plain) || plain.Labels[podkeys.ManagedLabel] != "" {
		t.Errorf("pod without a queue was marked: gates %v labels %v", plain.Spec.SchedulingGates, plain.Labels)
	}
	// Nor is a pod that carries sluice.dev/ keys and sluice's gate but no
	// queue and no managed label: the grouper never sees it, and it stays
	// behind the gate it chose.
	forgedKeys := newPod(plainNS, "sluice-keys", "100m", "1s")
	delete(forgedKeys.Labels, podkeys.QueueNameLabel)
	forgedKeys.Annotations[podkeys.WorkloadAnnotation] = "someone-else"
	forgedKeys.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: podkeys.AdmissionGate}}
	createAs(ctx, t, alice, forgedKeys)

	// sluice's: refused, naming the webhook the API server could not call.
	refusals := []struct {
		user    *harness.User
		pod     *corev1.Pod
		webhook string
	}{
		{alice, newPod(plainNS, "queued", "100m", "1s"), "mutate.pods.sluice.dev"},
		{bob, func() *corev1.Pod {
			p := newPod(optedIn.Name, "defaulted", "100m", "1s")
			delete(p.Labels, podkeys.QueueNameLabel)
			return p
		}(), "default.pods.sluice.dev"},
		{alice, func() *corev1.Pod {
			p := newPod(plainNS, "forged-managed", "100m", "1s")
			p.Labels = map[string]string{podkeys.ManagedLabel: podkeys.ManagedLabelValue}
			return p
		}(), "unqueued.pods.sluice.dev"},
	}
	for _, r := range refusals {
		out, err := r.user.KubectlStdin(ctx, podYAML(t, r.pod), "create", "-f", "-")
		if err == nil {
			t.Errorf("pod %s/%s was created while the webhook was down; want it refused", r.pod.Namespace, r.pod.Name)
			continue
		}
		if want := []string{`failed calling webhook "` + r.webhook + `"`}; !containsAll(out, want...) {
			t.Errorf("pod %s/%s refused, but not by the webhook being down: want %q in:\n%s", r.pod.Namespace, r.pod.Name, want, out)
		}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(r.pod), &corev1.Pod{}); err == nil {
			t.Errorf("refused pod %s/%s exists", r.pod.Namespace, r.pod.Name)
		}
	}

	restart()
	again := newPod(plainNS, "queued-again", "100m", "1s")
	createAs(ctx, t, alice, again)
	if again.Labels[podkeys.ManagedLabel] != podkeys.ManagedLabelValue {
		t.Errorf("pod created after the webhook came back was not marked: labels %v", again.Labels)
	}
	waitPod(ctx, t, again, "Succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
}
