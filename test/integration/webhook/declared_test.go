package webhook

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/test/harness"
)

// TestDeclaredGroupWorkers: the webhook labels a pod that declares its
// group's pod sets (KEP-976 Story 3) with its own role, and judges each
// worker created later against the pods of the group it has seen: a role
// the declaration lacks and a role that has all its pods are refused at
// creation, naming the role and the count; a failed worker makes room.
func TestDeclaredGroupWorkers(t *testing.T) {
	ctx := testContext(t)
	const ns = "team-story3"
	createNamespace(ctx, t, ns)
	queued := func(name string, labels, annotations map[string]string) *corev1.Pod {
		l := map[string]string{podkeys.QueueNameLabel: "q", podkeys.PodGroupNameLabel: "spark"}
		for k, v := range labels {
			l[k] = v
		}
		return newPod(ns, name, l, annotations)
	}
	worker := func(name string) *corev1.Pod {
		return queued(name, map[string]string{podkeys.PodGroupRoleLabel: "worker"}, nil)
	}

	driver := queued("driver", nil, map[string]string{podkeys.PodGroupSetsAnnotation: "- name: driver\n  count: 1\n" +
		"- name: worker\n  count: 2\n  template:\n    spec:\n      containers:\n      - name: w\n"})
	if err := s.client.Create(ctx, driver); err != nil {
		t.Fatalf("create driver: %v", err)
	}
	if role := driver.Labels[podkeys.PodGroupRoleLabel]; role != "driver" {
		t.Errorf("driver's role label = %q, want driver", role)
	}

	// The webhook learns of the driver through its watch: until its cache
	// has it, a stranger is let in (the grouper deletes it later). Probes
	// let in keep sluice's finalizer (no grouper runs here) and are left
	// Terminating, where they hold no place.
	err := harness.Poll(ctx, func() error {
		p := queued("", map[string]string{podkeys.PodGroupRoleLabel: "executor"}, nil)
		p.GenerateName = "executor-"
		err := s.client.Create(ctx, p)
		if err == nil {
			_ = s.client.Delete(ctx, p)
			return fmt.Errorf("created: the webhook has not seen the driver yet")
		}
		const want = `metadata.labels[kueue.x-k8s.io/pod-group-role]: Unsupported value: "executor": supported values: "driver", "worker"`
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), want) {
			t.Fatalf("create a worker of an undeclared role: %v, want Invalid with %q", err, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	for _, name := range []string{"worker-0", "worker-1"} {
		if err := s.client.Create(ctx, worker(name)); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
	}
	const full = `metadata.labels[kueue.x-k8s.io/pod-group-role]: Forbidden: group spark declares 2 pods of role worker and has 2 already (worker-0, worker-1)`
	err = harness.Poll(ctx, func() error {
		p := worker("")
		p.GenerateName = "worker-x-"
		err := s.client.Create(ctx, p)
		switch {
		case err == nil:
			_ = s.client.Delete(ctx, p)
			return fmt.Errorf("created: the webhook has not seen both workers yet")
		case !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), full):
			t.Fatalf("create a third worker: %v, want Invalid with %q", err, full)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// A failed worker holds no place.
	failed := &corev1.Pod{}
	if err := s.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "worker-1"}, failed); err != nil {
		t.Fatal(err)
	}
	failed.Status.Phase = corev1.PodFailed
	if err := s.client.Status().Update(ctx, failed); err != nil {
		t.Fatalf("fail worker-1: %v", err)
	}
	if err := harness.Poll(ctx, func() error { return s.client.Create(ctx, worker("worker-2")) }); err != nil {
		t.Fatalf("a worker replacing a failed one was refused: %v", err)
	}
}
