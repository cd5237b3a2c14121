package crash

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/test/e2e/e2eutil"
	"github.com/sluice-dev/sluice/test/harness"
)

// Names every case uses inside its own namespace.
const (
	userQueue     = "user-queue"
	sentinelQueue = "sentinel-queue"
	// waitLimit bounds one wait inside a case; the case's own deadline
	// bounds them all.
	waitLimit = 90 * time.Second
)

// newPod is a pod for LocalQueue queue requesting cpu; kwok runs it for
// runFor, or until it is deleted when runFor is empty.
func newPod(ns, name, queue, cpu, runFor string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: ns,
			Labels: map[string]string{podkeys.QueueNameLabel: queue},
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
	if runFor != "" {
		p.Annotations = map[string]string{"kwok.sluice.dev/run-for": runFor}
	}
	return p
}

// createNamespace makes a fresh namespace named after prefix. Its name
// also names the case's cluster-scoped objects.
func createNamespace(ctx context.Context, t *testing.T, prefix string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	mustCreate(ctx, t, ns)
	return ns.Name
}

// createQueues makes a flavor and a ClusterQueue named cq with cpu quota
// requiring checks, and LocalQueue lq in ns pointing at it.
func createQueues(ctx context.Context, t *testing.T, ns, lq, cq, cpu string, checks ...string) {
	t.Helper()
	flavor := &sluicev1alpha1.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: cq + "-flavor"}}
	q := &sluicev1alpha1.ClusterQueue{
		ObjectMeta: metav1.ObjectMeta{Name: cq},
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
		q.Spec.AdmissionChecksStrategy = &sluicev1alpha1.AdmissionChecksStrategy{}
		for _, c := range checks {
			q.Spec.AdmissionChecksStrategy.AdmissionChecks = append(q.Spec.AdmissionChecksStrategy.AdmissionChecks,
				sluicev1alpha1.AdmissionCheckStrategyRule{Name: c})
		}
	}
	mustCreate(ctx, t, flavor)
	mustCreate(ctx, t, q)
	mustCreate(ctx, t, &sluicev1alpha1.LocalQueue{
		ObjectMeta: metav1.ObjectMeta{Name: lq, Namespace: ns},
		Spec:       sluicev1alpha1.LocalQueueSpec{ClusterQueue: cq},
	})
}

// createCheck makes an AdmissionCheck served by the provider at target.
func createCheck(ctx context.Context, t *testing.T, name, target string) {
	t.Helper()
	mustCreate(ctx, t, &sluicev1alpha1.AdmissionCheck{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       sluicev1alpha1.AdmissionCheckSpec{Endpoint: target},
	})
}

func mustCreate(ctx context.Context, t *testing.T, obj client.Object) {
	t.Helper()
	if err := k8s.Create(ctx, obj); err != nil {
		t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
}

// setActive sets a Workload's spec.active, as a user would with kubectl
// patch.
func setActive(ctx context.Context, t *testing.T, wl *sluicev1alpha1.Workload, active bool) {
	t.Helper()
	if err := e2eutil.SetActive(ctx, k8s, wl.Namespace, wl.Name, active); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls f until it returns nil, failing the test with what and
// f's last complaint after waitLimit or at the case's deadline.
func waitFor(ctx context.Context, t *testing.T, what string, f func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, waitLimit)
	defer cancel()
	if err := harness.Poll(ctx, f); err != nil {
		t.Fatalf("waiting for %s: %v; logs in %s", what, err, env.LogDir())
	}
}

// waitPod waits until pod's current state satisfies ok, which explains
// what it misses; it returns that state.
func waitPod(ctx context.Context, t *testing.T, pod *corev1.Pod, what string, ok func(*corev1.Pod) error) *corev1.Pod {
	t.Helper()
	var cur corev1.Pod
	waitFor(ctx, t, "pod "+pod.Name+" "+what, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(pod), &cur); err != nil {
			return err
		}
		return ok(&cur)
	})
	return &cur
}

// waitGone waits until obj no longer exists.
func waitGone(ctx context.Context, t *testing.T, obj client.Object) {
	t.Helper()
	waitFor(ctx, t, fmt.Sprintf("%T %s to be gone", obj, obj.GetName()), func() error {
		err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj)
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return err
		}
		return fmt.Errorf("still there: deletionTimestamp %v finalizers %v", obj.GetDeletionTimestamp(), obj.GetFinalizers())
	})
}

// workloadOf waits until pod's Workload (the one it owns) exists and
// satisfies ok, and returns it.
func workloadOf(ctx context.Context, t *testing.T, pod *corev1.Pod, what string, ok func(*sluicev1alpha1.Workload) error) *sluicev1alpha1.Workload {
	t.Helper()
	var found *sluicev1alpha1.Workload
	waitFor(ctx, t, "the workload of pod "+pod.Name+" "+what, func() error {
		var list sluicev1alpha1.WorkloadList
		if err := k8s.List(ctx, &list, client.InNamespace(pod.Namespace)); err != nil {
			return err
		}
		for i := range list.Items {
			if e2eutil.IsWorkloadOf(&list.Items[i], pod) {
				found = &list.Items[i]
				if err := ok(found); err != nil {
					return fmt.Errorf("%w: %s", err, describe(found))
				}
				return nil
			}
		}
		return errors.New("no workload owned by the pod")
	})
	return found
}

// waitWorkload waits until the Workload wl names satisfies ok.
func waitWorkload(ctx context.Context, t *testing.T, wl *sluicev1alpha1.Workload, what string, ok func(*sluicev1alpha1.Workload) error) *sluicev1alpha1.Workload {
	t.Helper()
	var cur sluicev1alpha1.Workload
	waitFor(ctx, t, "workload "+wl.Name+" "+what, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(wl), &cur); err != nil {
			return err
		}
		if err := ok(&cur); err != nil {
			return fmt.Errorf("%w: %s", err, describe(&cur))
		}
		return nil
	})
	return &cur
}

// waitReserved waits until ClusterQueue cq reports cpu reserved.
func waitReserved(ctx context.Context, t *testing.T, cq, cpu string) {
	t.Helper()
	want := resource.MustParse(cpu)
	waitFor(ctx, t, "ClusterQueue "+cq+" to report "+cpu+" cpu reserved", func() error {
		var q sluicev1alpha1.ClusterQueue
		if err := k8s.Get(ctx, client.ObjectKey{Name: cq}, &q); err != nil {
			return err
		}
		if got := cpuReserved(&q); got.Cmp(want) != 0 {
			return fmt.Errorf("reserved %s, status %+v", got.String(), q.Status)
		}
		return nil
	})
}

// settle waits until nothing of the case is in flight: no pod or Workload
// in ns is being deleted and every ended pod has lost sluice's finalizer.
// A later case arms crash points that this case's stragglers would
// otherwise hit.
func settle(ctx context.Context, t *testing.T, ns string) {
	t.Helper()
	waitFor(ctx, t, "namespace "+ns+" to settle", func() error {
		var pods corev1.PodList
		if err := k8s.List(ctx, &pods, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, p := range pods.Items {
			ended := p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
			if p.DeletionTimestamp != nil || (ended && slices.Contains(p.Finalizers, podkeys.ManagedFinalizer)) {
				return fmt.Errorf("pod %s: phase %s, deletionTimestamp %v, finalizers %v", p.Name, p.Status.Phase, p.DeletionTimestamp, p.Finalizers)
			}
		}
		var wls sluicev1alpha1.WorkloadList
		if err := k8s.List(ctx, &wls, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, w := range wls.Items {
			if w.DeletionTimestamp != nil {
				return fmt.Errorf("workload %s is being deleted", w.Name)
			}
		}
		return nil
	})
}

// Conditions of pods and Workloads.

func gated(p *corev1.Pod) bool {
	return slices.ContainsFunc(p.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == podkeys.AdmissionGate })
}

func hasFinalizer(p *corev1.Pod) bool { return slices.Contains(p.Finalizers, podkeys.ManagedFinalizer) }

// phaseIs, for waitPod.
func phaseIs(phase corev1.PodPhase) func(*corev1.Pod) error {
	return func(p *corev1.Pod) error {
		if p.Status.Phase != phase {
			return fmt.Errorf("phase %s, gated %v, node %q", p.Status.Phase, gated(p), p.Spec.NodeName)
		}
		return nil
	}
}

// endedClean, for waitPod: the pod ended in phase and sluice let go of it.
func endedClean(phase corev1.PodPhase) func(*corev1.Pod) error {
	return func(p *corev1.Pod) error {
		if p.Status.Phase != phase || hasFinalizer(p) {
			return fmt.Errorf("phase %s (want %s), finalizers %v", p.Status.Phase, phase, p.Finalizers)
		}
		return nil
	}
}

// condIs, for the workload waits: condType has status, and reason unless
// reason is empty.
func condIs(condType string, status metav1.ConditionStatus, reason string) func(*sluicev1alpha1.Workload) error {
	return func(w *sluicev1alpha1.Workload) error {
		c := meta.FindStatusCondition(w.Status.Conditions, condType)
		if c == nil || c.Status != status || (reason != "" && c.Reason != reason) {
			return fmt.Errorf("want %s=%s reason %q", condType, status, reason)
		}
		return nil
	}
}

func isTrue(w *sluicev1alpha1.Workload, condType string) bool {
	return meta.IsStatusConditionTrue(w.Status.Conditions, condType)
}

func condReason(w *sluicev1alpha1.Workload, condType string) string {
	if c := meta.FindStatusCondition(w.Status.Conditions, condType); c != nil {
		return c.Reason
	}
	return ""
}

// waitQueueEmpty waits until ClusterQueue name holds no quota and
// counts no reserving workload.
func waitQueueEmpty(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	waitFor(ctx, t, "ClusterQueue "+name+" to hold no quota", func() error {
		var q sluicev1alpha1.ClusterQueue
		if err := k8s.Get(ctx, client.ObjectKey{Name: name}, &q); err != nil {
			return err
		}
		if got := cpuReserved(&q); !got.IsZero() || q.Status.ReservingWorkloads != 0 {
			return fmt.Errorf("reserved %s, status %+v", got.String(), q.Status)
		}
		return nil
	})
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
	var b []byte
	for _, c := range wl.Status.Conditions {
		b = fmt.Appendf(b, " %s=%s(%s)", c.Type, c.Status, c.Reason)
	}
	return fmt.Sprintf("workload %s active=%v admission=%v deleting=%v conditions:%s checks %+v",
		wl.Name, wl.Spec.Active == nil || *wl.Spec.Active, wl.Status.Admission != nil, wl.DeletionTimestamp != nil, b, wl.Status.AdmissionChecks)
}

var (
	errNotHeld     = errors.New("the workload no longer holds its quota")
	errNotReleased = errors.New("want no admission and spec.active=false")
	errGated       = errors.New("still gated")
)
