package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1alpha2 "k8s.io/api/scheduling/v1alpha2"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
)

// TestPodGroupGangAdmittedWhole: pods that carry a queue name and name a
// PodGroup with a gang of three, and no total count of their own, are one
// workload sized by the gang: with two of them the group waits, every pod
// gated and no Workload made; the third completes it, the group is
// admitted whole, and kube-scheduler binds the three together.
func TestPodGroupGangAdmittedWhole(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := createNamespace(ctx, t, "podgroup")
	createQueues(ctx, t, ns, "podgroup", "3")
	mustCreate(ctx, t, &schedulingv1alpha2.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ranks"},
		Spec: schedulingv1alpha2.PodGroupSpec{SchedulingPolicy: schedulingv1alpha2.PodGroupSchedulingPolicy{
			Gang: &schedulingv1alpha2.GangSchedulingPolicy{MinCount: 3},
		}},
	})
	newRank := func(i int) *corev1.Pod {
		p := newPod(ns, fmt.Sprintf("rank-%d", i), "1", "3s")
		group := "ranks"
		p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: &group}
		return p
	}
	pods := []*corev1.Pod{newRank(0), newRank(1)}
	for _, p := range pods {
		mustCreate(ctx, t, p)
	}

	// Two of three: for as long as the grouper takes to look at a group
	// many times over, every pod stays gated and no Workload is made.
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Second, true, func(ctx context.Context) (bool, error) {
		var list sluicev1alpha1.WorkloadList
		if err := k8s.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return false, nil // the window's end may cut a read short
		}
		if len(list.Items) > 0 {
			return false, fmt.Errorf("workload %s made for two pods of a gang of three", list.Items[0].Name)
		}
		for _, p := range pods {
			var got corev1.Pod
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(p), &got); err == nil && !hasGate(&got) {
				return false, fmt.Errorf("pod %s ungated with two pods of a gang of three", p.Name)
			}
		}
		return false, nil
	})
	if !wait.Interrupted(err) {
		t.Fatal(err)
	}

	third := newRank(2)
	mustCreate(ctx, t, third)
	pods = append(pods, third)
	wl := waitWorkloadOf(ctx, t, third, "admitted", func(w *sluicev1alpha1.Workload) bool {
		return meta.IsStatusConditionTrue(w.Status.Conditions, sluicev1alpha1.WorkloadAdmitted)
	})
	if wl.Name != "ranks" || wl.Labels[sluicev1alpha1.PodGroupLabel] != "ranks" || len(wl.Spec.PodSets) != 1 || wl.Spec.PodSets[0].Count != 3 {
		t.Errorf("workload %s (label %q) pod sets %+v, want ranks with one pod set of 3", wl.Name, wl.Labels[sluicev1alpha1.PodGroupLabel], wl.Spec.PodSets)
	}
	waitPods(ctx, t, pods, "bound together", allBound)
	for _, p := range pods {
		if got := getPod(ctx, t, p); got.Labels[podkeys.PodSetLabel] == "" {
			t.Errorf("pod %s ungated without its pod set label", p.Name)
		}
	}
	waitGroupEnded(ctx, t, "podgroup", pods, sluicev1alpha1.ReasonSucceeded)
}
