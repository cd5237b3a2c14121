package webhook

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/pkg/podkeys"
)

// TestGangSchedulingLinksGroupPods runs a webhook with --gang-scheduling
// for one namespace: a pod of a group with a total count, created through
// the API server, is stored naming its group's PodGroup; a single pod and
// a pod that names a PodGroup of its own are stored as they asked.
func TestGangSchedulingLinksGroupPods(t *testing.T) {
	ctx := testContext(t)
	const name, selectorKey = "sluice-webhook-gang", "sluice.dev/test-gang"
	p, err := startWebhook(ctx, name, "--gang-scheduling", "--managed-namespaces", selectorKey+"=on", "--unregister-on-exit")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(20 * time.Second); err != nil {
			t.Errorf("stop gang webhook: %v", err)
		}
	})
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gang", Labels: map[string]string{selectorKey: "on"}}}
	if err := s.client.Create(ctx, ns); err != nil {
		t.Fatalf("create namespace: %v", err)
	}

	group := map[string]string{podkeys.QueueNameLabel: "research", podkeys.PodGroupNameLabel: "train"}
	counted := map[string]string{podkeys.PodGroupTotalCountAnnotation: "2"}
	member := newPod("gang", "member", group, counted)
	single := newPod("gang", "single", map[string]string{podkeys.QueueNameLabel: "research"}, nil)
	own := newPod("gang", "own-pod-group", group, counted)
	mine := "mine"
	own.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: &mine}
	for _, pod := range []*corev1.Pod{member, single, own} {
		if err := s.client.Create(ctx, pod); err != nil {
			t.Fatalf("create pod %s: %v", pod.Name, err)
		}
		assertMarked(t, pod, "research")
	}
	tests := []struct {
		pod  *corev1.Pod
		want string
	}{{member, "train"}, {single, ""}, {own, "mine"}}
	for _, tc := range tests {
		got := ""
		if sg := tc.pod.Spec.SchedulingGroup; sg != nil && sg.PodGroupName != nil {
			got = *sg.PodGroupName
		}
		if got != tc.want {
			t.Errorf("pod %s: spec.schedulingGroup.podGroupName = %q, want %q", tc.pod.Name, got, tc.want)
		}
	}
}
