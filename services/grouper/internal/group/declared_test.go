package group

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/sluice-dev/sluice/pkg/podkeys"
)

// sets declares a driver (shaped like itself) and two workers of 1 cpu.
const sets = `[{"name":"driver","count":1},{"name":"worker","count":2,"template":{"spec":{"containers":[{"name":"w","resources":{"requests":{"cpu":"1"}}}]}}}]`

// member is a gated pod of declared group "g" with role, created age
// seconds after epoch; the driver carries the declaration.
func member(name, role string, age int, mutate ...func(*corev1.Pod)) *corev1.Pod {
	p := pod(name, "", age, mutate...)
	delete(p.Annotations, podkeys.PodGroupTotalCountAnnotation)
	delete(p.Annotations, podkeys.RoleHashAnnotation)
	p.Labels[podkeys.PodGroupRoleLabel] = role
	if role == "driver" {
		p.Annotations[podkeys.PodGroupSetsAnnotation] = sets
	}
	p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}
	return p
}

func withSets(p *corev1.Pod, sets string) *corev1.Pod {
	p.Annotations[podkeys.PodGroupSetsAnnotation] = sets
	return p
}

func TestAssembleDeclared(t *testing.T) {
	tests := []struct {
		name      string
		pods      []*corev1.Pod
		workload  bool
		members   []string
		excess    []string
		strangers []string
		err       string
	}{
		{name: "workers wait for the driver", pods: []*corev1.Pod{member("w1", "worker", 1)}, members: []string{"w1"}},
		{name: "the driver alone makes the workload", pods: []*corev1.Pod{member("d", "driver", 1)}, workload: true, members: []string{"d"}},
		{name: "workers beyond their count are excess, youngest first",
			pods:     []*corev1.Pod{member("d", "driver", 1), member("w1", "worker", 2), member("w3", "worker", 4), member("w2", "worker", 3), member("w4", "worker", 5)},
			workload: true, members: []string{"d", "w1", "w2"}, excess: []string{"w4", "w3"}},
		{name: "a failed worker does not count", pods: []*corev1.Pod{member("d", "driver", 1), member("w1", "worker", 2, failed(3)),
			member("w2", "worker", 3), member("w3", "worker", 4)}, workload: true, members: []string{"d", "w2", "w3"}},
		{name: "a role not declared is a stranger", pods: []*corev1.Pod{member("d", "driver", 1), member("x", "executor", 2)},
			workload: true, members: []string{"d"}, strangers: []string{"x"}},
		{name: "the driver unlabelled takes its own role", pods: []*corev1.Pod{member("d", "driver", 1, func(p *corev1.Pod) {
			delete(p.Labels, podkeys.PodGroupRoleLabel)
		})}, workload: true, members: []string{"d"}},
		{name: "queues disagree", pods: []*corev1.Pod{member("d", "driver", 1), member("w1", "worker", 2, queue("other"))},
			err: "disagree on " + podkeys.QueueNameLabel},
		{name: "a worker names another priority class", pods: []*corev1.Pod{member("d", "driver", 1, priorityClass("urgent")),
			member("w1", "worker", 2, priorityClass("low"))}, err: "disagree on " + podkeys.PriorityClassLabel},
		{name: "workers waiting for the driver disagree on the time", pods: []*corev1.Pod{member("w1", "worker", 1, maxExecTime("60")),
			member("w2", "worker", 2)}, err: "disagree on " + podkeys.MaxExecTimeLabel},
		{name: "two drivers disagree on the declaration", pods: []*corev1.Pod{member("d", "driver", 1), withSets(member("d2", "driver", 2),
			`[{"name":"driver","count":2}]`)}, err: "disagree on " + podkeys.PodGroupSetsAnnotation},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := Assemble("ns", "g", tt.pods, 0)
			if tt.err != "" {
				var mismatch *MismatchError
				if err == nil || !errors.As(err, &mismatch) || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("Assemble error = %v, want a mismatch containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Assemble: %v", err)
			}
			if (a.Workload != nil) != tt.workload {
				t.Fatalf("workload = %v, want one: %v", a.Workload, tt.workload)
			}
			check := func(what string, got []*corev1.Pod, want []string) {
				if !slices.Equal(names(got), append([]string{}, want...)) && !(len(got) == 0 && len(want) == 0) {
					t.Errorf("%s = %v, want %v", what, names(got), want)
				}
			}
			check("members", a.Members, tt.members)
			check("excess", a.Excess, tt.excess)
			check("strangers", a.Strangers, tt.strangers)
		})
	}
}

func TestDeclaredWorkload(t *testing.T) {
	a, err := Assemble("ns", "g", []*corev1.Pod{member("d", "driver", 1, priorityClass("urgent"), maxExecTime("3600"))}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ps := range a.Workload.GetPodSets() {
		got = append(got, fmt.Sprintf("%s:%d:cpu=%s", ps.GetName(), ps.GetCount(), ps.GetRequests()["cpu"]))
	}
	want := []string{"driver:1:cpu=500m", "worker:2:cpu=1"}
	if !slices.Equal(got, want) {
		t.Errorf("pod sets = %v, want %v", got, want)
	}
	if a.Workload.GetPodGroup() != "g" || a.TotalCount != 3 || !slices.Equal(a.Declared, []string{"driver", "worker"}) {
		t.Errorf("workload pod group %q, total %d, declared %v", a.Workload.GetPodGroup(), a.TotalCount, a.Declared)
	}
	if a.Workload.GetWorkloadPriorityClass() != "urgent" || a.Workload.GetMaximumExecutionTimeSeconds() != 3600 {
		t.Errorf("workload priority class %q, maximum execution time %d; want the driver's urgent and 3600",
			a.Workload.GetWorkloadPriorityClass(), a.Workload.GetMaximumExecutionTimeSeconds())
	}
}

func TestObserveDeclared(t *testing.T) {
	counts := map[string]int32{"driver": 1, "worker": 2}
	ungated := func(p *corev1.Pod) { running(p); admittedIn("this")(p) }
	tests := []struct {
		name      string
		pods      []*corev1.Pod
		missing   map[string]int32
		excess    []string
		strangers []string
		replaced  []string
		finished  bool
		success   bool
	}{
		{name: "workers not created yet are not missing", pods: []*corev1.Pod{member("d", "driver", 1, ungated)}, missing: map[string]int32{}},
		{name: "a failed worker holds no place: the driver creates workers as it needs them",
			pods:    []*corev1.Pod{member("d", "driver", 1, ungated), member("w1", "worker", 2, ungated, failed(5))},
			missing: map[string]int32{}, replaced: []string{"w1"}},
		{name: "a failed worker and two new ones",
			pods:    []*corev1.Pod{member("d", "driver", 1, ungated), member("w1", "worker", 2, ungated, failed(5)), member("w2", "worker", 6), member("w3", "worker", 7)},
			missing: map[string]int32{}, replaced: []string{"w1"}},
		{name: "a third worker is excess",
			pods:    []*corev1.Pod{member("d", "driver", 1, ungated), member("w1", "worker", 2, ungated), member("w2", "worker", 3, ungated), member("w3", "worker", 4)},
			missing: map[string]int32{}, excess: []string{"w3"}},
		{name: "an undeclared role is a stranger",
			pods:    []*corev1.Pod{member("d", "driver", 1, ungated), member("x", "executor", 2)},
			missing: map[string]int32{}, strangers: []string{"x"}},
		{name: "the driver succeeded while a worker runs: not finished",
			pods:    []*corev1.Pod{member("d", "driver", 1, ungated, succeeded), member("w1", "worker", 2, ungated)},
			missing: map[string]int32{}},
		{name: "the driver succeeded and nothing runs: finished, a success",
			pods:    []*corev1.Pod{member("d", "driver", 1, ungated, succeeded), member("w1", "worker", 2, ungated, succeeded)},
			missing: map[string]int32{}, finished: true, success: true},
		{name: "every declared pod succeeded", pods: []*corev1.Pod{member("d", "driver", 1, ungated, succeeded),
			member("w1", "worker", 2, ungated, succeeded), member("w2", "worker", 3, ungated, succeeded)},
			missing: map[string]int32{}, finished: true, success: true},
		{name: "the driver failed and is not retriable: finished, a failure",
			pods:    []*corev1.Pod{member("d", "driver", 1, ungated, notRetriable, failed(4)), member("w1", "worker", 2, ungated, succeeded)},
			missing: map[string]int32{}, finished: true},
		{name: "the driver failed: missing until replaced",
			pods:    []*corev1.Pod{member("d", "driver", 1, ungated, failed(4))},
			missing: map[string]int32{"driver": 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			how := RolesOf(tt.pods)
			if !how.Declared {
				t.Fatal("RolesOf: not a declared group")
			}
			st, err := Observe(Run{UID: "this"}, counts, how, tt.pods)
			if err != nil {
				t.Fatalf("Observe: %v", err)
			}
			if fmt.Sprint(st.Missing) != fmt.Sprint(tt.missing) {
				t.Errorf("missing = %v, want %v", st.Missing, tt.missing)
			}
			for what, pair := range map[string][2][]string{
				"excess": {names(st.Excess), tt.excess}, "strangers": {names(st.Strangers), tt.strangers}, "replaced": {names(st.Replaced), tt.replaced},
			} {
				if fmt.Sprint(pair[0]) != fmt.Sprint(append([]string{}, pair[1]...)) {
					t.Errorf("%s = %v, want %v", what, pair[0], pair[1])
				}
			}
			if st.Finished != tt.finished || st.Success != tt.success {
				t.Errorf("finished %v success %v (%s), want %v %v", st.Finished, st.Success, st.Message, tt.finished, tt.success)
			}
		})
	}
}
