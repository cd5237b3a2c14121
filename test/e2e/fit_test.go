package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
)

// TestChangedPodNotRunInItsPodSet: a user's group of two pods waits for
// quota; meanwhile the user gives one pod a node selector (the API server
// lets a gated pod's grow). When the queue has room the group is admitted
// for the pods as they were submitted: the unchanged pod is ungated in its
// pod set, the changed one never loses its gate and carries a Warning,
// which the user can read, naming the node selector it has and the one
// its pod set was admitted with.
func TestChangedPodNotRunInItsPodSet(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := createNamespace(ctx, t, "fit")
	createQueues(ctx, t, ns, "fit-cq", "500m") // the group needs 1
	alice := newUser(ctx, t, ns, "alice", []string{"edit"}, editPods...)

	kept := groupPod(ns, "fit", "fit-kept", "500m", 2, nil)
	changed := groupPod(ns, "fit", "fit-changed", "500m", 2, nil)
	createAs(ctx, t, alice, kept)
	createAs(ctx, t, alice, changed)
	wl := waitWorkloadOf(ctx, t, kept, "pending for quota", waitsForQuota)
	if len(wl.Spec.PodSets) != 1 || wl.Spec.PodSets[0].Count != 2 || len(wl.Spec.PodSets[0].Template.NodeSelector) != 0 {
		t.Fatalf("workload %s has pod sets %+v, want one of 2 pods without a node selector", wl.Name, wl.Spec.PodSets)
	}

	accepted(ctx, t, alice, "patch", "pod", changed.Name, "--type", "merge", "-p", `{"spec":{"nodeSelector":{"disk":"ssd"}}}`)
	gate := watchGate(ctx, t, changed)
	// The grouper follows pods through one watch, in order: once it has
	// submitted a pod created after the patch, it has seen the patch.
	barrier := newPod(ns, "fit-barrier", "100m", "1s")
	createAs(ctx, t, alice, barrier)
	waitWorkloadOf(ctx, t, barrier, "submitted", func(*sluicev1alpha1.Workload) bool { return true })

	var cq sluicev1alpha1.ClusterQueue
	if err := k8s.Get(ctx, client.ObjectKey{Name: "fit-cq"}, &cq); err != nil {
		t.Fatal(err)
	}
	cq.Spec.ResourceGroups[0].Flavors[0].Resources[0].NominalQuota = resource.MustParse("2")
	if err := k8s.Update(ctx, &cq); err != nil {
		t.Fatal(err)
	}

	// The unchanged pod runs in its pod set (kube-scheduler's gang then
	// holds it until the group is whole).
	ungated := waitPod(ctx, t, kept, "ungated", func(p *corev1.Pod) bool { return !hasGate(p) })
	if ungated.Labels[podkeys.PodSetLabel] != wl.Spec.PodSets[0].Name || ungated.Annotations[podkeys.WorkloadAnnotation] != wl.Name {
		t.Errorf("pod %s ungated without its pod set label and workload annotation: %v %v", kept.Name, ungated.Labels, ungated.Annotations)
	}
	ev := waitPodEvent(ctx, t, changed, corev1.EventTypeWarning, "PodSetMismatch")
	if want := "nodeSelector: pod {disk=ssd}, pod set none"; !strings.Contains(ev.Note, want) {
		t.Errorf("PodSetMismatch event says %q, want it to name %q", ev.Note, want)
	}
	gate.assertGatedThroughout(ctx, t)

	// What the user sees.
	out := accepted(ctx, t, alice, "get", "events", "--field-selector", "involvedObject.name="+changed.Name+",reason=PodSetMismatch",
		"-o", "jsonpath={.items[*].message}")
	if !strings.Contains(out, "nodeSelector") {
		t.Errorf("the user's events of pod %s say %q, want the PodSetMismatch naming nodeSelector", changed.Name, out)
	}
}
