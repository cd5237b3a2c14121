package grouper

import (
	"context"
	"errors"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/kube"
	"github.com/sluice-dev/sluice/pkg/podkeys"
)

// TestGroupWithoutPods: a pod group's Workload has no owners; the grouper
// is what tells the admitter that the group has no pod left, naming the
// Workload's uid. Workloads without the pod-group label are not its to
// report.
func TestGroupWithoutPods(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	scheme, err := kube.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	k8s, err := client.New(s.env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
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
	var pods []*corev1.Pod
	for _, name := range []string{"moving-a", "moving-b"} {
		pod := newPod(name)
		pod.Labels[podkeys.PodGroupNameLabel] = group
		pod.Annotations[podkeys.PodGroupTotalCountAnnotation] = "2"
		pods = append(pods, createPodObject(ctx, t, pod))
	}
	waitFor(ctx, t, "the group submitted", func() error {
		if len(s.admitter.submissionsFor(group)) == 0 {
			return errors.New("not submitted")
		}
		return nil
	})
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
