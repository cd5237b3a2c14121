package roster

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/services/grouper/internal/group"
	"github.com/sluice-dev/sluice/services/grouper/internal/workload"
)

var key = workload.Key{Namespace: "ns", Name: "g"}

func groupPod(name string, mutate ...func(*corev1.Pod)) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: name, UID: types.UID("uid-" + name),
			Labels: map[string]string{
				podkeys.QueueNameLabel:    "q",
				podkeys.PodGroupNameLabel: "g",
			},
			Annotations: map[string]string{
				podkeys.PodGroupTotalCountAnnotation: "3",
				podkeys.RoleHashAnnotation:           "h1",
			},
			Finalizers: []string{podkeys.ManagedFinalizer},
		},
		Spec: corev1.PodSpec{SchedulingGates: []corev1.PodSchedulingGate{{Name: podkeys.AdmissionGate}}},
	}
	for _, m := range mutate {
		m(pod)
	}
	return pod
}

func ungated(reservation string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.SchedulingGates = nil
		p.Annotations[podkeys.ReservationAnnotation] = reservation
	}
}

func version(v string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.ResourceVersion = v }
}

func running(p *corev1.Pod) {
	p.Spec.NodeName = "node-1"
	p.Status.Phase = corev1.PodRunning
}

func TestVersions(t *testing.T) {
	tests := []struct {
		name string
		// from is set first, then to.
		from, to                      *corev1.Pod
		structure, claims, anyChanged bool
	}{
		{name: "a new pod", to: groupPod("a"), structure: true, anyChanged: true},
		{name: "the same pod again", from: groupPod("a", version("7")), to: groupPod("a", version("7"))},
		{name: "an ungate", from: groupPod("a"), to: groupPod("a", ungated("r1")), claims: true, anyChanged: true},
		{name: "a pod starting", from: groupPod("a", ungated("r1")), to: groupPod("a", ungated("r1"), running), anyChanged: true},
		{name: "a claim edited on an ungated pod", from: groupPod("a", ungated("r1")), to: groupPod("a", ungated("r2")), structure: true, anyChanged: true},
		{name: "a pod failing", from: groupPod("a", ungated("r1"), running), to: groupPod("a", ungated("r1"), running, func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodFailed
		}), structure: true, anyChanged: true},
		{name: "a queue label changed", from: groupPod("a"), to: groupPod("a", func(p *corev1.Pod) {
			p.Labels[podkeys.QueueNameLabel] = "other"
		}), structure: true, anyChanged: true},
		{name: "another pod of the same name", from: groupPod("a"), to: groupPod("a", func(p *corev1.Pod) { p.UID = "new" }),
			structure: true, anyChanged: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := New()
			if tt.from != nil {
				r.Set(tt.from)
			}
			before := r.Look(key, nil)
			r.Set(tt.to)
			after := r.Look(key, nil)
			if got := after.Structure != before.Structure; got != tt.structure {
				t.Errorf("structure changed = %v, want %v", got, tt.structure)
			}
			if got := after.Claims != before.Claims; got != tt.claims {
				t.Errorf("claims changed = %v, want %v", got, tt.claims)
			}
			if got := after.Any != before.Any; got != tt.anyChanged {
				t.Errorf("any changed = %v, want %v", got, tt.anyChanged)
			}
			if n := r.Len(key); n != 1 {
				t.Errorf("Len = %d, want 1", n)
			}
		})
	}
}

func TestDeleteAndMove(t *testing.T) {
	r := New()
	a, b := groupPod("a"), groupPod("b")
	r.Set(a)
	r.Set(b)
	if n := r.Len(key); n != 2 {
		t.Fatalf("Len = %d, want 2", n)
	}
	// A delete of an older pod of the name leaves the newer one.
	r.Delete(groupPod("a", func(p *corev1.Pod) { p.UID = "older" }))
	if n := r.Len(key); n != 2 {
		t.Fatalf("after deleting an older pod of the name: Len = %d, want 2", n)
	}
	r.Delete(a)
	if pods := r.Pods(key); len(pods) != 1 || pods[0] != b {
		t.Fatalf("after deleting a: pods = %v, want only b", pods)
	}
	// b moves to another group: it leaves this one, which is dropped.
	moved := groupPod("b", func(p *corev1.Pod) { p.Labels[podkeys.PodGroupNameLabel] = "h" })
	r.Set(moved)
	if n := r.Len(key); n != 0 {
		t.Fatalf("after b moved: Len(g) = %d, want 0", n)
	}
	if n := r.Len(workload.Key{Namespace: "ns", Name: "h"}); n != 1 {
		t.Fatalf("after b moved: Len(h) = %d, want 1", n)
	}
	r.Delete(moved)
	if len(r.workloads) != 0 || len(r.names) != 0 {
		t.Fatalf("an empty roster keeps %d workloads and %d names", len(r.workloads), len(r.names))
	}
}

func TestTallyFollowsThePods(t *testing.T) {
	r := New()
	short := func() bool {
		var s bool
		r.Look(key, func(t *group.Tally) { s = t.Short() })
		return s
	}
	owned := func(run group.Run) int {
		var n int
		r.Look(key, func(t *group.Tally) { n = t.Owned(run) })
		return n
	}
	r.Set(groupPod("a"))
	r.Set(groupPod("b"))
	if !short() {
		t.Fatal("two pods of a group of three: not short")
	}
	r.Set(groupPod("c"))
	if short() {
		t.Fatal("three pods of a group of three: short")
	}
	r.Set(groupPod("c", ungated("r1")))
	r.Set(groupPod("b", ungated("r0")))
	if got := owned(group.Run{Reservation: "r1"}); got != 2 {
		t.Fatalf("Owned(r1) = %d, want 2 (a gated, c ungated under r1)", got)
	}
	r.Set(groupPod("c", ungated("r1"), func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }))
	if !short() {
		t.Fatal("a pod failed: the group is short again")
	}
	r.Set(groupPod("d", func(p *corev1.Pod) { p.Labels[podkeys.QueueNameLabel] = "other" }))
	if short() {
		t.Fatal("pods disagree on the queue: short, where Assemble must tell the mismatch")
	}
	for _, name := range []string{"a", "b", "c", "d"} {
		r.Delete(groupPod(name))
	}
	if len(r.workloads) != 0 {
		t.Fatalf("every pod deleted: %d workloads left", len(r.workloads))
	}
}
