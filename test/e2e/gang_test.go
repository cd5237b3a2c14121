package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1alpha2 "k8s.io/api/scheduling/v1alpha2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/test/e2e/e2eutil"
	"github.com/sluice-dev/sluice/test/testenv"
)

// gangNodeKey labels and taints the kwok nodes of the gang test, so only
// its pods land there and they land nowhere else.
const gangNodeKey = "sluice.dev/e2e-gang"

// TestGangBindsAllOrNothing: a KEP-976 group of three, admitted by quota,
// gets a PodGroup with a gang of three owned by its Workload. While the
// nodes it may use fit only two of its pods, none binds; once another
// node fits the third, all three bind. Evicted and readmitted, the pods
// created again bind as a gang through the same PodGroup. When the group
// has finished and its pods are gone its Workload goes, and garbage
// collection takes the PodGroup with it.
func TestGangBindsAllOrNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := createNamespace(ctx, t, "gang")
	createQueues(ctx, t, ns, "gang", "3") // room for the whole group
	createGangNode(ctx, t, ns+"-a", ns, "2")

	before, err := env.RequestCounts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pods := createGangPods(ctx, t, ns, "rank", "10m")
	wl := waitWorkloadOf(ctx, t, pods[0], "admitted", func(w *sluicev1alpha1.Workload) bool {
		return w.Status.Admission != nil
	})

	pg := &schedulingv1alpha2.PodGroup{}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "trio"}, pg) == nil, nil
	}); err != nil {
		t.Fatalf("PodGroup of the admitted group never created: %v", err)
	}
	if g := pg.Spec.SchedulingPolicy.Gang; g == nil || g.MinCount != 3 {
		t.Errorf("PodGroup gang = %+v, want minCount 3", g)
	}
	if refs := pg.OwnerReferences; len(refs) != 1 || refs[0].Kind != "Workload" || refs[0].APIVersion != sluicev1alpha1.GroupVersion.String() ||
		refs[0].Name != wl.Name || refs[0].UID != wl.UID {
		t.Errorf("PodGroup owners = %+v, want the Workload %s (uid %s)", refs, wl.Name, wl.UID)
	}

	// All ungated, the scheduler has looked at the group, and none bound.
	waitPods(ctx, t, pods, "ungated, unbound, and found unschedulable", func(ps []*corev1.Pod) (bool, error) {
		refused := false
		for _, p := range ps {
			if p.Spec.NodeName != "" {
				return false, fmt.Errorf("pod %s bound to %s while its gang does not fit", p.Name, p.Spec.NodeName)
			}
			if hasGate(p) {
				return false, nil
			}
			for _, c := range p.Status.Conditions {
				refused = refused || (c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse)
			}
		}
		return refused, nil
	})
	// And none binds for a while.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Second, true, func(ctx context.Context) (bool, error) {
		for _, p := range pods {
			var cur corev1.Pod
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(p), &cur); err == nil && cur.Spec.NodeName != "" {
				return false, fmt.Errorf("pod %s bound to %s while its gang does not fit", p.Name, cur.Spec.NodeName)
			}
		}
		return false, nil
	})
	if !wait.Interrupted(err) {
		t.Fatal(err)
	}

	// Room for the third pod: the whole gang binds.
	createGangNode(ctx, t, ns+"-b", ns, "2")
	waitPods(ctx, t, pods, "bound", allBound)
	after, err := env.RequestCounts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := podGroupCreates(after, before); n != 1 {
		t.Errorf("%d PodGroup creates were sent for the group's three pods, want 1", n)
	}

	// Evicted, its pods are deleted and created again; readmitted, the
	// new pods bind as a gang through the same PodGroup.
	setActive(ctx, t, wl, false)
	for _, p := range pods {
		waitDeleted(ctx, t, p)
	}
	pods = createGangPods(ctx, t, ns, "again", "1s")
	waitWorkloadOf(ctx, t, pods[0], "no longer waiting for its pods", func(w *sluicev1alpha1.Workload) bool {
		return meta.IsStatusConditionFalse(w.Status.Conditions, sluicev1alpha1.WorkloadWaitingForReplacementPods)
	})
	setActive(ctx, t, wl, true)
	waitPods(ctx, t, pods, "bound after readmission", allBound)
	var again schedulingv1alpha2.PodGroup
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(pg), &again); err != nil || again.UID != pg.UID {
		t.Errorf("PodGroup after the eviction: uid %s, %v; want the same PodGroup (uid %s)", again.UID, err, pg.UID)
	}

	// The group finishes, its pods go, then its Workload, and garbage
	// collection takes the PodGroup with it.
	waitGroupEnded(ctx, t, "gang", pods, sluicev1alpha1.ReasonSucceeded)
	for _, p := range pods {
		if err := k8s.Delete(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range pods {
		waitDeleted(ctx, t, p)
	}
	waitWorkloadGone(ctx, t, ns, "trio")
	if err := e2eutil.WaitGone(ctx, k8s, pg, time.Minute); err != nil {
		t.Fatalf("PodGroup after its Workload went: %v", err)
	}
}

// createGangPods creates the three pods of group trio, for the gang
// test's nodes only, running for runFor once bound.
func createGangPods(ctx context.Context, t *testing.T, ns, prefix, runFor string) []*corev1.Pod {
	t.Helper()
	var pods []*corev1.Pod
	for i := range 3 {
		p := groupPod(ns, "trio", fmt.Sprintf("%s-%d", prefix, i), "1", 3, map[string]string{"kwok.sluice.dev/run-for": runFor})
		p.Spec.NodeSelector = map[string]string{gangNodeKey: ns}
		p.Spec.Tolerations = []corev1.Toleration{{Key: gangNodeKey, Operator: corev1.TolerationOpEqual, Value: ns, Effect: corev1.TaintEffectNoSchedule}}
		mustCreate(ctx, t, p)
		if sg := p.Spec.SchedulingGroup; sg == nil || sg.PodGroupName == nil || *sg.PodGroupName != "trio" {
			t.Fatalf("pod %s stored with spec.schedulingGroup %+v, want podGroupName trio", p.Name, sg)
		}
		pods = append(pods, p)
	}
	return pods
}

func allBound(pods []*corev1.Pod) (bool, error) {
	for _, p := range pods {
		if p.Spec.NodeName == "" {
			return false, nil
		}
	}
	return true, nil
}

// createGangNode creates a kwok node for the gang test's pods only,
// with cpu cores, deleted when the test ends.
func createGangNode(ctx context.Context, t *testing.T, name, value, cpu string) {
	t.Helper()
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse(cpu),
		corev1.ResourceMemory: resource.MustParse("8Gi"),
		corev1.ResourcePods:   resource.MustParse("10"),
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			// type=kwok is what kwok manages.
			Labels:      map[string]string{"type": "kwok", "kubernetes.io/hostname": name, gangNodeKey: value},
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
		},
		Spec:   corev1.NodeSpec{Taints: []corev1.Taint{{Key: gangNodeKey, Value: value, Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity},
	}
	mustCreate(ctx, t, node)
	t.Cleanup(func() {
		if err := k8s.Delete(context.Background(), node); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete node %s: %v", name, err)
		}
	})
}

// waitPods polls the pods until ok says they are as wanted; an error from
// ok fails the test at once.
func waitPods(ctx context.Context, t *testing.T, pods []*corev1.Pod, what string, ok func([]*corev1.Pod) (bool, error)) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		cur := make([]*corev1.Pod, 0, len(pods))
		for _, p := range pods {
			var got corev1.Pod
			if last = k8s.Get(ctx, client.ObjectKeyFromObject(p), &got); last != nil {
				return false, nil
			}
			cur = append(cur, &got)
		}
		return ok(cur)
	})
	if err != nil {
		t.Fatalf("pods never %s: %v (last read: %v); logs in %s", what, err, last, env.Dir)
	}
}

// podGroupCreates counts the PodGroup creates sent (whatever their
// answer) between two snapshots of the API server's request counters.
func podGroupCreates(after, before []testenv.RequestCount) int {
	n := 0
	for _, rc := range testenv.SubtractCounts(after, before) {
		if rc.Group == "scheduling.k8s.io" && rc.Resource == "podgroups" && rc.Verb == "POST" {
			n += int(rc.Count)
		}
	}
	return n
}
