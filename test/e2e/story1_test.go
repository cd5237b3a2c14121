package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/test/e2e/e2eutil"
	"github.com/sluice-dev/sluice/test/testenv"
)

// TestStory1SinglePod walks KEP-976 Story 1: a pod with a queue-name label is
// gated, queued, reserved quota, checked by the nodepool provider whose
// updates land on the pod, ungated, scheduled onto the pool's tainted node,
// run to completion, and its quota released.
func TestStory1SinglePod(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	poolNode := testenv.NodeName(0)
	labelAndTaintNode(ctx, t, poolNode, "pool", "story1")
	ns := createNamespace(ctx, t, "story1")
	check := &sluicev1alpha1.AdmissionCheck{
		ObjectMeta: metav1.ObjectMeta{Name: "story1-pool"},
		Spec: sluicev1alpha1.AdmissionCheckSpec{
			Endpoint: sluice.ChecksTarget(),
			TLS:      sluice.ChecksTLS(),
			Parameters: jsonParams(t, map[string]any{
				"nodeLabels": map[string]string{"pool": "story1"},
				"taint":      map[string]string{"key": "pool", "value": "story1", "effect": "NoSchedule"},
			}),
		},
	}
	createQueues(ctx, t, ns, "story1", "4", check.Name)
	mustCreate(ctx, t, check)

	pod := newPod(ns, "story1", "1", "1s")
	mustCreate(ctx, t, pod)

	// The webhook gated and labelled the pod on its way in.
	if !hasGate(pod) || pod.Labels[podkeys.ManagedLabel] != "true" ||
		!slices.Contains(pod.Finalizers, podkeys.ManagedFinalizer) || pod.Annotations[podkeys.RoleHashAnnotation] == "" {
		t.Fatalf("pod not mutated by the webhook: gates %v labels %v finalizers %v annotations %v",
			pod.Spec.SchedulingGates, pod.Labels, pod.Finalizers, pod.Annotations)
	}

	final := waitPod(ctx, t, pod, "Succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
	if hasGate(final) {
		t.Errorf("succeeded pod still carries the admission gate")
	}
	if got := final.Spec.NodeSelector["pool"]; got != "story1" {
		t.Errorf("nodeSelector[pool] = %q, want story1 (from the nodepool check)", got)
	}
	if !slices.ContainsFunc(final.Spec.Tolerations, func(tl corev1.Toleration) bool {
		return tl.Key == "pool" && tl.Value == "story1" && tl.Effect == corev1.TaintEffectNoSchedule
	}) {
		t.Errorf("tolerations %v lack pool=story1:NoSchedule from the nodepool check", final.Spec.Tolerations)
	}
	if final.Spec.NodeName != poolNode {
		t.Errorf("pod ran on node %q, want the tainted pool node %q", final.Spec.NodeName, poolNode)
	}
	if final.Labels[podkeys.PodSetLabel] != "main" {
		t.Errorf("pod label %s = %q, want main", podkeys.PodSetLabel, final.Labels[podkeys.PodSetLabel])
	}

	wl := waitWorkloadOf(ctx, t, final, "Finished", func(w *sluicev1alpha1.Workload) bool {
		return meta.IsStatusConditionTrue(w.Status.Conditions, sluicev1alpha1.WorkloadFinished)
	})
	if c := meta.FindStatusCondition(wl.Status.Conditions, sluicev1alpha1.WorkloadFinished); c.Reason != sluicev1alpha1.ReasonSucceeded {
		t.Errorf("Finished reason = %q, want %q", c.Reason, sluicev1alpha1.ReasonSucceeded)
	}
	if !meta.IsStatusConditionTrue(wl.Status.Conditions, sluicev1alpha1.WorkloadAdmitted) {
		t.Errorf("workload was never Admitted: %v", wl.Status.Conditions)
	}
	if len(wl.Status.AdmissionChecks) != 1 || wl.Status.AdmissionChecks[0].State != sluicev1alpha1.CheckStateReady {
		t.Errorf("admission checks = %+v, want one Ready", wl.Status.AdmissionChecks)
	}

	// Quota is released and the finalizer is gone.
	waitClusterQueue(ctx, t, "story1", "no reserving workloads", func(cq *sluicev1alpha1.ClusterQueue) bool {
		return cq.Status.ReservingWorkloads == 0 && cpuReservedIsZero(cq)
	})
	waitPod(ctx, t, pod, "finalizer removed", func(p *corev1.Pod) bool {
		return !slices.Contains(p.Finalizers, podkeys.ManagedFinalizer)
	})
}

// --- helpers shared by the e2e tests ---

func newPod(ns, name, cpu, runFor string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: ns,
			Labels:      map[string]string{podkeys.QueueNameLabel: "user-queue"},
			Annotations: map[string]string{"kwok.sluice.dev/run-for": runFor},
		},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "main", Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse(cpu),
				}},
			}},
		},
	}
}

func createNamespace(ctx context.Context, t *testing.T, prefix string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	mustCreate(ctx, t, ns)
	return ns.Name
}

// createQueues makes a flavor, a ClusterQueue named name with cpu quota
// that requires the given checks, and a LocalQueue user-queue in ns.
func createQueues(ctx context.Context, t *testing.T, ns, name, cpu string, checks ...string) {
	t.Helper()
	flavor := &sluicev1alpha1.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: name + "-flavor"}}
	cq := &sluicev1alpha1.ClusterQueue{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: sluicev1alpha1.ClusterQueueSpec{
			ResourceGroups: []sluicev1alpha1.ResourceGroup{{
				CoveredResources: []corev1.ResourceName{corev1.ResourceCPU},
				Flavors: []sluicev1alpha1.FlavorQuotas{{
					Name:      flavor.Name,
					Resources: []sluicev1alpha1.ResourceQuota{{Name: corev1.ResourceCPU, NominalQuota: resource.MustParse(cpu)}},
				}},
			}},
		},
	}
	if len(checks) > 0 {
		cq.Spec.AdmissionChecksStrategy = &sluicev1alpha1.AdmissionChecksStrategy{}
		for _, c := range checks {
			cq.Spec.AdmissionChecksStrategy.AdmissionChecks = append(cq.Spec.AdmissionChecksStrategy.AdmissionChecks,
				sluicev1alpha1.AdmissionCheckStrategyRule{Name: c})
		}
	}
	lq := &sluicev1alpha1.LocalQueue{
		ObjectMeta: metav1.ObjectMeta{Name: "user-queue", Namespace: ns},
		Spec:       sluicev1alpha1.LocalQueueSpec{ClusterQueue: name},
	}
	mustCreate(ctx, t, flavor)
	mustCreate(ctx, t, cq)
	mustCreate(ctx, t, lq)
}

func labelAndTaintNode(ctx context.Context, t *testing.T, name, key, value string) {
	t.Helper()
	var node corev1.Node
	if err := k8s.Get(ctx, client.ObjectKey{Name: name}, &node); err != nil {
		t.Fatalf("getting node %s: %v", name, err)
	}
	patch := client.MergeFrom(node.DeepCopy())
	if node.Labels == nil {
		node.Labels = map[string]string{}
	}
	node.Labels[key] = value
	node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: key, Value: value, Effect: corev1.TaintEffectNoSchedule})
	if err := k8s.Patch(ctx, &node, patch); err != nil {
		t.Fatalf("labelling node %s: %v", name, err)
	}
}

func jsonParams(t *testing.T, v any) *apiextensionsv1.JSON {
	t.Helper()
	raw, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		t.Fatal(err)
	}
	return &apiextensionsv1.JSON{Raw: js}
}

func mustCreate(ctx context.Context, t *testing.T, obj client.Object) {
	t.Helper()
	if err := k8s.Create(ctx, obj); err != nil {
		t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
}

func hasGate(p *corev1.Pod) bool {
	return slices.ContainsFunc(p.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == podkeys.AdmissionGate })
}

func waitPod(ctx context.Context, t *testing.T, pod *corev1.Pod, what string, ok func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var cur corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(pod), &cur); err != nil {
			return false, nil
		}
		return ok(&cur), nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s never %s: phase %s gates %v node %q; logs in %s", pod.Namespace, pod.Name, what,
			cur.Status.Phase, cur.Spec.SchedulingGates, cur.Spec.NodeName, env.Dir)
	}
	return &cur
}

func waitWorkloadOf(ctx context.Context, t *testing.T, pod *corev1.Pod, what string, ok func(*sluicev1alpha1.Workload) bool) *sluicev1alpha1.Workload {
	t.Helper()
	var found *sluicev1alpha1.Workload
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var list sluicev1alpha1.WorkloadList
		if err := k8s.List(ctx, &list, client.InNamespace(pod.Namespace)); err != nil {
			return false, nil
		}
		for i := range list.Items {
			if e2eutil.IsWorkloadOf(&list.Items[i], pod) {
				found = &list.Items[i]
				return ok(found), nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("workload of pod %s never %s: %s", pod.Name, what, describe(found))
	}
	return found
}

func waitClusterQueue(ctx context.Context, t *testing.T, name, what string, ok func(*sluicev1alpha1.ClusterQueue) bool) {
	t.Helper()
	var cq sluicev1alpha1.ClusterQueue
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := k8s.Get(ctx, client.ObjectKey{Name: name}, &cq); err != nil {
			return false, nil
		}
		return ok(&cq), nil
	})
	if err != nil {
		t.Fatalf("ClusterQueue %s never had %s: status %+v", name, what, cq.Status)
	}
}

func cpuReserved(cq *sluicev1alpha1.ClusterQueue) resource.Quantity {
	var total resource.Quantity
	for _, f := range cq.Status.FlavorsReservation {
		for _, r := range f.Resources {
			if r.Name == corev1.ResourceCPU {
				total.Add(r.Total)
			}
		}
	}
	return total
}

func describe(wl *sluicev1alpha1.Workload) string {
	if wl == nil {
		return "no workload"
	}
	return fmt.Sprintf("%s conditions %v checks %+v", wl.Name, wl.Status.Conditions, wl.Status.AdmissionChecks)
}

func cpuReservedIsZero(cq *sluicev1alpha1.ClusterQueue) bool {
	q := cpuReserved(cq)
	return q.IsZero()
}
