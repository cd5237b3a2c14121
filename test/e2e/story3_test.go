package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
)

// sparkSets declares a driver shaped like itself and three workers of
// half a CPU each, as a Spark driver would before creating its executors.
const sparkSets = `
- name: driver
  count: 1
- name: worker
  count: 3
  template:
    spec:
      containers:
      - name: executor
        resources:
          requests:
            cpu: 500m
`

// story3Pod is a pod of declared group "spark": the driver carries the
// declaration; a worker names its role.
func story3Pod(ns, name, role, runFor string) *corev1.Pod {
	p := newPod(ns, name, "500m", runFor)
	p.Labels[podkeys.PodGroupNameLabel] = "spark"
	if role == "" {
		p.Annotations[podkeys.PodGroupSetsAnnotation] = sparkSets
	} else {
		p.Labels[podkeys.PodGroupRoleLabel] = role
	}
	return p
}

// TestStory3DriverThenWorkers: a driver that declares its workers is
// admitted alone, for the whole group's quota, before any worker exists.
// The workers it creates later join their pod set and are ungated at once
// without a write to the Workload; a fourth worker and a worker of a role
// never declared are refused at creation, naming the role and the count.
// The group finishes, a success, when the driver has succeeded and no
// worker runs.
func TestStory3DriverThenWorkers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := createNamespace(ctx, t, "story3")
	createQueues(ctx, t, ns, "story3", "2") // driver 500m + 3 × 500m

	driver := story3Pod(ns, "driver", "", "6s")
	mustCreate(ctx, t, driver)
	wl := waitWorkloadOf(ctx, t, driver, "admitted", func(w *sluicev1alpha1.Workload) bool {
		return meta.IsStatusConditionTrue(w.Status.Conditions, sluicev1alpha1.WorkloadAdmitted)
	})
	if wl.Name != "spark" || len(wl.Spec.PodSets) != 2 || wl.Spec.PodSets[1].Name != "worker" || wl.Spec.PodSets[1].Count != 3 {
		t.Fatalf("workload %s has pod sets %+v, want driver ×1 and worker ×3", wl.Name, wl.Spec.PodSets)
	}
	running := waitPod(ctx, t, driver, "ungated", func(p *corev1.Pod) bool { return !hasGate(p) })
	if role := running.Labels[podkeys.PodGroupRoleLabel]; role != "driver" {
		t.Errorf("driver's role label = %q, want driver (set by the webhook)", role)
	}
	waitClusterQueue(ctx, t, "story3", "the whole group's quota reserved", func(cq *sluicev1alpha1.ClusterQueue) bool {
		q := cpuReserved(cq)
		return q.String() == "2"
	})

	pods := []*corev1.Pod{driver}
	for i := range 3 {
		w := story3Pod(ns, fmt.Sprintf("worker-%d", i), "worker", "2s")
		mustCreate(ctx, t, w)
		pods = append(pods, w)
	}
	for _, w := range pods[1:] {
		got := waitPod(ctx, t, w, "ungated", func(p *corev1.Pod) bool { return !hasGate(p) })
		if set := got.Labels[podkeys.PodSetLabel]; set != "worker" {
			t.Errorf("%s ungated in pod set %q, want worker", w.Name, set)
		}
	}
	if after := getWorkload(ctx, t, ns, "spark"); after.ResourceVersion != wl.ResourceVersion {
		t.Errorf("three workers joining wrote the Workload (resourceVersion %s → %s); joining must cost no Workload write",
			wl.ResourceVersion, after.ResourceVersion)
	}

	refused := []struct {
		pod  *corev1.Pod
		want string
	}{
		{story3Pod(ns, "worker-3", "worker", "2s"), "group spark declares 3 pods of role worker and has 3 already (worker-0, worker-1, worker-2)"},
		{story3Pod(ns, "executor-0", "executor", "2s"), `metadata.labels[kueue.x-k8s.io/pod-group-role]: Unsupported value: "executor"`},
	}
	for _, r := range refused {
		err := k8s.Create(ctx, r.pod)
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), r.want) {
			t.Errorf("creating %s = %v, want Invalid naming %q", r.pod.Name, err, r.want)
		}
	}

	waitGroupEnded(ctx, t, "story3", pods, sluicev1alpha1.ReasonSucceeded)
}

// TestStory3MalformedDeclarationRefused: a declaration that does not parse
// is refused at creation with the rule and the field it breaks, and
// nothing is created.
func TestStory3MalformedDeclarationRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := createNamespace(ctx, t, "story3-bad")
	createQueues(ctx, t, ns, "story3-bad", "2")
	for _, tc := range []struct{ sets, want string }{
		{`[{"name":"driver","count":1},{"name":"worker","count":0}]`,
			"metadata.annotations[kueue.x-k8s.io/pod-group-sets][1].count: Invalid value: 0: must be at least 1"},
		{"- name: driver\n  count: 1\n- name: worker\n  count: 2\n  template:\n    spec:\n      containers:\n      - name: w\n        requests:\n          cpu: 1\n",
			`unknown field "spec.containers[0].requests"`},
		{"[{name: driver, count: 1", "not valid JSON or YAML"},
	} {
		p := story3Pod(ns, "driver", "", "1s")
		p.Annotations[podkeys.PodGroupSetsAnnotation] = tc.sets
		err := k8s.Create(ctx, p)
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("creating a driver declaring %q = %v, want Invalid naming %q", tc.sets, err, tc.want)
		}
	}
	var list corev1.PodList
	if err := k8s.List(ctx, &list, client.InNamespace(ns)); err != nil || len(list.Items) != 0 {
		t.Errorf("pods in %s after refusals: %d (%v), want none", ns, len(list.Items), err)
	}
}
