package scheduler

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

func drained(ds []Eviction) map[string]string {
	out := map[string]string{}
	for _, d := range ds {
		out[d.Workload.Name] = d.Reason
	}
	return out
}

func withStopPolicy(p v1alpha1.StopPolicy) func(*v1alpha1.ClusterQueue) {
	return func(cq *v1alpha1.ClusterQueue) { cq.Spec.StopPolicy = ptr.To(p) }
}

// TestHoldAndDrain: a ClusterQueue or LocalQueue that drains hands out
// every workload holding quota in it, once per version; one being evicted
// already, or in a queue that only holds, is left alone; the message says
// what becomes of the pods.
func TestHoldAndDrain(t *testing.T) {
	f := newFixture(t)
	f.clusterQueue("cq", "4")
	f.clusterQueue("other", "4")
	f.s.Observe(f.workload("single", "lq-cq", "1", 0, 0))
	group := f.workload("group", "lq-cq", "1", 1, 0)
	group.Labels = map[string]string{v1alpha1.PodGroupLabel: "group"}
	f.s.Observe(group)
	f.s.Observe(f.workload("elsewhere", "lq-other", "1", 2, 0))
	_, _, written := f.runCycle()
	if len(written) != 3 {
		t.Fatalf("admitted %d workloads, want 3", len(written))
	}

	f.clusterQueue("cq", "4", withStopPolicy(v1alpha1.Hold), func(cq *v1alpha1.ClusterQueue) { cq.Generation = 2 })
	if plan := f.cycle(); len(plan.Evictions) != 0 {
		t.Fatalf("Hold drained %v", drained(plan.Evictions))
	}

	f.clusterQueue("cq", "4", withStopPolicy(v1alpha1.HoldAndDrain), func(cq *v1alpha1.ClusterQueue) { cq.Generation = 3 })
	plan := f.cycle()
	want := map[string]string{"single": v1alpha1.ReasonClusterQueueStopped, "group": v1alpha1.ReasonClusterQueueStopped}
	if got := drained(plan.Evictions); !maps.Equal(got, want) {
		t.Fatalf("drained %v, want %v", got, want)
	}
	for _, d := range plan.Evictions {
		wantText := "the pod is deleted and does not run again"
		if d.Workload.Name == "group" {
			wantText = "the group's pods are deleted; it queues again once they are all created again"
		}
		if !strings.HasPrefix(d.Message, "ClusterQueue cq drains (stopPolicy HoldAndDrain): ") || !strings.Contains(d.Message, wantText) {
			t.Fatalf("%s: message %q, want it to name the queue and say %q", d.Workload.Name, d.Message, wantText)
		}
	}
	if plan := f.cycle(); len(plan.Evictions) != 0 {
		t.Fatalf("the same versions were handed out again: %v", drained(plan.Evictions))
	}

	// A failed eviction hands the workload out again.
	f.s.RetryEviction(written["single"])
	if got := drained(f.cycle().Evictions); !maps.Equal(got, map[string]string{"single": v1alpha1.ReasonClusterQueueStopped}) {
		t.Fatalf("after RetryEviction drained %v, want single", got)
	}

	// Being evicted, it is not handed out again.
	evicting := f.next(written["group"], func(wl *v1alpha1.Workload) {
		meta.SetStatusCondition(&wl.Status.Conditions, metav1.Condition{Type: v1alpha1.WorkloadEvicted, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonClusterQueueStopped})
	})
	f.s.Observe(evicting)
	if plan := f.cycle(); len(plan.Evictions) != 0 {
		t.Fatalf("a workload being evicted was handed out: %v", drained(plan.Evictions))
	}

	// A LocalQueue that drains hands out its own workloads only.
	f.s.SetLocalQueue(&v1alpha1.LocalQueue{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "lq-other", UID: types.UID("lq-other"), Generation: 2},
		Spec:       v1alpha1.LocalQueueSpec{ClusterQueue: "other", StopPolicy: ptr.To(v1alpha1.HoldAndDrain)},
	})
	plan = f.cycle()
	if got := drained(plan.Evictions); !maps.Equal(got, map[string]string{"elsewhere": v1alpha1.ReasonLocalQueueStopped}) {
		t.Fatalf("with LocalQueue lq-other draining, drained %v, want elsewhere", got)
	}
	if msg := plan.Evictions[0].Message; !strings.HasPrefix(msg, "LocalQueue lq-other drains") {
		t.Fatalf("message %q, want it to name the LocalQueue", msg)
	}

	// Pending workloads of a draining queue wait; nothing is reserved.
	f.s.Observe(f.workload("new", "lq-cq", "1", 3, 0))
	plan = f.cycle()
	if names := names(plan.Reservations); slices.Contains(names, "new") {
		t.Fatal("a draining ClusterQueue admitted a new workload")
	}
}
