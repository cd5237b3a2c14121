package mutate

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	jsonpatchapply "github.com/evanphx/json-patch/v5"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/pkg/rolehash"
)

const traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

func newPod(labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name:      "main",
			Image:     "app",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}},
		}}},
	}
}

func TestDecideByOwnerAndPreset(t *testing.T) {
	owned := func(apiVersion, kind string, controller bool) *corev1.Pod {
		p := newPod(map[string]string{podkeys.QueueNameLabel: "q"})
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: "owner", UID: "u", Controller: &controller}}
		return p
	}
	jobOnly := []schema.GroupKind{{Group: "batch", Kind: "Job"}}
	tests := []struct {
		name string
		pod  *corev1.Pod
		// managed by preset in effect: alone, beside-kueue with the
		// built-in list, beside-kueue with --kueue-owners=batch/Job.
		alone, beside, besideJobOnly bool
	}{
		{"Job", owned("batch/v1", "Job", true), true, false, false},
		{"JobSet", owned("jobset.x-k8s.io/v1alpha2", "JobSet", true), true, false, true},
		{"ReplicaSet", owned("apps/v1", "ReplicaSet", true), true, false, true},
		{"StatefulSet", owned("apps/v1", "StatefulSet", true), true, false, true},
		{"RayCluster", owned("ray.io/v1", "RayCluster", true), true, false, true},
		{"a pod without owner", newPod(map[string]string{podkeys.QueueNameLabel: "q"}), true, true, true},
		{"a Spark executor controlled by its driver pod", owned("v1", "Pod", true), true, true, true},
		{"a Job that owns without controlling", owned("batch/v1", "Job", false), true, true, true},
		{"a kind of the same name in another group", owned("example.com/v1", "Job", true), true, true, true},
	}
	for _, tc := range tests {
		for _, preset := range []struct {
			name    string
			left    []schema.GroupKind
			managed bool
		}{
			{"alone", nil, tc.alone},
			{"beside-kueue", KueueOwners, tc.beside},
			{"beside-kueue batch/Job", jobOnly, tc.besideJobOnly},
		} {
			t.Run(tc.name+"/"+preset.name, func(t *testing.T) {
				got, err := Decide(tc.pod, preset.left, nil)
				if err != nil || got.Managed() != preset.managed {
					t.Fatalf("Decide = %+v, %v; want managed %v", got, err, preset.managed)
				}
				if got.LeftToKueue == preset.managed {
					t.Errorf("LeftToKueue = %v, want %v", got.LeftToKueue, !preset.managed)
				}
				if preset.managed && got.Queue != "q" {
					t.Errorf("queue = %q, want q", got.Queue)
				}
			})
		}
	}
}

func TestPresetInEffect(t *testing.T) {
	tests := []struct {
		preset    Preset
		kueue     bool
		wantInUse Preset
	}{
		{PresetAuto, false, PresetAlone},
		{PresetAuto, true, PresetBesideKueue},
		{PresetAlone, true, PresetAlone},
		{PresetAlone, false, PresetAlone},
		{PresetBesideKueue, false, PresetBesideKueue},
		{PresetBesideKueue, true, PresetBesideKueue},
	}
	for _, tc := range tests {
		if got := tc.preset.InEffect(tc.kueue); got != tc.wantInUse {
			t.Errorf("%s.InEffect(kueue installed %v) = %s, want %s", tc.preset, tc.kueue, got, tc.wantInUse)
		}
	}
	for _, p := range Presets {
		if got, err := ParsePreset(string(p)); err != nil || got != p {
			t.Errorf("ParsePreset(%q) = %q, %v", p, got, err)
		}
	}
	if _, err := ParsePreset("kueue"); err == nil || !strings.Contains(err.Error(), "--owners") || !strings.Contains(err.Error(), "beside-kueue") {
		t.Errorf("ParsePreset(kueue) error = %v, want one naming --owners and the presets", err)
	}
}

func TestParseKinds(t *testing.T) {
	got, err := ParseKinds(" batch/Job, kubeflow.org/PyTorchJob,/ReplicationController ")
	want := []schema.GroupKind{{Group: "batch", Kind: "Job"}, {Group: "kubeflow.org", Kind: "PyTorchJob"}, {Kind: "ReplicationController"}}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("ParseKinds = %v, %v; want %v", got, err, want)
	}
	if FormatKinds(want) != "batch/Job,kubeflow.org/PyTorchJob,/ReplicationController" {
		t.Errorf("FormatKinds = %q", FormatKinds(want))
	}
	for _, bad := range []string{"Job", "batch/"} {
		if _, err := ParseKinds(bad); err == nil || !strings.Contains(err.Error(), "group/Kind") {
			t.Errorf("ParseKinds(%q) error = %v, want one naming the form group/Kind", bad, err)
		}
	}
	if got, err := ParseKinds(""); err != nil || len(got) != 0 {
		t.Errorf("ParseKinds(\"\") = %v, %v; want nothing", got, err)
	}
}

func TestDecide(t *testing.T) {
	errLookup := errors.New("cache down")
	tests := []struct {
		name string
		// labels of the pod; optedIn: its namespace opted in to defaulting.
		labels     map[string]string
		optedIn    bool
		exists     bool
		lookupErr  error
		want       Decision
		wantLookup bool
		wantErr    bool
	}{
		{name: "own queue", labels: map[string]string{podkeys.QueueNameLabel: "q"}, want: Decision{Queue: "q"}},
		{name: "own queue wins over default", labels: map[string]string{podkeys.QueueNameLabel: "q"}, optedIn: true, exists: true, want: Decision{Queue: "q"}},
		{name: "no queue, not opted in, default exists", exists: true},
		{name: "no queue, opted in, no default", optedIn: true, wantLookup: true},
		{name: "no queue, opted in, default exists", optedIn: true, exists: true, wantLookup: true, want: Decision{Queue: DefaultQueue, Defaulted: true}},
		{name: "lookup fails", optedIn: true, lookupErr: errLookup, wantLookup: true, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			looked := false
			var lookup func() (bool, error)
			if tc.optedIn {
				lookup = func() (bool, error) { looked = true; return tc.exists, tc.lookupErr }
			}
			got, err := Decide(newPod(tc.labels), nil, lookup)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Decide error = %v, want error %v", err, tc.wantErr)
			}
			if tc.wantErr && !errors.Is(err, errLookup) {
				t.Errorf("Decide error = %v, want it to wrap %v", err, errLookup)
			}
			if got != tc.want {
				t.Errorf("Decide = %+v, want %+v", got, tc.want)
			}
			if looked != tc.wantLookup {
				t.Errorf("looked up default queue = %v, want %v", looked, tc.wantLookup)
			}
			if got.Managed() != (tc.want.Queue != "") {
				t.Errorf("Managed() = %v for %+v", got.Managed(), got)
			}
		})
	}
}

// apply runs the patch against the pod's JSON, as the API server does.
func apply(t *testing.T, pod *corev1.Pod, d Decision) *corev1.Pod {
	t.Helper()
	ops, err := Patch(pod, d, traceparent)
	if err != nil {
		t.Fatalf("Patch: %v", err)
	}
	raw, err := json.Marshal(ops)
	if err != nil {
		t.Fatalf("encode patch: %v", err)
	}
	patch, err := jsonpatchapply.DecodePatch(raw)
	if err != nil {
		t.Fatalf("decode patch %s: %v", raw, err)
	}
	doc, err := json.Marshal(pod)
	if err != nil {
		t.Fatalf("encode pod: %v", err)
	}
	patched, err := patch.Apply(doc)
	if err != nil {
		t.Fatalf("apply patch %s: %v", raw, err)
	}
	out := &corev1.Pod{}
	if err := json.Unmarshal(patched, out); err != nil {
		t.Fatalf("decode patched pod: %v", err)
	}
	return out
}

func TestPatch(t *testing.T) {
	hash, err := rolehash.Compute(&newPod(nil).Spec)
	if err != nil {
		t.Fatalf("Compute: %v", err)
	}
	tests := []struct {
		name     string
		pod      func() *corev1.Pod
		decision Decision
		check    func(t *testing.T, got *corev1.Pod)
	}{
		{
			name:     "bare pod gets every mark",
			pod:      func() *corev1.Pod { return newPod(map[string]string{podkeys.QueueNameLabel: "q"}) },
			decision: Decision{Queue: "q"},
			check: func(t *testing.T, got *corev1.Pod) {
				wantLabels := map[string]string{podkeys.QueueNameLabel: "q", podkeys.ManagedLabel: "true"}
				if !equality.Semantic.DeepEqual(got.Labels, wantLabels) {
					t.Errorf("labels = %v, want %v", got.Labels, wantLabels)
				}
				wantAnn := map[string]string{podkeys.RoleHashAnnotation: hash, podkeys.TraceparentAnnotation: traceparent}
				if !equality.Semantic.DeepEqual(got.Annotations, wantAnn) {
					t.Errorf("annotations = %v, want %v", got.Annotations, wantAnn)
				}
				if want := []string{podkeys.ManagedFinalizer}; !equality.Semantic.DeepEqual(got.Finalizers, want) {
					t.Errorf("finalizers = %v, want %v", got.Finalizers, want)
				}
				if want := []corev1.PodSchedulingGate{{Name: podkeys.AdmissionGate}}; !equality.Semantic.DeepEqual(got.Spec.SchedulingGates, want) {
					t.Errorf("gates = %v, want %v", got.Spec.SchedulingGates, want)
				}
			},
		},
		{
			name:     "default queue is set",
			pod:      func() *corev1.Pod { return newPod(map[string]string{"app": "x"}) },
			decision: Decision{Queue: DefaultQueue, Defaulted: true},
			check: func(t *testing.T, got *corev1.Pod) {
				want := map[string]string{"app": "x", podkeys.QueueNameLabel: DefaultQueue, podkeys.ManagedLabel: "true"}
				if !equality.Semantic.DeepEqual(got.Labels, want) {
					t.Errorf("labels = %v, want %v", got.Labels, want)
				}
			},
		},
		{
			name: "other gates and finalizers are kept, ours appended",
			pod: func() *corev1.Pod {
				p := newPod(map[string]string{podkeys.QueueNameLabel: "q"})
				p.Finalizers = []string{"example.com/keep"}
				p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/gate"}}
				return p
			},
			decision: Decision{Queue: "q"},
			check: func(t *testing.T, got *corev1.Pod) {
				wantGates := []corev1.PodSchedulingGate{{Name: "example.com/gate"}, {Name: podkeys.AdmissionGate}}
				if !equality.Semantic.DeepEqual(got.Spec.SchedulingGates, wantGates) {
					t.Errorf("gates = %v, want %v", got.Spec.SchedulingGates, wantGates)
				}
				wantFin := []string{"example.com/keep", podkeys.ManagedFinalizer}
				if !equality.Semantic.DeepEqual(got.Finalizers, wantFin) {
					t.Errorf("finalizers = %v, want %v", got.Finalizers, wantFin)
				}
			},
		},
		{
			name: "gate and finalizer are added only once",
			pod: func() *corev1.Pod {
				p := newPod(map[string]string{podkeys.QueueNameLabel: "q", podkeys.ManagedLabel: "true"})
				p.Finalizers = []string{podkeys.ManagedFinalizer}
				p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: podkeys.AdmissionGate}, {Name: "example.com/gate"}}
				return p
			},
			decision: Decision{Queue: "q"},
			check: func(t *testing.T, got *corev1.Pod) {
				wantGates := []corev1.PodSchedulingGate{{Name: podkeys.AdmissionGate}, {Name: "example.com/gate"}}
				if !equality.Semantic.DeepEqual(got.Spec.SchedulingGates, wantGates) {
					t.Errorf("gates = %v, want %v", got.Spec.SchedulingGates, wantGates)
				}
				if want := []string{podkeys.ManagedFinalizer}; !equality.Semantic.DeepEqual(got.Finalizers, want) {
					t.Errorf("finalizers = %v, want %v", got.Finalizers, want)
				}
			},
		},
		{
			name: "a role hash the user chose is replaced",
			pod: func() *corev1.Pod {
				p := newPod(map[string]string{podkeys.QueueNameLabel: "q"})
				p.Annotations = map[string]string{podkeys.RoleHashAnnotation: "aaaaaaaa", "note": "x"}
				return p
			},
			decision: Decision{Queue: "q"},
			check: func(t *testing.T, got *corev1.Pod) {
				want := map[string]string{podkeys.RoleHashAnnotation: hash, "note": "x", podkeys.TraceparentAnnotation: traceparent}
				if !equality.Semantic.DeepEqual(got.Annotations, want) {
					t.Errorf("annotations = %v, want %v", got.Annotations, want)
				}
			},
		},
		{
			name: "an empty role hash is replaced",
			pod: func() *corev1.Pod {
				p := newPod(map[string]string{podkeys.QueueNameLabel: "q"})
				p.Annotations = map[string]string{podkeys.RoleHashAnnotation: ""}
				return p
			},
			decision: Decision{Queue: "q"},
			check: func(t *testing.T, got *corev1.Pod) {
				if h := got.Annotations[podkeys.RoleHashAnnotation]; h != hash {
					t.Errorf("role hash = %q, want %q", h, hash)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.check(t, apply(t, tc.pod(), tc.decision))
		})
	}
}

func TestPatchLabelsTheDeclaringPodsRole(t *testing.T) {
	const sets = `[{"name":"driver","count":1},{"name":"worker","count":3,"template":{"spec":{"containers":[{"name":"w"}]}}}]`
	declaring := func(labels map[string]string) *corev1.Pod {
		p := newPod(labels)
		p.Annotations = map[string]string{podkeys.PodGroupSetsAnnotation: sets}
		return p
	}
	tests := []struct {
		name string
		pod  *corev1.Pod
		want string // the role label after the patch; "-" for none
	}{
		{"declaring pod gets the set without a template",
			declaring(map[string]string{podkeys.QueueNameLabel: "q", podkeys.PodGroupNameLabel: "spark"}), "driver"},
		{"a role it names is kept",
			declaring(map[string]string{podkeys.QueueNameLabel: "q", podkeys.PodGroupNameLabel: "spark", podkeys.PodGroupRoleLabel: "driver"}), "driver"},
		{"a worker is left as it is",
			newPod(map[string]string{podkeys.QueueNameLabel: "q", podkeys.PodGroupNameLabel: "spark", podkeys.PodGroupRoleLabel: "worker"}), "worker"},
		{"a single pod gets no role",
			newPod(map[string]string{podkeys.QueueNameLabel: "q"}), "-"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := apply(t, tc.pod, Decision{Queue: "q"})
			role, ok := got.Labels[podkeys.PodGroupRoleLabel]
			if !ok {
				role = "-"
			}
			if role != tc.want {
				t.Errorf("role label = %q, want %q", role, tc.want)
			}
		})
	}
}

func TestPatchIsIdempotent(t *testing.T) {
	once := apply(t, newPod(map[string]string{podkeys.QueueNameLabel: "q"}), Decision{Queue: "q"})
	ops, err := Patch(once, Decision{Queue: "q"}, traceparent)
	if err != nil {
		t.Fatalf("Patch: %v", err)
	}
	if len(ops) != 0 {
		t.Errorf("second patch = %+v, want none: every mark is present", ops)
	}
	twice := apply(t, once, Decision{Queue: "q"})
	if !equality.Semantic.DeepEqual(once, twice) {
		t.Errorf("patching twice changed the pod:\n%+v\n%+v", once, twice)
	}
}

// The role hash is the webhook's alone: a value the pod carries is
// replaced by one operation unless it is the computed one, which a
// reinvocation finds and leaves alone.
func TestPatchRoleHashOperation(t *testing.T) {
	hash, err := rolehash.Compute(&newPod(nil).Spec)
	if err != nil {
		t.Fatalf("Compute: %v", err)
	}
	const path = "/metadata/annotations/kueue.x-k8s.io~1role-hash"
	tests := []struct {
		name    string
		carried map[string]string // the pod's annotations
		wantOps []string          // operations on path
	}{
		{name: "chosen by the user", carried: map[string]string{podkeys.RoleHashAnnotation: "aaaaaaaa"}, wantOps: []string{"replace"}},
		{name: "missing among other annotations", carried: map[string]string{"note": "x"}, wantOps: []string{"add"}},
		{name: "the computed one", carried: map[string]string{podkeys.RoleHashAnnotation: hash}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newPod(map[string]string{podkeys.QueueNameLabel: "q"})
			p.Annotations = tc.carried
			ops, err := Patch(p, Decision{Queue: "q"}, "")
			if err != nil {
				t.Fatalf("Patch: %v", err)
			}
			var got []string
			for _, op := range ops {
				if op.Path == path {
					got = append(got, op.Operation)
					if op.Value != hash {
						t.Errorf("%s %s to %v, want %q", op.Operation, path, op.Value, hash)
					}
				}
			}
			if !slices.Equal(got, tc.wantOps) {
				t.Errorf("operations on %s = %v, want %v", path, got, tc.wantOps)
			}
		})
	}
}

func TestPatchReplacesTraceparent(t *testing.T) {
	const other = "00-11111111111111111111111111111111-2222222222222222-01"
	once := apply(t, newPod(map[string]string{podkeys.QueueNameLabel: "q"}), Decision{Queue: "q"})
	ops, err := Patch(once, Decision{Queue: "q"}, other)
	if err != nil {
		t.Fatalf("Patch: %v", err)
	}
	if len(ops) != 1 || ops[0].Operation != "replace" || ops[0].Path != "/metadata/annotations/sluice.dev~1traceparent" || ops[0].Value != other {
		t.Errorf("patch = %+v, want only the new traceparent replacing the old", ops)
	}
}

func TestPatchWithoutTraceparent(t *testing.T) {
	ops, err := Patch(newPod(nil), Decision{Queue: DefaultQueue, Defaulted: true}, "")
	if err != nil {
		t.Fatalf("Patch: %v", err)
	}
	for _, op := range ops {
		if m, ok := op.Value.(map[string]string); ok {
			if _, found := m[podkeys.TraceparentAnnotation]; found {
				t.Errorf("patch stamps an empty trace context: %+v", op)
			}
		}
	}
}

func TestSchedulingGroup(t *testing.T) {
	group := func(annotations map[string]string) *corev1.Pod {
		p := newPod(map[string]string{podkeys.QueueNameLabel: "q", podkeys.PodGroupNameLabel: "train"})
		p.Annotations = annotations
		return p
	}
	counted := map[string]string{podkeys.PodGroupTotalCountAnnotation: "3"}
	named := func(name string) *corev1.Pod {
		p := group(counted)
		p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: &name}
		return p
	}
	tests := []struct {
		name string
		pod  *corev1.Pod
		want string // the podGroupName after the patch; empty: no patch
	}{
		{name: "group with a total count", pod: group(counted), want: "train"},
		{name: "group declared with pod-group-sets", pod: group(map[string]string{podkeys.PodGroupSetsAnnotation: `[{"name":"driver","count":1}]`})},
		{name: "single pod", pod: newPod(map[string]string{podkeys.QueueNameLabel: "q"})},
		{name: "total count without a group", pod: func() *corev1.Pod { p := newPod(nil); p.Annotations = counted; return p }()},
		{name: "already linked to its group (reinvocation)", pod: named("train")},
		{name: "linked to another PodGroup by the user", pod: named("other")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ops := SchedulingGroup(tc.pod)
			if tc.want == "" {
				if len(ops) != 0 {
					t.Fatalf("SchedulingGroup = %+v, want no patch", ops)
				}
				return
			}
			if len(ops) != 1 {
				t.Fatalf("SchedulingGroup = %+v, want one operation", ops)
			}
			raw, err := json.Marshal(ops)
			if err != nil {
				t.Fatal(err)
			}
			patch, err := jsonpatchapply.DecodePatch(raw)
			if err != nil {
				t.Fatal(err)
			}
			doc, err := json.Marshal(tc.pod)
			if err != nil {
				t.Fatal(err)
			}
			out, err := patch.Apply(doc)
			if err != nil {
				t.Fatalf("apply %s: %v", raw, err)
			}
			var got corev1.Pod
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatal(err)
			}
			if sg := got.Spec.SchedulingGroup; sg == nil || sg.PodGroupName == nil || *sg.PodGroupName != tc.want {
				t.Fatalf("spec.schedulingGroup = %+v, want podGroupName %q", sg, tc.want)
			}
			if again := SchedulingGroup(&got); len(again) != 0 {
				t.Errorf("second call on the patched pod = %+v, want no patch", again)
			}
		})
	}
}

// TestRuns: a group runs when one of its pods Runs.
func TestRuns(t *testing.T) {
	gated := func(p *corev1.Pod) {
		p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: podkeys.AdmissionGate}}
	}
	ungated := func(p *corev1.Pod) { p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/other"}} }
	ended := func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }
	released := func(p *corev1.Pod) { p.Finalizers = nil }
	held := func(p *corev1.Pod) { p.Finalizers = []string{podkeys.ManagedFinalizer} }
	deleting := func(p *corev1.Pod) { now := metav1.Now(); p.DeletionTimestamp = &now }
	pod := func(mutate ...func(*corev1.Pod)) *corev1.Pod {
		p := newPod(nil)
		for _, m := range mutate {
			m(p)
		}
		return p
	}
	tests := []struct {
		name string
		pods []*corev1.Pod
		want bool
	}{
		{"no pods", nil, false},
		{"every pod gated", []*corev1.Pod{pod(gated), pod(gated)}, false},
		{"a pod runs", []*corev1.Pod{pod(gated), pod(ungated, held)}, true},
		{"a pod ended and is still accounted for", []*corev1.Pod{pod(ungated, ended, held)}, true},
		{"only an earlier run's pods, let go", []*corev1.Pod{pod(ungated, ended, released)}, false},
		{"the running pods are being deleted (an eviction)", []*corev1.Pod{pod(ungated, held, deleting)}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := slices.ContainsFunc(tt.pods, Runs); got != tt.want {
				t.Errorf("a pod Runs = %v, want %v", got, tt.want)
			}
		})
	}
}
