package group

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sluice-dev/sluice/pkg/podkeys"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// pod is a gated member of group "g" with sluice's finalizer, created age
// seconds after epoch, of role hash role.
func pod(name, role string, age int, mutate ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: name, UID: types.UID("uid-" + name),
			CreationTimestamp: metav1.NewTime(epoch.Add(time.Duration(age) * time.Second)),
			Labels:            map[string]string{podkeys.QueueNameLabel: "lq", podkeys.PodGroupNameLabel: "g"},
			Annotations:       map[string]string{podkeys.PodGroupTotalCountAnnotation: "3", podkeys.RoleHashAnnotation: role},
			Finalizers:        []string{podkeys.ManagedFinalizer},
		},
		Spec: corev1.PodSpec{
			SchedulingGates: []corev1.PodSchedulingGate{{Name: podkeys.AdmissionGate}},
			Containers:      []corev1.Container{{Name: "main"}},
		},
	}
	for _, m := range mutate {
		m(p)
	}
	return p
}

func failed(at int) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodFailed
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			FinishedAt: metav1.NewTime(epoch.Add(time.Duration(at) * time.Second)),
		}}}}
	}
}

func succeeded(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }

// released: sluice's finalizer is off the pod.
func released(p *corev1.Pod) { p.Finalizers = nil }

// admittedIn marks the pod as ungated in the Workload of uid.
func admittedIn(uid string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Annotations[podkeys.WorkloadUIDAnnotation] = uid }
}

// reservedIn marks the pod as ungated in the Workload of uid under
// reservation id.
func reservedIn(uid, id string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Annotations[podkeys.WorkloadUIDAnnotation] = uid
		p.Annotations[podkeys.ReservationAnnotation] = id
	}
}
func terminating(p *corev1.Pod) {
	now := metav1.NewTime(epoch)
	p.DeletionTimestamp = &now
}
func running(p *corev1.Pod) {
	p.Spec.SchedulingGates = nil
	p.Spec.NodeName = "node"
	p.Status.Phase = corev1.PodRunning
}
func queue(q string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Labels[podkeys.QueueNameLabel] = q }
}
func priorityClass(c string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Labels[podkeys.PriorityClassLabel] = c }
}
func maxExecTime(seconds string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Labels[podkeys.MaxExecTimeLabel] = seconds }
}
func total(n string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Annotations[podkeys.PodGroupTotalCountAnnotation] = n }
}
func notRetriable(p *corev1.Pod) { p.Annotations[podkeys.RetriableInGroupAnnotation] = "false" }

func names(pods []*corev1.Pod) []string {
	out := []string{}
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return out
}

func TestAssemble(t *testing.T) {
	tests := []struct {
		name       string
		pods       []*corev1.Pod
		members    []string
		excess     []string
		missing    int32
		podSets    map[string]int32
		class      string // the workload's WorkloadPriorityClass
		seconds    int32  // the workload's maximum execution time; 0 unset
		errContain []string
	}{
		{
			name:    "complete: one pod set per role",
			pods:    []*corev1.Pod{pod("worker-1", "bbbb", 2), pod("master", "aaaa", 0), pod("worker-0", "bbbb", 1)},
			members: []string{"master", "worker-0", "worker-1"},
			podSets: map[string]int32{"aaaa": 1, "bbbb": 2},
		},
		{
			name:    "fewer pods than total: no workload yet",
			pods:    []*corev1.Pod{pod("a", "r", 0), pod("b", "r", 1)},
			members: []string{"a", "b"},
			missing: 1,
		},
		{
			name:    "failed pods do not count",
			pods:    []*corev1.Pod{pod("a", "r", 0), pod("b", "r", 1, failed(5)), pod("c", "r", 2)},
			members: []string{"a", "c"},
			missing: 1,
		},
		{
			name:    "excess: the youngest go first",
			pods:    []*corev1.Pod{pod("d", "r", 3), pod("a", "r", 0), pod("e", "r", 4), pod("b", "r", 1), pod("c", "r", 2)},
			members: []string{"a", "b", "c"},
			excess:  []string{"e", "d"},
			podSets: map[string]int32{"r": 3},
		},
		{
			name: "excess: ungated pods are kept before gated ones",
			pods: []*corev1.Pod{pod("old-gated", "r", 0), pod("a", "r", 1), pod("b", "r", 2),
				pod("young-running", "r", 9, running)},
			members: []string{"young-running", "old-gated", "a"},
			excess:  []string{"b"},
			podSets: map[string]int32{"r": 3},
		},
		{
			name: "a finished earlier run neither counts nor has to agree",
			pods: []*corev1.Pod{pod("old-0", "r", 0, running, succeeded, released, total("2")), pod("old-1", "r", 1, running, succeeded, released, total("2")),
				pod("a", "r", 10), pod("b", "r", 11), pod("c", "r", 12)},
			members: []string{"a", "b", "c"},
			podSets: map[string]int32{"r": 3},
		},
		{
			name:       "queues disagree",
			pods:       []*corev1.Pod{pod("a", "r", 0), pod("b", "r", 1, queue("other")), pod("c", "r", 2)},
			errContain: []string{podkeys.QueueNameLabel, `"lq" (a, c)`, `"other" (b)`},
		},
		{
			name: "the class and the time every pod names",
			pods: []*corev1.Pod{pod("a", "r", 0, priorityClass("urgent"), maxExecTime("600")),
				pod("b", "r", 1, priorityClass("urgent"), maxExecTime("600")), pod("c", "r", 2, priorityClass("urgent"), maxExecTime("600"))},
			members: []string{"a", "b", "c"},
			podSets: map[string]int32{"r": 3},
			class:   "urgent", seconds: 600,
		},
		{
			name:       "priority classes disagree",
			pods:       []*corev1.Pod{pod("a", "r", 0, priorityClass("urgent")), pod("b", "r", 1), pod("c", "r", 2, priorityClass("urgent"))},
			errContain: []string{podkeys.PriorityClassLabel, `"" (b)`, `"urgent" (a, c)`},
		},
		{
			name:       "maximum execution times disagree",
			pods:       []*corev1.Pod{pod("a", "r", 0, maxExecTime("60")), pod("b", "r", 1, maxExecTime("61")), pod("c", "r", 2, maxExecTime("60"))},
			errContain: []string{podkeys.MaxExecTimeLabel, `"60" (a, c)`, `"61" (b)`},
		},
		{
			name:       "a failed pod must agree too",
			pods:       []*corev1.Pod{pod("a", "r", 0), pod("b", "r", 1, failed(5), priorityClass("low")), pod("c", "r", 2), pod("d", "r", 3)},
			errContain: []string{podkeys.PriorityClassLabel, `"low" (b)`},
		},
		{
			name:       "total counts disagree",
			pods:       []*corev1.Pod{pod("a", "r", 0, total("2")), pod("b", "r", 1)},
			errContain: []string{podkeys.PodGroupTotalCountAnnotation, `"2" (a)`, `"3" (b)`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := Assemble("ns", "g", tt.pods, 0)
			if len(tt.errContain) > 0 {
				var mismatch *MismatchError
				if !errors.As(err, &mismatch) {
					t.Fatalf("err = %v, want a MismatchError", err)
				}
				for _, s := range tt.errContain {
					if !strings.Contains(err.Error(), s) {
						t.Fatalf("error %q does not say %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := names(a.Members); !slices.Equal(got, tt.members) {
				t.Fatalf("members %v, want %v", got, tt.members)
			}
			if got := names(a.Excess); !slices.Equal(got, append([]string{}, tt.excess...)) {
				t.Fatalf("excess %v, want %v", got, tt.excess)
			}
			if a.Missing != tt.missing || (a.Workload == nil) != (tt.podSets == nil) {
				t.Fatalf("missing %d, workload %v; want missing %d", a.Missing, a.Workload, tt.missing)
			}
			if tt.podSets == nil {
				return
			}
			got := map[string]int32{}
			for _, ps := range a.Workload.GetPodSets() {
				got[ps.GetName()] = ps.GetCount()
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.podSets) || a.Workload.GetRef().GetName() != "g" || a.Workload.GetQueueName() != "lq" {
				t.Fatalf("workload %v, want pod sets %v in queue lq", a.Workload, tt.podSets)
			}
			if len(a.Workload.GetOwners()) != 0 || a.Workload.GetPodGroup() != "g" {
				t.Fatalf("owners %v, pod group %q: want none, and the group's name", a.Workload.GetOwners(), a.Workload.GetPodGroup())
			}
			if a.Workload.GetWorkloadPriorityClass() != tt.class || a.Workload.GetMaximumExecutionTimeSeconds() != tt.seconds {
				t.Fatalf("priority class %q, maximum execution time %d; want %q and %d",
					a.Workload.GetWorkloadPriorityClass(), a.Workload.GetMaximumExecutionTimeSeconds(), tt.class, tt.seconds)
			}
		})
	}
}

func TestAssembleRefusesTooManyRoles(t *testing.T) {
	var pods []*corev1.Pod
	for i := range MaxRoles + 1 {
		pods = append(pods, pod(fmt.Sprintf("p%02d", i), fmt.Sprintf("role%02d", i), i, total(fmt.Sprint(MaxRoles+1))))
	}
	_, err := Assemble("ns", "g", pods, 0)
	var tooMany *TooManyRolesError
	if !errors.As(err, &tooMany) || tooMany.Roles != MaxRoles+1 || !strings.Contains(err.Error(), fmt.Sprint(MaxRoles)) {
		t.Fatalf("err = %v, want TooManyRolesError naming %d roles and the limit %d", err, MaxRoles+1, MaxRoles)
	}
}

func TestObserveAdmittedGroup(t *testing.T) {
	sets := map[string]int32{"m": 1, "w": 2}
	tests := []struct {
		name      string
		run       Run // Run{UID: "this"} when zero
		pods      []*corev1.Pod
		excess    []string
		replaced  []string
		missing   map[string]int32
		succeeded map[string]int32
		finished  bool
		success   bool
		message   string
	}{
		{
			name:    "running whole",
			pods:    []*corev1.Pod{pod("m", "m", 0, running), pod("w0", "w", 1, running), pod("w1", "w", 2, running)},
			missing: map[string]int32{},
		},
		{
			name: "a failed worker waits for its replacement",
			pods: []*corev1.Pod{pod("m", "m", 0, running), pod("w0", "w", 1, running, failed(10)),
				pod("w1", "w", 2, running)},
			missing: map[string]int32{"w": 1},
		},
		{
			name: "the replacement frees the pod that failed first",
			pods: []*corev1.Pod{pod("m", "m", 0, running), pod("w0", "w", 1, running, failed(20)),
				pod("w1", "w", 2, running, failed(10)), pod("w2", "w", 30), pod("w3", "w", 31, running)},
			replaced: []string{"w1", "w0"},
			missing:  map[string]int32{},
		},
		{
			name: "one replacement for two failures frees only the first",
			pods: []*corev1.Pod{pod("m", "m", 0, running), pod("w0", "w", 1, running, failed(20)),
				pod("w1", "w", 2, running, failed(10)), pod("w2", "w", 30)},
			replaced: []string{"w1"},
			missing:  map[string]int32{"w": 1},
		},
		{
			name: "excess per role after admission",
			pods: []*corev1.Pod{pod("m", "m", 0, running), pod("m2", "m", 5), pod("w0", "w", 1, running),
				pod("w1", "w", 2, running)},
			excess:  []string{"m2"},
			missing: map[string]int32{},
		},
		{
			name: "a replacement for a pod still terminating is not excess",
			pods: []*corev1.Pod{pod("m", "m", 0, running), pod("w0", "w", 1, running, terminating),
				pod("w1", "w", 2, running), pod("w2", "w", 30)},
			missing: map[string]int32{},
		},
		{
			name:    "a pod of a role the workload does not have is excess",
			pods:    []*corev1.Pod{pod("m", "m", 0, running), pod("w0", "w", 1, running), pod("w1", "w", 2, running), pod("x", "other", 3)},
			excess:  []string{"x"},
			missing: map[string]int32{},
		},
		{
			name: "succeeded pods are reclaimable",
			pods: []*corev1.Pod{pod("m", "m", 0, running), pod("w0", "w", 1, running, succeeded),
				pod("w1", "w", 2, running)},
			succeeded: map[string]int32{"w": 1},
			missing:   map[string]int32{},
		},
		{
			name: "all succeeded: finished, a success",
			pods: []*corev1.Pod{pod("m", "m", 0, succeeded), pod("w0", "w", 1, succeeded),
				pod("w1", "w", 2, succeeded)},
			succeeded: map[string]int32{"m": 1, "w": 2},
			missing:   map[string]int32{},
			finished:  true, success: true, message: "all 3 pods succeeded",
		},
		{
			name: "not retriable, nothing running: finished, a failure",
			pods: []*corev1.Pod{pod("m", "m", 0, succeeded), pod("w0", "w", 1, failed(10), notRetriable),
				pod("w1", "w", 2, succeeded)},
			succeeded: map[string]int32{"m": 1, "w": 1},
			missing:   map[string]int32{},
			finished:  true, message: "pod w0 failed and is not retriable",
		},
		{
			name: "an earlier run's pods are not this run's",
			pods: []*corev1.Pod{pod("old-m", "m", 0, running, succeeded, released, admittedIn("earlier")), pod("old-w", "w", 0, running, succeeded, released, admittedIn("earlier")),
				pod("m", "m", 10, running, admittedIn("this")), pod("w0", "w", 11, running, admittedIn("this")), pod("w1", "w", 12, running)},
			missing: map[string]int32{},
		},
		{
			name: "an evicted reservation's pods count neither as this one's nor toward its end",
			run:  Run{UID: "this", Reservation: "r2"},
			pods: []*corev1.Pod{pod("old-w0", "w", 0, running, succeeded, released, reservedIn("this", "r1")),
				pod("old-w1", "w", 1, running, succeeded, released, reservedIn("this", "r1")),
				pod("m", "m", 10, running, succeeded, reservedIn("this", "r2")), pod("w2", "w", 11, running, reservedIn("this", "r2")), pod("w3", "w", 12)},
			succeeded: map[string]int32{"m": 1},
			missing:   map[string]int32{},
		},
		{
			name: "a gated pod claiming another run is this run's: excess when its role is full",
			run:  Run{UID: "this", Reservation: "r2"},
			pods: []*corev1.Pod{pod("m", "m", 0, running, reservedIn("this", "r2")), pod("w0", "w", 1, running, reservedIn("this", "r2")),
				pod("w1", "w", 2, running, reservedIn("this", "r2")), pod("forged", "w", 3, reservedIn("forged", "forged")),
				pod("forged-uid", "w", 4, admittedIn("forged"))},
			excess:  []string{"forged-uid", "forged"},
			missing: map[string]int32{},
		},
		{
			name: "not retriable while others run: not finished yet",
			pods: []*corev1.Pod{pod("m", "m", 0, running), pod("w0", "w", 1, failed(10), notRetriable),
				pod("w1", "w", 2, running)},
			missing: map[string]int32{"w": 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run := tt.run
			if run == (Run{}) {
				run = Run{UID: "this"}
			}
			st, err := Observe(run, sets, RolesOf(tt.pods), tt.pods)
			if err != nil {
				t.Fatal(err)
			}
			if got := names(st.Excess); !slices.Equal(got, append([]string{}, tt.excess...)) {
				t.Fatalf("excess %v, want %v", got, tt.excess)
			}
			if got := names(st.Replaced); !slices.Equal(got, append([]string{}, tt.replaced...)) {
				t.Fatalf("replaced %v, want %v", got, tt.replaced)
			}
			if fmt.Sprint(st.Missing) != fmt.Sprint(tt.missing) {
				t.Fatalf("missing %v, want %v", st.Missing, tt.missing)
			}
			if tt.succeeded == nil {
				tt.succeeded = map[string]int32{}
			}
			if fmt.Sprint(st.Succeeded) != fmt.Sprint(tt.succeeded) {
				t.Fatalf("succeeded %v, want %v", st.Succeeded, tt.succeeded)
			}
			if st.Finished != tt.finished || st.Success != tt.success || !strings.Contains(st.Message, tt.message) {
				t.Fatalf("finished %v success %v %q; want %v %v %q", st.Finished, st.Success, st.Message, tt.finished, tt.success, tt.message)
			}
		})
	}
}

func TestNameList(t *testing.T) {
	var many []string
	for i := range 12 {
		many = append(many, fmt.Sprintf("p%d", i))
	}
	tests := []struct {
		names []string
		want  string
	}{
		{nil, ""},
		{[]string{"a", "b"}, "a, b"},
		{many[:10], "p0, p1, p2, p3, p4, p5, p6, p7, p8, p9"},
		{many, "p0, p1, p2, p3, p4, p5, p6, p7, p8, p9 and 2 more"},
	}
	for _, tt := range tests {
		if got := NameList(tt.names); got != tt.want {
			t.Errorf("NameList(%v) = %q, want %q", tt.names, got, tt.want)
		}
	}
}
