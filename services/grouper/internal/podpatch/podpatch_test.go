package podpatch

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sluicev1 "github.com/sluice-dev/sluice/gen/sluice/v1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
)

const foreignGate = "example.com/other"

func gatedPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "p", Namespace: "ns", UID: "uid-1",
			Labels:      map[string]string{podkeys.ManagedLabel: "true", "app": "demo"},
			Annotations: map[string]string{"keep": "me"},
			Finalizers:  []string{"example.com/first", podkeys.ManagedFinalizer},
		},
		Spec: corev1.PodSpec{
			SchedulingGates: []corev1.PodSchedulingGate{{Name: foreignGate}, {Name: podkeys.AdmissionGate}},
			NodeSelector:    map[string]string{"disk": "ssd"},
			Tolerations:     []corev1.Toleration{{Key: "own", Operator: corev1.TolerationOpExists}},
			Containers:      []corev1.Container{{Name: "c", Image: "i"}},
		},
	}
}

func TestUngate(t *testing.T) {
	sec := int64(60)
	tests := []struct {
		name            string
		info            *sluicev1.PodSetInfo
		mutatePod       func(*corev1.Pod)
		wantGates       []string
		wantSelector    map[string]string
		wantTolerations []corev1.Toleration
		wantLabels      map[string]string
		wantAnnotations map[string]string
		wantTolsInPatch bool
	}{
		{
			name: "full info",
			info: &sluicev1.PodSetInfo{
				Name:         "main",
				NodeSelector: map[string]string{"zone": "a", "disk": "ssd"},
				Tolerations: []*sluicev1.Toleration{
					{Key: "own", Operator: "Exists"},                                                // the pod has it
					{Key: "gpu", Operator: "Equal", Value: "yes", Effect: "NoSchedule"},             // new
					{Key: "gpu", Value: "yes", Effect: "NoSchedule"},                                // same, empty operator
					{Key: "slow", Operator: "Exists", Effect: "NoExecute", TolerationSeconds: &sec}, // new
				},
				Labels:      map[string]string{"flavor": "on-demand"},
				Annotations: map[string]string{"check": "ok"},
			},
			wantGates:    []string{foreignGate},
			wantSelector: map[string]string{"disk": "ssd", "zone": "a"},
			wantTolerations: []corev1.Toleration{
				{Key: "own", Operator: corev1.TolerationOpExists},
				{Key: "gpu", Operator: corev1.TolerationOpEqual, Value: "yes", Effect: corev1.TaintEffectNoSchedule},
				{Key: "slow", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &sec},
			},
			wantLabels: map[string]string{
				podkeys.ManagedLabel: "true", "app": "demo", "flavor": "on-demand", podkeys.PodSetLabel: "main",
			},
			wantAnnotations: map[string]string{"keep": "me", "check": "ok", podkeys.WorkloadAnnotation: "pod-p-abcde", podkeys.WorkloadUIDAnnotation: "wl-uid"},
			wantTolsInPatch: true,
		},
		{
			name:            "empty info only removes the gate and marks the pod",
			info:            &sluicev1.PodSetInfo{Name: "main"},
			wantGates:       []string{foreignGate},
			wantSelector:    map[string]string{"disk": "ssd"},
			wantTolerations: []corev1.Toleration{{Key: "own", Operator: corev1.TolerationOpExists}},
			wantLabels:      map[string]string{podkeys.ManagedLabel: "true", "app": "demo", podkeys.PodSetLabel: "main"},
			wantAnnotations: map[string]string{"keep": "me", podkeys.WorkloadAnnotation: "pod-p-abcde", podkeys.WorkloadUIDAnnotation: "wl-uid"},
		},
		{
			name: "tolerations the pod has are not patched",
			info: &sluicev1.PodSetInfo{
				Name:        "main",
				Tolerations: []*sluicev1.Toleration{{Key: "own", Operator: "Exists"}},
			},
			wantGates:       []string{foreignGate},
			wantSelector:    map[string]string{"disk": "ssd"},
			wantTolerations: []corev1.Toleration{{Key: "own", Operator: corev1.TolerationOpExists}},
			wantLabels:      map[string]string{podkeys.ManagedLabel: "true", "app": "demo", podkeys.PodSetLabel: "main"},
			wantAnnotations: map[string]string{"keep": "me", podkeys.WorkloadAnnotation: "pod-p-abcde", podkeys.WorkloadUIDAnnotation: "wl-uid"},
		},
		{
			name:            "our gate alone",
			info:            &sluicev1.PodSetInfo{Name: "main"},
			mutatePod:       func(p *corev1.Pod) { p.Spec.SchedulingGates = p.Spec.SchedulingGates[1:] },
			wantGates:       nil,
			wantSelector:    map[string]string{"disk": "ssd"},
			wantTolerations: []corev1.Toleration{{Key: "own", Operator: corev1.TolerationOpExists}},
			wantLabels:      map[string]string{podkeys.ManagedLabel: "true", "app": "demo", podkeys.PodSetLabel: "main"},
			wantAnnotations: map[string]string{"keep": "me", podkeys.WorkloadAnnotation: "pod-p-abcde", podkeys.WorkloadUIDAnnotation: "wl-uid"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := gatedPod()
			if tt.mutatePod != nil {
				tt.mutatePod(pod)
			}
			patch, err := Ungate(pod, tt.info, &sluicev1.WorkloadRef{Name: "pod-p-abcde", Uid: "wl-uid"}, "")
			if err != nil {
				t.Fatalf("Ungate: %v", err)
			}
			got := applyJSON(t, pod, patch)
			var gates []string
			for _, g := range got.Spec.SchedulingGates {
				gates = append(gates, g.Name)
			}
			if !reflect.DeepEqual(gates, tt.wantGates) {
				t.Errorf("gates = %v, want %v", gates, tt.wantGates)
			}
			if HasGate(got) {
				t.Errorf("HasGate after patch = true")
			}
			if !reflect.DeepEqual(got.Spec.NodeSelector, tt.wantSelector) {
				t.Errorf("nodeSelector = %v, want %v", got.Spec.NodeSelector, tt.wantSelector)
			}
			if !reflect.DeepEqual(got.Spec.Tolerations, tt.wantTolerations) {
				t.Errorf("tolerations = %+v, want %+v", got.Spec.Tolerations, tt.wantTolerations)
			}
			if !reflect.DeepEqual(got.Labels, tt.wantLabels) {
				t.Errorf("labels = %v, want %v", got.Labels, tt.wantLabels)
			}
			if !reflect.DeepEqual(got.Annotations, tt.wantAnnotations) {
				t.Errorf("annotations = %v, want %v", got.Annotations, tt.wantAnnotations)
			}
			if !reflect.DeepEqual(got.Finalizers, pod.Finalizers) {
				t.Errorf("finalizers changed: %v", got.Finalizers)
			}
			var ops []jsonOp
			if err := json.Unmarshal(patch, &ops); err != nil {
				t.Fatal(err)
			}
			touchesTolerations := slices.ContainsFunc(ops, func(o jsonOp) bool { return strings.HasPrefix(o.Path, "/spec/tolerations") })
			if touchesTolerations != tt.wantTolsInPatch {
				t.Errorf("patch touches tolerations = %v, want %v (patch %s)", touchesTolerations, tt.wantTolsInPatch, patch)
			}
			if ops[0] != (jsonOp{Op: "test", Path: "/metadata/uid", Value: "uid-1"}) {
				t.Errorf("patch does not test the pod uid first: %s", patch)
			}
			// The same patch on a pod whose gates changed since it was read
			// fails instead of removing another gate.
			moved := pod.DeepCopy()
			moved.Spec.SchedulingGates = append([]corev1.PodSchedulingGate{{Name: "example.com/new"}}, moved.Spec.SchedulingGates...)
			if _, err := applyJSONErr(moved, patch); err == nil {
				t.Errorf("the patch applied to a pod whose gate list changed")
			}
		})
	}
}

// A pod without a node selector, tolerations, labels or annotations gets
// them whole, guarded by its resourceVersion: a change since the pod was
// read fails the patch instead of being overwritten.
func TestUngateAddsWholeMapsGuarded(t *testing.T) {
	pod := gatedPod()
	pod.ResourceVersion = "7"
	pod.Labels, pod.Annotations, pod.Spec.NodeSelector, pod.Spec.Tolerations = nil, nil, nil, nil
	info := &sluicev1.PodSetInfo{
		Name: "main", NodeSelector: map[string]string{"zone": "a"},
		Tolerations: []*sluicev1.Toleration{{Key: "gpu", Operator: "Exists"}},
		Labels:      map[string]string{"example.com/flavor": "spot~1"},
	}
	patch, err := Ungate(pod, info, &sluicev1.WorkloadRef{Name: "w", Uid: "wl-uid"}, "r-1")
	if err != nil {
		t.Fatal(err)
	}
	got := applyJSON(t, pod, patch)
	if got.Spec.NodeSelector["zone"] != "a" || len(got.Spec.Tolerations) != 1 || got.Labels["example.com/flavor"] != "spot~1" ||
		got.Labels[podkeys.PodSetLabel] != "main" || got.Annotations[podkeys.WorkloadUIDAnnotation] != "wl-uid" ||
		got.Annotations[podkeys.ReservationAnnotation] != "r-1" || HasGate(got) {
		t.Fatalf("ungated pod: labels %v annotations %v selector %v tolerations %v gates %v",
			got.Labels, got.Annotations, got.Spec.NodeSelector, got.Spec.Tolerations, got.Spec.SchedulingGates)
	}
	changed := pod.DeepCopy()
	changed.ResourceVersion = "8"
	if _, err := applyJSONErr(changed, patch); err == nil {
		t.Fatal("a patch adding whole maps applied to a pod changed since it was read")
	}
}

func TestUngateEscapesKeys(t *testing.T) {
	pod := gatedPod()
	info := &sluicev1.PodSetInfo{Name: "main", Labels: map[string]string{"a/b~c": "v"}, NodeSelector: map[string]string{"topology.kubernetes.io/zone": "z"}}
	patch, err := Ungate(pod, info, &sluicev1.WorkloadRef{Name: "w"}, "")
	if err != nil {
		t.Fatal(err)
	}
	got := applyJSON(t, pod, patch)
	if got.Labels["a/b~c"] != "v" || got.Spec.NodeSelector["topology.kubernetes.io/zone"] != "z" {
		t.Fatalf("labels %v, selector %v", got.Labels, got.Spec.NodeSelector)
	}
}

func TestUngateNodeSelectorConflict(t *testing.T) {
	_, err := Ungate(gatedPod(), &sluicev1.PodSetInfo{Name: "main", NodeSelector: map[string]string{"disk": "hdd"}}, &sluicev1.WorkloadRef{Name: "w"}, "")
	var conflict *ConflictError
	if !errors.As(err, &conflict) {
		t.Fatalf("Ungate error = %v, want a *ConflictError", err)
	}
	if conflict.Field != `spec.nodeSelector["disk"]` || conflict.Pod != "ssd" || conflict.Want != "hdd" {
		t.Errorf("conflict = %+v", conflict)
	}
}

func TestRemoveFinalizer(t *testing.T) {
	tests := []struct {
		name      string
		pod       func() *corev1.Pod
		wantFound bool
		want      []string
	}{
		{name: "second of two", pod: gatedPod, wantFound: true, want: []string{"example.com/first"}},
		{name: "absent", pod: func() *corev1.Pod {
			p := gatedPod()
			p.Finalizers = []string{"example.com/first"}
			return p
		}, wantFound: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := tt.pod()
			patch, found, err := RemoveFinalizer(pod)
			if err != nil || found != tt.wantFound {
				t.Fatalf("RemoveFinalizer = found %v, err %v; want found %v", found, err, tt.wantFound)
			}
			if !found {
				return
			}
			got := applyJSON(t, pod, patch)
			if !reflect.DeepEqual(got.Finalizers, tt.want) {
				t.Errorf("finalizers = %v, want %v", got.Finalizers, tt.want)
			}
		})
	}
}

func TestRemoveFinalizerFailsOnChangedList(t *testing.T) {
	pod := gatedPod()
	patch, _, err := RemoveFinalizer(pod)
	if err != nil {
		t.Fatal(err)
	}
	// Someone removed the first finalizer since the pod was read: the
	// index is stale and the patch must not remove anything else.
	changed := gatedPod()
	changed.Finalizers = []string{podkeys.ManagedFinalizer}
	if _, err := applyJSONErr(changed, patch); err == nil {
		t.Errorf("patch applied to a changed finalizer list")
	}
	recreated := gatedPod()
	recreated.UID = "uid-2"
	if _, err := applyJSONErr(recreated, patch); err == nil {
		t.Errorf("patch applied to a pod with another uid")
	}
}

func TestRelease(t *testing.T) {
	pod := gatedPod()
	patch, found, err := Release(pod)
	if err != nil || !found {
		t.Fatalf("Release = found %v, err %v", found, err)
	}
	got := applyJSON(t, pod, patch)
	if HasGate(got) || HasFinalizer(got) {
		t.Errorf("after release: gates %v, finalizers %v", got.Spec.SchedulingGates, got.Finalizers)
	}
	if len(got.Spec.SchedulingGates) != 1 || got.Spec.SchedulingGates[0].Name != foreignGate {
		t.Errorf("foreign gate not kept: %v", got.Spec.SchedulingGates)
	}
	if !reflect.DeepEqual(got.Finalizers, []string{"example.com/first"}) {
		t.Errorf("finalizers = %v", got.Finalizers)
	}

	if _, found, _ := Release(got); found {
		t.Errorf("Release of a released pod found something to do")
	}
}

func applyJSON(t *testing.T, pod *corev1.Pod, patch []byte) *corev1.Pod {
	t.Helper()
	got, err := applyJSONErr(pod, patch)
	if err != nil {
		t.Fatalf("apply %s: %v", patch, err)
	}
	return got
}

func applyJSONErr(pod *corev1.Pod, patch []byte) (*corev1.Pod, error) {
	orig, err := json.Marshal(pod)
	if err != nil {
		return nil, err
	}
	p, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		return nil, err
	}
	out, err := p.Apply(orig)
	if err != nil {
		return nil, err
	}
	var res corev1.Pod
	return &res, json.Unmarshal(out, &res)
}
