package group

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/sluice-dev/sluice/pkg/podkeys"
)

// TestTallyShortAgreesWithAssemble checks that a group the tally calls
// short is one Assemble finds short of pods without a problem to tell.
func TestTallyShortAgreesWithAssemble(t *testing.T) {
	queue := func(q string) func(*corev1.Pod) { return func(p *corev1.Pod) { p.Labels[podkeys.QueueNameLabel] = q } }
	count := func(c string) func(*corev1.Pod) {
		return func(p *corev1.Pod) { p.Annotations[podkeys.PodGroupTotalCountAnnotation] = c }
	}
	declaring := func(p *corev1.Pod) {
		p.Annotations[podkeys.PodGroupSetsAnnotation] = `[{"name":"driver","count":1},{"name":"worker","count":2}]`
		p.Labels[podkeys.PodGroupRoleLabel] = "driver"
	}
	tests := []struct {
		name  string
		pods  []*corev1.Pod
		short bool
	}{
		{name: "two of three", pods: []*corev1.Pod{pod("a", "h", 0), pod("b", "h", 1)}, short: true},
		{name: "three of three", pods: []*corev1.Pod{pod("a", "h", 0), pod("b", "h", 1), pod("c", "h", 2)}},
		{name: "four of three", pods: []*corev1.Pod{pod("a", "h", 0), pod("b", "h", 1), pod("c", "h", 2), pod("d", "h", 3)}},
		{name: "a failed pod does not count", pods: []*corev1.Pod{pod("a", "h", 0), pod("b", "h", 1), pod("c", "h", 2, failed(3))}, short: true},
		{name: "a released pod does not count", pods: []*corev1.Pod{
			pod("a", "h", 0), pod("b", "h", 1), pod("c", "h", 2, succeeded, released)}, short: true},
		{name: "pods disagree on the queue", pods: []*corev1.Pod{pod("a", "h", 0), pod("b", "h", 1, queue("other"))}},
		{name: "pods disagree on the count", pods: []*corev1.Pod{pod("a", "h", 0), pod("b", "h", 1, count("4"))}},
		{name: "an invalid count", pods: []*corev1.Pod{pod("a", "h", 0, count("x"))}},
		{name: "a declared group", pods: []*corev1.Pod{pod("a", "h", 0, declaring)}},
		{name: "too many roles", pods: func() []*corev1.Pod {
			var pods []*corev1.Pod
			for i := range MaxRoles + 1 {
				pods = append(pods, pod(string(rune('a'+i)), string(rune('a'+i)), i, count("20")))
			}
			return pods
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var tally Tally
			for _, p := range tt.pods {
				tally.Add(ShapeOf(p), ClaimOf(p))
			}
			if got := tally.Short(); got != tt.short {
				t.Fatalf("Short() = %v, want %v", got, tt.short)
			}
			if !tt.short {
				return
			}
			a, err := Assemble("ns", "g", tt.pods, 0)
			if err != nil || a.Workload != nil || a.Missing == 0 || len(a.Excess) > 0 {
				t.Fatalf("the tally says short, but Assemble gives %+v, %v", a, err)
			}
			for _, p := range tt.pods {
				tally.Remove(ShapeOf(p), ClaimOf(p))
			}
			if tally.Pods() != 0 || tally.live != 0 || len(tally.queues)+len(tally.totalCounts)+len(tally.roles)+len(tally.ungated) != 0 {
				t.Fatalf("every pod removed, the tally still counts: %+v", tally)
			}
		})
	}
}

// TestOwnsClaim checks which claims take part in a run.
func TestOwnsClaim(t *testing.T) {
	run := Run{UID: "w1", Reservation: "r1"}
	tests := []struct {
		claim Claim
		want  bool
	}{
		{Claim{Gated: true, Reservation: "r0"}, true},
		{Claim{Reservation: "r1"}, true},
		{Claim{Reservation: "r0"}, false},
		{Claim{UID: "w1"}, true},
		{Claim{UID: "w0"}, false},
		{Claim{}, true},
	}
	for _, tt := range tests {
		if got := run.OwnsClaim(tt.claim); got != tt.want {
			t.Errorf("OwnsClaim(%+v) = %v, want %v", tt.claim, got, tt.want)
		}
	}
}
