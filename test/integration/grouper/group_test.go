package grouper

import (
	"context"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/kube"
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
