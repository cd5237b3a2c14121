package groups

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	sluicev1 "github.com/sluice-dev/sluice/gen/sluice/v1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/services/grouper/internal/roster"
	"github.com/sluice-dev/sluice/services/grouper/internal/workload"
)

// newTestPath is a Path with a roster and a clock, nothing else.
func newTestPath() *Path {
	return New(Config{Roster: roster.New(), Now: time.Now})
}

func viewPod(i int, mutate ...func(*corev1.Pod)) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: fmt.Sprintf("p%d", i), UID: types.UID(fmt.Sprintf("uid-%d", i)),
			Labels:      map[string]string{podkeys.QueueNameLabel: "q", podkeys.PodGroupNameLabel: "g"},
			Annotations: map[string]string{podkeys.PodGroupTotalCountAnnotation: "3", podkeys.RoleHashAnnotation: "h"},
			Finalizers:  []string{podkeys.ManagedFinalizer},
		},
		Spec: corev1.PodSpec{SchedulingGates: []corev1.PodSchedulingGate{{Name: podkeys.AdmissionGate}}},
	}
	for _, m := range mutate {
		m(pod)
	}
	return pod
}

func ungatedUnder(reservation string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.SchedulingGates = nil
		p.Annotations[podkeys.ReservationAnnotation] = reservation
	}
}

// TestObserveIsWorkedOutOncePerChange checks that the pods of an admitted
// group share one observation while only their ungates under the
// admission change the group, and that other changes are seen.
func TestObserveIsWorkedOutOncePerChange(t *testing.T) {
	key := workload.Key{Namespace: "ns", Name: "g"}
	admit := &admitterv1.Decision{
		Action: admitterv1.Decision_ACTION_ADMIT, ReservationId: "r1",
		Workload:     &sluicev1.WorkloadRef{Namespace: "ns", Name: "g", Uid: "w1"},
		PodSetCounts: map[string]int32{"h": 3},
	}
	tests := []struct {
		name string
		// change is applied after the first observation.
		change func(*Path)
		again  bool
		// excess is how many pods the first observation cuts.
		pods   int
		excess int
	}{
		{name: "nothing", change: func(*Path) {}, pods: 3},
		{name: "an ungate under the admission", change: func(p *Path) { p.Roster.Set(viewPod(0, ungatedUnder("r1"))) }, pods: 3},
		{name: "an ungate under another reservation", change: func(p *Path) { p.Roster.Set(viewPod(0, ungatedUnder("r0"))) },
			pods: 3, again: true},
		{name: "an ungate when pods were cut by their order", change: func(p *Path) { p.Roster.Set(viewPod(0, ungatedUnder("r1"))) },
			pods: 4, excess: 1, again: true},
		{name: "a pod failing", change: func(p *Path) {
			p.Roster.Set(viewPod(1, func(pod *corev1.Pod) { pod.Status.Phase = corev1.PodFailed }))
		}, pods: 3, again: true},
		{name: "a new pod", change: func(p *Path) { p.Roster.Set(viewPod(9)) }, pods: 3, again: true},
		{name: "another admission", change: func(p *Path) {}, pods: 3, again: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newTestPath()
			for i := range tt.pods {
				p.Roster.Set(viewPod(i))
			}
			first, err := p.observe(key, admit)
			if err != nil {
				t.Fatal(err)
			}
			if len(first.Excess) != tt.excess {
				t.Fatalf("first observation: %d excess pods, want %d", len(first.Excess), tt.excess)
			}
			tt.change(p)
			d := admit
			if tt.name == "another admission" {
				d = &admitterv1.Decision{Action: admit.Action, ReservationId: "r2", Workload: admit.Workload, PodSetCounts: admit.PodSetCounts}
			}
			second, err := p.observe(key, d)
			if err != nil {
				t.Fatal(err)
			}
			if again := second != first; again != tt.again {
				t.Fatalf("worked out again = %v, want %v", again, tt.again)
			}
		})
	}
}

// TestAssembleSkipsShortGroups checks that a group short of pods is not
// assembled, and that a complete one is assembled once per change.
func TestAssembleSkipsShortGroups(t *testing.T) {
	p := newTestPath()
	key := workload.Key{Namespace: "ns", Name: "g"}
	for i := range 2 {
		p.Roster.Set(viewPod(i))
	}
	ctx := context.Background()
	if _, short, err := p.assemble(ctx, key); err != nil || !short {
		t.Fatalf("two pods of three: short = %v, err = %v; want short", short, err)
	}
	p.Roster.Set(viewPod(2))
	first, short, err := p.assemble(ctx, key)
	if err != nil || short || first.Workload == nil {
		t.Fatalf("three pods of three: short = %v, err = %v, assembly = %+v; want a workload", short, err, first)
	}
	if again, _, _ := p.assemble(ctx, key); again != first {
		t.Fatal("nothing changed, and the group was assembled again")
	}
	p.Roster.Set(viewPod(2, func(pod *corev1.Pod) { pod.Labels["team"] = "a" }))
	if again, _, _ := p.assemble(ctx, key); again == first {
		t.Fatal("a pod's labels changed, and the group was not assembled again")
	}
}
