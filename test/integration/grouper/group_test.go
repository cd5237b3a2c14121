package grouper

import (
	"context"
	"errors"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	sluicev1 "github.com/sluice-dev/sluice/gen/sluice/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
)

// TestGroupWithoutPods: a pod group's Workload has no owners; the grouper
// is what tells the admitter that the group has no pod left, naming the
// Workload's uid. Workloads without the pod-group label are not its to
// report.
func TestGroupWithoutPods(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	k8s := s.k8s
	newWorkload := func(name string, labels map[string]string) *v1alpha1.Workload {
		wl := &v1alpha1.Workload{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels},
			Spec: v1alpha1.WorkloadSpec{
				QueueName: "lq",
				PodSets:   []v1alpha1.PodSet{{Name: "main", Count: 2}},
			},
		}
		if err := k8s.Create(ctx, wl); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), wl) })
		return wl
	}
	single := newWorkload("pod-single-abcde", nil)
	group := newWorkload("empty-group", map[string]string{v1alpha1.PodGroupLabel: "empty-group"})

	waitFor(ctx, t, "a no-pods report", func() error {
		for _, r := range s.admitter.reportsFor(group.Name) {
			if r.GetNoPods() && r.GetWorkload().GetUid() == string(group.UID) {
				return nil
			}
		}
		return fmt.Errorf("reports %v", s.admitter.reportsFor(group.Name))
	})
	if r := s.admitter.reportsFor(single.Name); len(r) > 0 {
		t.Fatalf("a Workload without the pod-group label was reported: %v", r)
	}
}

// TestGroupQueueChange: once every pod of a gated group names another
// LocalQueue, the group's workload moves there (UpdateWorkload), as a
// single pod's does.
func TestGroupQueueChange(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	const group = "moving-group"
	pods := createSubmittedGroup(ctx, t, group, "moving-a", "moving-b")
	patch := []byte(`{"metadata":{"labels":{"` + podkeys.QueueNameLabel + `":"other-queue"}}}`)
	for _, pod := range pods {
		if _, err := s.cs.CoreV1().Pods(namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatalf("change queue of %s: %v", pod.Name, err)
		}
	}
	waitFor(ctx, t, "the group moved", func() error {
		ups := s.admitter.updatesFor(group)
		if len(ups) != 1 || ups[0].GetQueueName() != "other-queue" {
			return fmt.Errorf("updates = %v, want one to other-queue", ups)
		}
		return nil
	})
}

// createSubmittedGroup creates one gated pod per name, together group
// (of as many pods as names), and waits until the grouper submitted it.
func createSubmittedGroup(ctx context.Context, t *testing.T, group string, names ...string) []*corev1.Pod {
	t.Helper()
	var pods []*corev1.Pod
	for _, name := range names {
		pod := newPod(name)
		pod.Labels[podkeys.PodGroupNameLabel] = group
		pod.Annotations[podkeys.PodGroupTotalCountAnnotation] = fmt.Sprint(len(names))
		pods = append(pods, createPodObject(ctx, t, pod))
	}
	waitFor(ctx, t, "group "+group+" submitted", func() error {
		if len(s.admitter.submissionsFor(group)) == 0 {
			return errors.New("not submitted")
		}
		return nil
	})
	return pods
}

// declaredPod is a gated pod of declared group "spark" with role; the
// driver carries the declaration (a driver and two workers).
func declaredPod(name, role, cpu string) *corev1.Pod {
	pod := newPod(name)
	pod.Labels[podkeys.PodGroupNameLabel] = "spark"
	pod.Labels[podkeys.PodGroupRoleLabel] = role
	delete(pod.Annotations, podkeys.RoleHashAnnotation)
	if role == "driver" {
		pod.Annotations[podkeys.PodGroupSetsAnnotation] = `[{"name":"driver","count":1},` +
			`{"name":"worker","count":2,"template":{"spec":{"containers":[{"name":"w","resources":{"requests":{"cpu":"1"}}}]}}}]`
	}
	pod.Spec.InitContainers = nil
	pod.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
	return pod
}

// TestDeclaredGroup: workers of a declared group (KEP-976 Story 3) may be
// created before their driver. Once the driver is there the group is
// submitted with every declared pod set; workers beyond their role's count
// (the youngest) and a worker of a role never declared are deleted, with
// an event on the group's first pod. Admitted, the workers join their pod
// set through UpdateWorkload and are ungated in it; a worker the admitter
// refuses is deleted with a warning saying why.
func TestDeclaredGroup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	const group = "spark"
	var workers []*corev1.Pod
	for _, name := range []string{"spark-w0", "spark-w1", "spark-w2", "spark-w3"} {
		workers = append(workers, createPodObject(ctx, t, declaredPod(name, "worker", "1")))
	}
	stranger := createPodObject(ctx, t, declaredPod("spark-x", "executor", "1"))

	driver := createPodObject(ctx, t, declaredPod("spark-driver", "driver", "500m"))
	waitFor(ctx, t, "the group submitted", func() error {
		subs := s.admitter.submissionsFor(group)
		if len(subs) == 0 {
			return errors.New("not submitted")
		}
		var sets []string
		for _, ps := range subs[0].req.GetWorkload().GetPodSets() {
			sets = append(sets, fmt.Sprintf("%s×%d cpu=%s", ps.GetName(), ps.GetCount(), ps.GetRequests()["cpu"]))
		}
		if got := fmt.Sprint(sets); got != "[driver×1 cpu=500m worker×2 cpu=1]" {
			t.Errorf("submitted pod sets %s, want driver×1 cpu=500m and worker×2 cpu=1", got)
		}
		return nil
	})
	for _, gone := range []*corev1.Pod{workers[3], workers[2], stranger} {
		waitGone(ctx, t, gone.Name)
	}
	waitFor(ctx, t, "an UnknownRole event", func() error {
		return findEvent(ctx, driver.Name, "UnknownRole", `deleted pods [spark-x]: their kueue.x-k8s.io/pod-group-role [executor] is not declared`)
	})

	ref := &sluicev1.WorkloadRef{Namespace: namespace, Name: group, Uid: "wl-uid"}
	info := func(name string) *sluicev1.PodSetInfo {
		return &sluicev1.PodSetInfo{Name: name, NodeSelector: map[string]string{"disk": "ssd", "zone": "a"}}
	}
	s.admitter.push(&admitterv1.Decision{Workload: ref, Action: admitterv1.Decision_ACTION_ADMIT, ClusterQueue: "cq", ReservationId: "r1",
		PodSetInfos: []*sluicev1.PodSetInfo{info("driver"), info("worker")}, PodSetCounts: map[string]int32{"driver": 1, "worker": 2},
		PodSetRoleHashes: roleHashes(s.admitter.submissionsFor(group)[0])})
	for _, p := range []*corev1.Pod{driver, workers[0], workers[1]} {
		role := p.Labels[podkeys.PodGroupRoleLabel]
		waitPod(ctx, t, p.Name, "ungated in pod set "+role, func(p *corev1.Pod) error {
			if hasGate(p, podkeys.AdmissionGate) || p.Labels[podkeys.PodSetLabel] != role {
				return fmt.Errorf("gates %v, pod set %q", p.Spec.SchedulingGates, p.Labels[podkeys.PodSetLabel])
			}
			return nil
		})
	}
	joins := 0
	for _, u := range s.admitter.updatesFor(group) {
		if j := u.GetJoin(); j != nil {
			joins++
			if j.GetPodSet() != "worker" || j.GetRequests()["cpu"] != "1" || u.GetWorkload().GetUid() != "wl-uid" {
				t.Errorf("join %v, want pod set worker, cpu 1, uid wl-uid", u)
			}
		}
	}
	// Two workers of one shape ask once, or twice when they ask at once.
	if joins < 1 || joins > 2 {
		t.Errorf("%d joins asked for two workers, want 1 or 2", joins)
	}

	// The role has room again once a worker failed; one that asks for more
	// than its pod set reserves is refused and deleted.
	setPhase(ctx, t, workers[1].Name, corev1.PodFailed)
	big := createPodObject(ctx, t, declaredPod("spark-w9", "worker", "2"))
	waitGone(ctx, t, big.Name)
	waitFor(ctx, t, "a JoinRefused event", func() error {
		return findEvent(ctx, driver.Name, "JoinRefused", "deleted pod spark-w9: it cannot join pod set worker: pod spark-w9 requests cpu 2")
	})
}
