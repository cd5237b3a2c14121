package scheduler

import (
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

// TestPassTriesEachShapeOnce: a queue full of high-priority workloads has
// hundreds of parked ones of two shapes that cannot fit, and one small one
// behind them that can. When quota frees, the pass tries the first of each
// shape, sets the rest of that shape aside, and reaches the small one in
// three tries; the next pass tries the shapes again, and ends once the
// queue is full.
func TestPassTriesEachShapeOnce(t *testing.T) {
	f := newFixture(t)
	f.clusterQueue("cq", "10", withPreemption(v1alpha1.ClusterQueuePreemption{WithinClusterQueue: v1alpha1.PreemptionLowerPriority}))
	age := 0
	add := func(name, cpu string, priority int32) {
		age++
		f.s.Observe(f.workload(name, "lq-cq", cpu, age, priority))
	}
	for i := range 10 {
		add(fmt.Sprintf("run%02d", i), "1", 300)
	}
	running := f.cycle().Reservations
	if len(running) != 10 {
		t.Fatalf("reserved %d, want the 10 that fill the queue", len(running))
	}
	for i := range 200 {
		add(fmt.Sprintf("big%03d", i), "5", 100)
		add(fmt.Sprintf("mid%03d", i), "2", 100)
	}
	add("small", "1", 50)
	if plan := f.cycle(); len(plan.Reservations) != 0 {
		t.Fatalf("a full queue reserved %v", names(plan.Reservations))
	}

	f.s.Observe(f.next(f.written(running[0], true), finished))
	plan := f.cycle()
	if got := names(plan.Reservations); !slices.Equal(got, []string{"small"}) || plan.Tried != 3 {
		t.Fatalf("after a finish: reserved %v in %d tries, want [small] in 3 (big000, mid000, small)", got, plan.Tried)
	}
	if plan.More {
		t.Fatalf("the pass asked for more cycles with only set-aside workloads left")
	}

	f.s.Observe(f.next(f.written(plan.Reservations[0], true), func(*v1alpha1.Workload) {}))
	f.s.Observe(f.next(f.written(running[1], true), finished))
	f.s.Observe(f.next(f.written(running[2], true), finished))
	plan = f.cycle()
	if got := names(plan.Reservations); !slices.Equal(got, []string{"mid000"}) || plan.Tried != 2 {
		t.Fatalf("after two more finishes: reserved %v in %d tries, want [mid000] in 2 (big000, then mid000 fills the queue)", got, plan.Tried)
	}
}

// TestPodSetsKey: workloads that ask the quota the same share a key, and
// any difference flavor assignment weighs gives another.
func TestPodSetsKey(t *testing.T) {
	f := newFixture(t)
	base := func() *v1alpha1.Workload { return f.workload("w", "lq-cq", "2", 0, 0) }
	same := f.workload("other", "lq-cq", "2000m", 5, 7)
	tests := []struct {
		name   string
		mutate func(*v1alpha1.Workload)
	}{
		{"another request", func(wl *v1alpha1.Workload) {
			wl.Spec.PodSets[0].Template.Requests[corev1.ResourceMemory] = resource.MustParse("1Gi")
		}},
		{"another count", func(wl *v1alpha1.Workload) { wl.Spec.PodSets[0].Count = 2 }},
		{"another pod set name", func(wl *v1alpha1.Workload) { wl.Spec.PodSets[0].Name = "workers" }},
		{"a node selector", func(wl *v1alpha1.Workload) {
			wl.Spec.PodSets[0].Template.NodeSelector = map[string]string{"zone": "a"}
		}},
		{"a toleration", func(wl *v1alpha1.Workload) {
			wl.Spec.PodSets[0].Template.Tolerations = []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists}}
		}},
		{"a second pod set", func(wl *v1alpha1.Workload) {
			wl.Spec.PodSets = append(wl.Spec.PodSets, *wl.Spec.PodSets[0].DeepCopy())
			wl.Spec.PodSets[1].Name = "workers"
		}},
	}
	if podSetsKey(base()) != podSetsKey(same) {
		t.Fatalf("the same request under another name, age, priority and spelling: keys %q and %q differ", podSetsKey(base()), podSetsKey(same))
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wl := base()
			tt.mutate(wl)
			if podSetsKey(wl) == podSetsKey(base()) {
				t.Fatalf("key %q is the plain workload's", podSetsKey(wl))
			}
		})
	}
}

// BenchmarkCycleParkedShapes measures the cycle after a finish in a full
// ClusterQueue (withinClusterQueue LowerPriority) whose 40 cpu are held by
// workloads of a higher priority than any pending, with a deep backlog
// parked in the sizes of the scale benchmark's classes (20 cpu at
// priority 200, 5 at 100 and 1 at 50, in the proportions 1:2:7). The
// cycle reserves one 1-cpu workload: no parked workload ahead of it fits,
// and preemption cannot help them. Between iterations the reservation is
// unassumed, so every iteration measures the same cycle. Before parked
// workloads were grouped by what they ask (see parkedSet), the cycle tried
// every parked workload ahead of the first 1-cpu one: 301 heads and 4.8 ms
// with 1,000 pending, and with 10,000 it reached none within
// MaxTriesPerCycle.
//
//	go test -run '^$' -bench CycleParkedShapes -benchmem ./services/admitter/internal/scheduler/
func BenchmarkCycleParkedShapes(b *testing.B) {
	for _, pending := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("pending=%d", pending), func(b *testing.B) { benchmarkParkedShapes(b, pending) })
	}
}

func benchmarkParkedShapes(b *testing.B, pending int) {
	const nominal = 40
	f := newFixture(b)
	f.clusterQueue("cq00", fmt.Sprint(nominal), withPreemption(v1alpha1.ClusterQueuePreemption{WithinClusterQueue: v1alpha1.PreemptionLowerPriority}))
	seq := 0
	add := func(cpu string, priority int32) {
		seq++
		f.s.Observe(f.workload(fmt.Sprintf("w%07d", seq), "lq-cq00", cpu, seq, priority))
	}
	for range nominal {
		add("1", 300)
	}
	admitted := make([][]*v1alpha1.Workload, 1)
	f.settle(admitted)
	for i := range pending {
		switch i % 10 {
		case 0:
			add("20", 200)
		case 1, 2:
			add("5", 100)
		default:
			add("1", 50)
		}
	}
	f.settle(admitted)
	f.s.Observe(f.next(admitted[0][0], finished))
	first := f.cycle()
	if len(first.Reservations) != 1 {
		b.Fatalf("the cycle after a finish reserved %d, want 1", len(first.Reservations))
	}
	f.s.Unassume(first.Reservations[0].Workload)

	tried := 0
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		plan := f.cycle()
		b.StopTimer()
		if len(plan.Reservations) != 1 || plan.Tried != first.Tried {
			b.Fatalf("cycle reserved %d and tried %d heads; the first reserved 1 and tried %d", len(plan.Reservations), plan.Tried, first.Tried)
		}
		tried += plan.Tried
		f.s.Unassume(plan.Reservations[0].Workload)
		b.StartTimer()
	}
	b.ReportMetric(float64(tried)/float64(b.N), "heads/op")
}
