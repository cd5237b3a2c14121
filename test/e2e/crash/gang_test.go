package crash

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	schedulingv1alpha2 "k8s.io/api/scheduling/v1alpha2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/test/testenv"
)

// TestCrashGangPodGroup: the grouper dies right after creating a group's
// PodGroup, before it ungated any pod. Started again, it finds the
// PodGroup it made (owned by the run's Workload) and ungates: the
// PodGroup is created once, each pod is ungated once, and the group runs
// to its end as a gang.
func TestCrashGangPodGroup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	defer cancel()
	ns := createNamespace(ctx, t, "gang")
	createQueues(ctx, t, ns, userQueue, ns, "2")
	hist := record(ctx, t, ns, ns)
	pods := []*corev1.Pod{groupPod(ns, "g", "a", "1", "2s", 2), groupPod(ns, "g", "b", "1", "2s", 2)}

	c := arm(ctx, t, "grouper/podgroup")
	before := requestCounts(ctx, t)
	for _, p := range pods {
		mustCreate(ctx, t, p)
	}
	c.waitHit(ctx, t)
	for _, p := range pods {
		waitPod(ctx, t, p, "Succeeded without sluice's finalizer", endedClean(corev1.PodSucceeded))
	}
	wl := workloadOf(ctx, t, pods[0], "Finished", condIs(sluicev1alpha1.WorkloadFinished, metav1.ConditionTrue, sluicev1alpha1.ReasonSucceeded))
	if n := podGroupCreates(requestCounts(ctx, t), before); n != 1 {
		t.Errorf("%d PodGroup creates took effect, want 1", n)
	}
	pg := &schedulingv1alpha2.PodGroup{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "g"}, pg); err != nil {
		t.Fatalf("the group's PodGroup: %v", err)
	}
	if refs := pg.OwnerReferences; len(refs) != 1 || refs[0].UID != wl.UID {
		t.Errorf("PodGroup owners %+v, want the Workload (uid %s)", refs, wl.UID)
	}
	settle(ctx, t, ns)
	hist.stop()
	hist.check(t)
	for _, p := range pods {
		if n := hist.ungates(p.Name); n != 1 {
			t.Errorf("%s was ungated %d times, want 1", p.Name, n)
		}
	}
}

// podGroupCreates counts the PodGroup creates that took effect between
// two snapshots of the API server's request counters.
func podGroupCreates(after, before []testenv.RequestCount) int {
	n := 0
	for _, rc := range testenv.SubtractCounts(after, before) {
		if rc.Group == "scheduling.k8s.io" && rc.Resource == "podgroups" && rc.Verb == "POST" && strings.HasPrefix(rc.Code, "2") {
			n += int(rc.Count)
		}
	}
	return n
}
