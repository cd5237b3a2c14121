package validate

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/sluice-dev/sluice/pkg/podgroup"
	"github.com/sluice-dev/sluice/pkg/podkeys"
)

func pod(labels, annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Labels: labels, Annotations: annotations}}
}

// want describes one expected error by its rendered form.
type want struct {
	typ    field.ErrorType
	field  string
	detail string
}

func check(t *testing.T, got field.ErrorList, wants []want) {
	t.Helper()
	if len(got) != len(wants) {
		t.Fatalf("got %d errors %v, want %d %v", len(got), got, len(wants), wants)
	}
	for i, w := range wants {
		if got[i].Type != w.typ || got[i].Field != w.field || !strings.Contains(got[i].Detail, w.detail) {
			t.Errorf("error %d = %q, want type %s field %s detail containing %q", i, got[i].Error(), w.typ, w.field, w.detail)
		}
	}
}

const (
	queueField = "metadata.labels[kueue.x-k8s.io/queue-name]"
	groupField = "metadata.labels[kueue.x-k8s.io/pod-group-name]"
	mngField   = "metadata.labels[kueue.x-k8s.io/managed]"
	countField = "metadata.annotations[kueue.x-k8s.io/pod-group-total-count]"
	retryField = "metadata.annotations[kueue.x-k8s.io/retriable-in-group]"
	roleField  = "metadata.labels[kueue.x-k8s.io/pod-group-role]"
	setsField  = "metadata.annotations[kueue.x-k8s.io/pod-group-sets]"
	classField = "metadata.labels[kueue.x-k8s.io/priority-class]"
	execField  = "metadata.labels[kueue.x-k8s.io/max-exec-time-seconds]"

	driverSets = `[{"name":"driver","count":1},{"name":"worker","count":3,"template":{"spec":{"containers":[{"name":"w"}]}}}]`
)

func TestCreate(t *testing.T) {
	tests := []struct {
		name        string
		labels      map[string]string
		annotations map[string]string
		gang        string // the PodGroup the pod names
		want        []want
	}{
		{name: "no keys"},
		{name: "queued single pod", labels: map[string]string{podkeys.QueueNameLabel: "team-a", podkeys.ManagedLabel: "true"}},
		{
			name:        "complete group",
			labels:      map[string]string{podkeys.QueueNameLabel: "q", podkeys.PodGroupNameLabel: "g.one"},
			annotations: map[string]string{podkeys.PodGroupTotalCountAnnotation: "3"},
		},
		{
			name:   "group without count",
			labels: map[string]string{podkeys.PodGroupNameLabel: "g"},
			want:   []want{{field.ErrorTypeRequired, countField, DetailGroupNeedsCount}},
		},
		{
			name:        "count without group",
			annotations: map[string]string{podkeys.PodGroupTotalCountAnnotation: "2"},
			want:        []want{{field.ErrorTypeRequired, groupField, DetailCountNeedsGroup}},
		},
		{
			name:        "group name not a subdomain",
			labels:      map[string]string{podkeys.PodGroupNameLabel: "Group_A"},
			annotations: map[string]string{podkeys.PodGroupTotalCountAnnotation: "2"},
			want:        []want{{field.ErrorTypeInvalid, groupField, DetailNotSubdomain}},
		},
		{
			name:        "count not an integer",
			labels:      map[string]string{podkeys.PodGroupNameLabel: "g"},
			annotations: map[string]string{podkeys.PodGroupTotalCountAnnotation: "two"},
			want:        []want{{field.ErrorTypeInvalid, countField, DetailCountNotInteger}},
		},
		{
			name:        "count zero",
			labels:      map[string]string{podkeys.PodGroupNameLabel: "g"},
			annotations: map[string]string{podkeys.PodGroupTotalCountAnnotation: "0"},
			want:        []want{{field.ErrorTypeInvalid, countField, DetailCountTooSmall}},
		},
		{
			name:        "count negative",
			labels:      map[string]string{podkeys.PodGroupNameLabel: "g"},
			annotations: map[string]string{podkeys.PodGroupTotalCountAnnotation: "-4"},
			want:        []want{{field.ErrorTypeInvalid, countField, DetailCountTooSmall}},
		},
		{
			name:        "count in a PodGroup's gang",
			labels:      map[string]string{podkeys.QueueNameLabel: "q"},
			annotations: map[string]string{podkeys.PodGroupTotalCountAnnotation: "3"},
			gang:        "trainer",
		},
		{
			name:        "declaring pod",
			labels:      map[string]string{podkeys.QueueNameLabel: "q", podkeys.PodGroupNameLabel: "spark"},
			annotations: map[string]string{podkeys.PodGroupSetsAnnotation: driverSets},
		},
		{
			name:   "worker of a declared group",
			labels: map[string]string{podkeys.QueueNameLabel: "q", podkeys.PodGroupNameLabel: "spark", podkeys.PodGroupRoleLabel: "worker"},
		},
		{
			name:   "role not a label",
			labels: map[string]string{podkeys.PodGroupNameLabel: "spark", podkeys.PodGroupRoleLabel: "Worker.1"},
			want:   []want{{field.ErrorTypeInvalid, roleField, DetailNotLabel}},
		},
		{
			name:        "declaration without group",
			annotations: map[string]string{podkeys.PodGroupSetsAnnotation: driverSets},
			want:        []want{{field.ErrorTypeRequired, groupField, DetailCountNeedsGroup}},
		},
		{
			name:        "declaration and count",
			labels:      map[string]string{podkeys.PodGroupNameLabel: "spark"},
			annotations: map[string]string{podkeys.PodGroupSetsAnnotation: driverSets, podkeys.PodGroupTotalCountAnnotation: "4"},
			want:        []want{{field.ErrorTypeForbidden, countField, DetailCountWithSets}},
		},
		{
			name:        "malformed declaration names the set and field",
			labels:      map[string]string{podkeys.PodGroupNameLabel: "spark"},
			annotations: map[string]string{podkeys.PodGroupSetsAnnotation: `[{"name":"driver","count":1},{"name":"worker","count":0}]`},
			want:        []want{{field.ErrorTypeInvalid, setsField + "[1].count", "must be at least 1"}},
		},
		{
			name:        "declaring pod names a role it cannot have",
			labels:      map[string]string{podkeys.PodGroupNameLabel: "spark", podkeys.PodGroupRoleLabel: "worker"},
			annotations: map[string]string{podkeys.PodGroupSetsAnnotation: driverSets},
			want:        []want{{field.ErrorTypeInvalid, roleField, "must have no template"}},
		},
		{
			name:   "queue name not a subdomain",
			labels: map[string]string{podkeys.QueueNameLabel: "Team A"},
			want:   []want{{field.ErrorTypeInvalid, queueField, DetailNotSubdomain}},
		},
		{
			name:   "empty queue name",
			labels: map[string]string{podkeys.QueueNameLabel: ""},
			want:   []want{{field.ErrorTypeInvalid, queueField, DetailNotSubdomain}},
		},
		{
			name:   "managed false",
			labels: map[string]string{podkeys.ManagedLabel: "false"},
			want:   []want{{field.ErrorTypeForbidden, mngField, DetailManagedValue}},
		},
		{
			name:   "every problem at once",
			labels: map[string]string{podkeys.PodGroupNameLabel: "BAD", podkeys.QueueNameLabel: "BAD", podkeys.ManagedLabel: "yes"},
			want: []want{
				{field.ErrorTypeRequired, countField, DetailGroupNeedsCount},
				{field.ErrorTypeInvalid, groupField, DetailNotSubdomain},
				{field.ErrorTypeInvalid, queueField, DetailNotSubdomain},
				{field.ErrorTypeForbidden, mngField, DetailManagedValue},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := pod(tc.labels, tc.annotations)
			if tc.gang != "" {
				p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: &tc.gang}
			}
			check(t, Create(p), tc.want)
		})
	}
}

func TestUpdateDeclaredGroup(t *testing.T) {
	driver := pod(map[string]string{podkeys.PodGroupNameLabel: "spark", podkeys.PodGroupRoleLabel: "driver"},
		map[string]string{podkeys.PodGroupSetsAnnotation: driverSets})
	worker := pod(map[string]string{podkeys.PodGroupNameLabel: "spark", podkeys.PodGroupRoleLabel: "worker"}, nil)
	story2 := pod(map[string]string{podkeys.PodGroupNameLabel: "g", podkeys.PodGroupRoleLabel: "a"},
		map[string]string{podkeys.PodGroupTotalCountAnnotation: "2"})
	tests := []struct {
		name   string
		old    *corev1.Pod
		change func(*corev1.Pod)
		want   []want
	}{
		{"worker changes role", worker, func(p *corev1.Pod) { p.Labels[podkeys.PodGroupRoleLabel] = "driver" },
			[]want{{field.ErrorTypeInvalid, roleField, DetailRoleImmutable}}},
		{"declaration changes", driver, func(p *corev1.Pod) { p.Annotations[podkeys.PodGroupSetsAnnotation] = `[{"name":"driver","count":2}]` },
			[]want{{field.ErrorTypeInvalid, setsField, DetailRoleImmutable}}},
		{"declaration removed", driver, func(p *corev1.Pod) { delete(p.Annotations, podkeys.PodGroupSetsAnnotation) },
			[]want{{field.ErrorTypeInvalid, setsField, DetailRoleImmutable}}},
		{"role of a group created beforehand may change", story2, func(p *corev1.Pod) { p.Labels[podkeys.PodGroupRoleLabel] = "b" }, nil},
		{"other labels may change", worker, func(p *corev1.Pod) { p.Labels["app"] = "x" }, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			updated := tc.old.DeepCopy()
			tc.change(updated)
			check(t, Update(tc.old, updated), tc.want)
		})
	}
}

func TestUpdate(t *testing.T) {
	gated := func(p *corev1.Pod) *corev1.Pod {
		p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "other"}, {Name: podkeys.AdmissionGate}}
		return p
	}
	phase := func(ph corev1.PodPhase) func(*corev1.Pod) *corev1.Pod {
		return func(p *corev1.Pod) *corev1.Pod { p.Status.Phase = ph; return p }
	}
	running := phase(corev1.PodRunning)
	q := func(name string) map[string]string { return map[string]string{podkeys.QueueNameLabel: name} }
	group := func(name string) map[string]string {
		return map[string]string{podkeys.QueueNameLabel: "q", podkeys.PodGroupNameLabel: name}
	}
	count := map[string]string{podkeys.PodGroupTotalCountAnnotation: "2"}
	retriable := func(v string) map[string]string { return map[string]string{podkeys.RetriableInGroupAnnotation: v} }
	managed := func(labels map[string]string) map[string]string {
		labels[podkeys.ManagedLabel] = podkeys.ManagedLabelValue
		return labels
	}

	tests := []struct {
		name string
		old  *corev1.Pod
		new  *corev1.Pod
		want []want
	}{
		{name: "queue change while gated", old: gated(pod(q("a"), nil)), new: pod(q("b"), nil)},
		{name: "queue change after success", old: phase(corev1.PodSucceeded)(pod(q("a"), nil)), new: pod(q("b"), nil)},
		{name: "queue change after failure", old: phase(corev1.PodFailed)(pod(q("a"), nil)), new: pod(q("b"), nil)},
		{
			name: "queue change while running",
			old:  running(pod(q("a"), nil)), new: running(pod(q("b"), nil)),
			want: []want{{field.ErrorTypeInvalid, queueField, DetailQueueImmutable}},
		},
		{
			name: "queue removed while running",
			old:  running(pod(q("a"), nil)), new: running(pod(nil, nil)),
			want: []want{{field.ErrorTypeInvalid, queueField, DetailQueueImmutable}},
		},
		{name: "unchanged running pod", old: running(pod(q("a"), nil)), new: running(pod(q("a"), nil))},
		{name: "group added", old: running(pod(q("q"), nil)), new: running(pod(group("g"), count))},
		{
			name: "group changed",
			old:  gated(pod(group("g"), count)), new: pod(group("h"), count),
			want: []want{{field.ErrorTypeInvalid, groupField, DetailGroupImmutable}},
		},
		{
			name: "group removed",
			old:  gated(pod(group("g"), count)), new: pod(q("q"), nil),
			want: []want{{field.ErrorTypeInvalid, groupField, DetailGroupImmutable}},
		},
		{name: "retriable false kept", old: pod(nil, retriable("false")), new: pod(nil, retriable("false"))},
		{name: "retriable set to false", old: pod(nil, nil), new: pod(nil, retriable("false"))},
		{name: "retriable true changed", old: pod(nil, retriable("true")), new: pod(nil, retriable("false"))},
		{
			name: "retriable false removed",
			old:  pod(nil, retriable("false")), new: pod(nil, nil),
			want: []want{{field.ErrorTypeForbidden, retryField, DetailRetriableFinal}},
		},
		{
			name: "retriable false flipped",
			old:  pod(nil, retriable("false")), new: pod(nil, retriable("true")),
			want: []want{{field.ErrorTypeForbidden, retryField, DetailRetriableFinal}},
		},
		{
			name: "managed label removed",
			old:  gated(pod(managed(q("a")), nil)), new: gated(pod(q("a"), nil)),
			want: []want{{field.ErrorTypeForbidden, mngField, DetailManagedRemoved}},
		},
		{
			name: "managed label removed with the queue while gated",
			old:  gated(pod(managed(q("a")), nil)), new: gated(pod(nil, nil)),
			want: []want{{field.ErrorTypeForbidden, mngField, DetailManagedRemoved}},
		},
		{
			name: "managed label removed after the pod finished",
			old:  phase(corev1.PodSucceeded)(pod(managed(q("a")), nil)), new: phase(corev1.PodSucceeded)(pod(q("a"), nil)),
			want: []want{{field.ErrorTypeForbidden, mngField, DetailManagedRemoved}},
		},
		{
			name: "managed label changed",
			old:  running(pod(managed(q("a")), nil)), new: running(pod(map[string]string{podkeys.QueueNameLabel: "a", podkeys.ManagedLabel: "false"}, nil)),
			want: []want{{field.ErrorTypeForbidden, mngField, DetailManagedValue}},
		},
		{name: "managed label kept", old: running(pod(managed(q("a")), nil)), new: running(pod(managed(q("a")), nil))},
		{
			// The grouper would take a pod sluice did not queue for one
			// it did.
			name: "managed label added", old: pod(q("a"), nil), new: pod(managed(q("a")), nil),
			want: []want{{field.ErrorTypeForbidden, mngField, DetailManagedAdded}},
		},
		{
			// A pod that never passed through sluice may carry a stray
			// value; removing it is how it gets valid again.
			name: "invalid managed value removed",
			old:  pod(map[string]string{podkeys.ManagedLabel: "false"}, nil), new: pod(nil, nil),
		},
		{
			name: "create rules apply on update",
			old:  pod(q("a"), nil), new: pod(map[string]string{podkeys.QueueNameLabel: "a", podkeys.ManagedLabel: "false"}, nil),
			want: []want{{field.ErrorTypeForbidden, mngField, DetailManagedValue}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			check(t, Update(tc.old, tc.new), tc.want)
		})
	}
}

func TestQueued(t *testing.T) {
	classes := map[string]bool{"urgent": true, "batch.low": true}
	tests := []struct {
		name    string
		labels  map[string]string
		asked   []string // the classes looked up
		lookup  error
		want    []want
		wantErr bool
	}{
		{name: "no keys"},
		{name: "a class that exists", labels: map[string]string{podkeys.PriorityClassLabel: "urgent"}, asked: []string{"urgent"}},
		{name: "a dotted class that exists", labels: map[string]string{podkeys.PriorityClassLabel: "batch.low"}, asked: []string{"batch.low"}},
		{
			name:   "a class that does not exist",
			labels: map[string]string{podkeys.PriorityClassLabel: "critical"},
			asked:  []string{"critical"},
			want: []want{{field.ErrorTypeInvalid, classField,
				`WorkloadPriorityClass "critical" does not exist: create it, or name one that does (kubectl get workloadpriorityclasses)`}},
		},
		{
			name:   "a class name that is no subdomain is not looked up",
			labels: map[string]string{podkeys.PriorityClassLabel: "Urgent_1"},
			want:   []want{{field.ErrorTypeInvalid, classField, DetailNotSubdomain}},
		},
		{
			name:   "an empty class name",
			labels: map[string]string{podkeys.PriorityClassLabel: ""},
			want:   []want{{field.ErrorTypeInvalid, classField, DetailNotSubdomain}},
		},
		{
			name:    "the lookup fails",
			labels:  map[string]string{podkeys.PriorityClassLabel: "urgent"},
			asked:   []string{"urgent"},
			lookup:  errors.New("API server unreachable"),
			wantErr: true,
		},
		{name: "one second", labels: map[string]string{podkeys.MaxExecTimeLabel: "1"}},
		{name: "the longest time", labels: map[string]string{podkeys.MaxExecTimeLabel: "2147483647"}},
		{name: "leading zeros", labels: map[string]string{podkeys.MaxExecTimeLabel: "0600"}},
		{
			name:   "zero seconds",
			labels: map[string]string{podkeys.MaxExecTimeLabel: "0"},
			want:   []want{{field.ErrorTypeInvalid, execField, DetailMaxExecTimeNotPositive}},
		},
		{
			name:   "negative",
			labels: map[string]string{podkeys.MaxExecTimeLabel: "-5"},
			want:   []want{{field.ErrorTypeInvalid, execField, DetailMaxExecTimeNotPositive}},
		},
		{
			name:   "beyond an int32",
			labels: map[string]string{podkeys.MaxExecTimeLabel: "2147483648"},
			want:   []want{{field.ErrorTypeInvalid, execField, DetailMaxExecTimeNotPositive}},
		},
		{
			name:   "a duration",
			labels: map[string]string{podkeys.MaxExecTimeLabel: "1h"},
			want:   []want{{field.ErrorTypeInvalid, execField, DetailMaxExecTimeNotPositive}},
		},
		{
			name:   "a fraction",
			labels: map[string]string{podkeys.MaxExecTimeLabel: "1.5"},
			want:   []want{{field.ErrorTypeInvalid, execField, DetailMaxExecTimeNotPositive}},
		},
		{
			name:   "empty",
			labels: map[string]string{podkeys.MaxExecTimeLabel: ""},
			want:   []want{{field.ErrorTypeInvalid, execField, DetailMaxExecTimeNotPositive}},
		},
		{
			name:   "both wrong at once",
			labels: map[string]string{podkeys.PriorityClassLabel: "missing", podkeys.MaxExecTimeLabel: "soon"},
			asked:  []string{"missing"},
			want: []want{
				{field.ErrorTypeInvalid, classField, `WorkloadPriorityClass "missing" does not exist`},
				{field.ErrorTypeInvalid, execField, DetailMaxExecTimeNotPositive},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var asked []string
			exists := func(name string) (bool, error) {
				asked = append(asked, name)
				return classes[name], tc.lookup
			}
			got, err := Queued(pod(tc.labels, nil), exists)
			if fmt.Sprint(asked) != fmt.Sprint(tc.asked) {
				t.Errorf("classes looked up = %v, want %v", asked, tc.asked)
			}
			if tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), "urgent") {
					t.Fatalf("Queued error = %v, want one naming the class", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Queued: %v", err)
			}
			check(t, got, tc.want)
		})
	}
}

// The priority class and the maximum execution time of a pod sluice
// queued are fixed at its creation; a pod sluice does not manage may
// change them freely.
func TestUpdateFixedAtCreation(t *testing.T) {
	labels := func(managed bool, kv ...string) map[string]string {
		m := map[string]string{podkeys.QueueNameLabel: "q"}
		if managed {
			m[podkeys.ManagedLabel] = podkeys.ManagedLabelValue
		}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	class, exec := podkeys.PriorityClassLabel, podkeys.MaxExecTimeLabel
	tests := []struct {
		name     string
		old, new map[string]string
		want     []want
	}{
		{name: "both kept", old: labels(true, class, "urgent", exec, "60"), new: labels(true, class, "urgent", exec, "60")},
		{
			name: "class added", old: labels(true), new: labels(true, class, "urgent"),
			want: []want{{field.ErrorTypeInvalid, classField, DetailPriorityClassImmutable}},
		},
		{
			name: "class changed", old: labels(true, class, "low"), new: labels(true, class, "urgent"),
			want: []want{{field.ErrorTypeInvalid, classField, DetailPriorityClassImmutable}},
		},
		{
			name: "class removed", old: labels(true, class, "low"), new: labels(true),
			want: []want{{field.ErrorTypeForbidden, classField, DetailPriorityClassImmutable}},
		},
		{
			name: "class emptied", old: labels(true, class, "low"), new: labels(true, class, ""),
			want: []want{{field.ErrorTypeInvalid, classField, DetailPriorityClassImmutable}},
		},
		{
			name: "time added", old: labels(true), new: labels(true, exec, "60"),
			want: []want{{field.ErrorTypeInvalid, execField, DetailMaxExecTimeImmutable}},
		},
		{
			name: "time changed", old: labels(true, exec, "60"), new: labels(true, exec, "3600"),
			want: []want{{field.ErrorTypeInvalid, execField, DetailMaxExecTimeImmutable}},
		},
		{
			name: "time removed", old: labels(true, exec, "60"), new: labels(true),
			want: []want{{field.ErrorTypeForbidden, execField, DetailMaxExecTimeImmutable}},
		},
		{
			name: "both changed", old: labels(true, class, "low", exec, "60"), new: labels(true, class, "urgent", exec, "61"),
			want: []want{
				{field.ErrorTypeInvalid, classField, DetailPriorityClassImmutable},
				{field.ErrorTypeInvalid, execField, DetailMaxExecTimeImmutable},
			},
		},
		{name: "a pod sluice did not queue changes its class", old: labels(false, class, "low"), new: labels(false, class, "Anything_Goes")},
		{name: "a pod sluice did not queue changes its time", old: labels(false, exec, "60"), new: labels(false)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			check(t, Update(pod(tc.old, nil), pod(tc.new, nil)), tc.want)
		})
	}
}

func TestSluiceKeys(t *testing.T) {
	const (
		tp            = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
		traceField    = "metadata.annotations[sluice.dev/traceparent]"
		uidField      = "metadata.annotations[sluice.dev/workload-uid]"
		workloadField = "metadata.annotations[sluice.dev/workload]"
		groupLabel    = "metadata.labels[sluice.dev/pod-group]"
		otherLabel    = "metadata.labels[sluice.dev/x]"
		forbidden     = field.ErrorTypeForbidden
	)
	tests := []struct {
		name         string
		labels       map[string]string
		annotations  map[string]string
		traceStamped bool
		want         []want
	}{
		{name: "no keys"},
		{
			name:        "keys of other owners, subdomains of sluice.dev included",
			labels:      map[string]string{"nodepool.sluice.dev/pool": "a", "app": "x", podkeys.QueueNameLabel: "q"},
			annotations: map[string]string{"kwok.sluice.dev/run-for": "1s", "example.com/sluice.dev/x": "y"},
		},
		{
			name:        "a forged workload uid",
			annotations: map[string]string{podkeys.WorkloadUIDAnnotation: "forged"},
			want:        []want{{forbidden, uidField, DetailSluiceKey}},
		},
		{
			name:         "any key but the trace context is refused, stamped or not",
			labels:       map[string]string{"sluice.dev/x": "y", "sluice.dev/pod-group": "g"},
			annotations:  map[string]string{podkeys.WorkloadAnnotation: "w", podkeys.WorkloadUIDAnnotation: "u", podkeys.TraceparentAnnotation: tp},
			traceStamped: true,
			want: []want{
				{forbidden, groupLabel, DetailSluiceKey},
				{forbidden, otherLabel, DetailSluiceKey},
				{forbidden, workloadField, DetailSluiceKey},
				{forbidden, uidField, DetailSluiceKey},
			},
		},
		{
			name:        "a trace context the user wrote",
			annotations: map[string]string{podkeys.TraceparentAnnotation: tp},
			want:        []want{{forbidden, traceField, DetailSluiceKey}},
		},
		{
			name:         "a trace context an earlier invocation stamped",
			annotations:  map[string]string{podkeys.TraceparentAnnotation: tp},
			traceStamped: true,
		},
		{
			name:         "a trace context as a label is never sluice's",
			labels:       map[string]string{podkeys.TraceparentAnnotation: "x"},
			traceStamped: true,
			want:         []want{{forbidden, "metadata.labels[sluice.dev/traceparent]", DetailSluiceKey}},
		},
		{
			name:        "the bare prefix is sluice's too",
			annotations: map[string]string{"sluice.dev/": "x"},
			want:        []want{{forbidden, "metadata.annotations[sluice.dev/]", DetailSluiceKey}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			check(t, SluiceKeys(pod(tc.labels, tc.annotations), tc.traceStamped), tc.want)
		})
	}
}

func TestReason(t *testing.T) {
	tests := []struct {
		err  *field.Error
		want string
	}{
		{field.Required(totalCountPath, ""), "Required:pod-group-total-count"},
		{field.Invalid(queueNamePath, "x", ""), "Invalid:queue-name"},
		{field.Forbidden(managedPath, ""), "Forbidden:managed"},
		{field.Invalid(priorityClassPath, "x", ""), "Invalid:priority-class"},
		{field.Invalid(maxExecTimePath, "x", ""), "Invalid:max-exec-time-seconds"},
		{field.Forbidden(annotationsPath.Key(podkeys.WorkloadUIDAnnotation), DetailSluiceKey), "Forbidden:sluice.dev"},
		{field.Forbidden(labelsPath.Key("sluice.dev/any-name-a-user-picks"), DetailSluiceKey), "Forbidden:sluice.dev"},
	}
	for _, tc := range tests {
		if got := Reason(tc.err); got != tc.want {
			t.Errorf("Reason(%q) = %q, want %q", tc.err.Error(), got, tc.want)
		}
	}
}

func TestWorker(t *testing.T) {
	worker := func(name, role string) *corev1.Pod {
		p := pod(map[string]string{podkeys.PodGroupNameLabel: "spark", podkeys.PodGroupRoleLabel: role}, nil)
		p.Name = name
		return p
	}
	declaringPod := worker("driver-2", "driver")
	declaringPod.Annotations = map[string]string{podkeys.PodGroupSetsAnnotation: driverSets}
	declared, errs := podgroup.ParseSets(driverSets)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	names := func(names ...string) func() []string { return func() []string { return names } }
	tests := []struct {
		name  string
		pod   *corev1.Pod
		group Group
		want  []want
	}{
		{"room in its role", worker("w3", "worker"), Group{Sets: declared, InRole: 2}, nil},
		{"role full", worker("w4", "worker"), Group{Sets: declared, InRole: 3, NamesInRole: names("w3", "w1", "w2")},
			[]want{{field.ErrorTypeForbidden, roleField, "group spark declares 3 pods of role worker and has 3 already (w1, w2, w3)"}}},
		{"role over full", worker("w5", "worker"), Group{Sets: declared, InRole: 4, NamesInRole: names("w1", "w2", "w3", "w4")},
			[]want{{field.ErrorTypeForbidden, roleField, "group spark declares 3 pods of role worker and has 4 already (w1, w2, w3, w4)"}}},
		{"a pod left the full role before its names were read", worker("w4", "worker"), Group{Sets: declared, InRole: 3, NamesInRole: names("w1", "w2")}, nil},
		{"role not declared", worker("x", "executor"), Group{Sets: declared},
			[]want{{field.ErrorTypeNotSupported, roleField, `supported values: "driver", "worker"`}}},
		{"driver not seen yet", worker("x", "executor"), Group{InRole: 7}, nil},
		{"the declaring pod itself is not judged", declaringPod, Group{Sets: declared, InRole: 1}, nil},
		{"a pod of a group created beforehand is not judged", func() *corev1.Pod {
			p := worker("w4", "worker")
			p.Annotations = map[string]string{podkeys.PodGroupTotalCountAnnotation: "3"}
			return p
		}(), Group{Sets: declared, InRole: 3}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.group.NamesInRole == nil {
				tc.group.NamesInRole = func() []string {
					t.Error("NamesInRole called without refusing")
					return nil
				}
			}
			check(t, Worker(tc.pod, tc.group), tc.want)
		})
	}
}

func TestCounts(t *testing.T) {
	now := metav1.Now()
	tests := []struct {
		name      string
		phase     corev1.PodPhase
		finalizer bool
		deleting  bool
		node      string
		want      bool
	}{
		{name: "waiting", finalizer: true, want: true},
		{name: "running", phase: corev1.PodRunning, finalizer: true, node: "n", want: true},
		{name: "succeeded and still accounted for", phase: corev1.PodSucceeded, finalizer: true, want: true},
		{name: "failed", phase: corev1.PodFailed, finalizer: true},
		{name: "succeeded and released", phase: corev1.PodSucceeded},
		{name: "deleted before it reached a node", finalizer: true, deleting: true},
		{name: "deleted on its node", phase: corev1.PodRunning, finalizer: true, deleting: true, node: "n", want: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := pod(nil, nil)
			p.Status.Phase = tc.phase
			p.Spec.NodeName = tc.node
			if tc.finalizer {
				p.Finalizers = []string{podkeys.ManagedFinalizer}
			}
			if tc.deleting {
				p.DeletionTimestamp = &now
			}
			if got := Counts(p); got != tc.want {
				t.Errorf("Counts = %v, want %v", got, tc.want)
			}
		})
	}
}
