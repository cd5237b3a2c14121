package podset

import (
	"errors"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

func flavor(name string, nodeLabels map[string]string, tolerations ...corev1.Toleration) *v1alpha1.ResourceFlavor {
	return &v1alpha1.ResourceFlavor{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1alpha1.ResourceFlavorSpec{NodeLabels: nodeLabels, Tolerations: tolerations},
	}
}

func update(check string, u v1alpha1.PodSetUpdate) CheckUpdate {
	return CheckUpdate{CheckName: check, Update: u}
}

func seconds(s int64) *int64 { return &s }

var (
	tolGPU      = corev1.Toleration{Key: "gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	tolSpotEq   = corev1.Toleration{Key: "spot", Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoSchedule}
	tolSpotNoOp = corev1.Toleration{Key: "spot", Value: "true", Effect: corev1.TaintEffectNoSchedule}
	tolEvict30  = corev1.Toleration{Key: "evict", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: seconds(30)}
	tolEvict60  = corev1.Toleration{Key: "evict", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: seconds(60)}
	tolEvictInf = corev1.Toleration{Key: "evict", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}
)

func TestMerge(t *testing.T) {
	sluiceLabels := map[string]string{"kueue.x-k8s.io/podset": "main"}
	sluiceAnnotations := map[string]string{"sluice.dev/workload": "wl"}

	cases := []struct {
		name    string
		in      Input
		want    v1alpha1.PodSetInfo
		wantErr *ConflictError
	}{
		{
			name: "only sluice keys",
			in:   Input{Name: "main", Labels: sluiceLabels, Annotations: sluiceAnnotations},
			want: v1alpha1.PodSetInfo{Name: "main", Labels: sluiceLabels, Annotations: sluiceAnnotations},
		},
		{
			name: "nothing to add gives empty maps as nil",
			in:   Input{Name: "main"},
			want: v1alpha1.PodSetInfo{Name: "main"},
		},
		{
			name: "flavor node labels and tolerations are added",
			in: Input{
				Name:    "main",
				Flavors: []*v1alpha1.ResourceFlavor{flavor("gpu", map[string]string{"pool": "gpu", "zone": "a"}, tolGPU)},
			},
			want: v1alpha1.PodSetInfo{
				Name:         "main",
				NodeSelector: map[string]string{"pool": "gpu", "zone": "a"},
				Tolerations:  []corev1.Toleration{tolGPU},
			},
		},
		{
			name: "flavor node label the pods already select is left out",
			in: Input{
				Name:     "main",
				Template: v1alpha1.PodSetTemplate{NodeSelector: map[string]string{"zone": "a"}},
				Flavors:  []*v1alpha1.ResourceFlavor{flavor("f", map[string]string{"pool": "gpu", "zone": "a"})},
			},
			want: v1alpha1.PodSetInfo{Name: "main", NodeSelector: map[string]string{"pool": "gpu"}},
		},
		{
			name: "flavor vs pod nodeSelector conflicts",
			in: Input{
				Name:     "main",
				Template: v1alpha1.PodSetTemplate{NodeSelector: map[string]string{"zone": "a"}},
				Flavors:  []*v1alpha1.ResourceFlavor{flavor("f", map[string]string{"zone": "b"})},
			},
			wantErr: &ConflictError{PodSet: "main", Flavor: "f", Field: FieldNodeSelector, Key: "zone",
				Existing: "a", New: "b", ExistingFrom: Source{Kind: SourcePods}},
		},
		{
			name: "flavor vs flavor conflicts",
			in: Input{
				Name: "main",
				Flavors: []*v1alpha1.ResourceFlavor{
					flavor("f1", map[string]string{"zone": "a"}),
					flavor("f2", map[string]string{"zone": "b"}),
				},
			},
			wantErr: &ConflictError{PodSet: "main", Flavor: "f2", Field: FieldNodeSelector, Key: "zone",
				Existing: "a", New: "b", ExistingFrom: Source{Kind: SourceFlavor, Name: "f1"}},
		},
		{
			name: "check vs check labels: check-name order decides value1",
			in: Input{
				Name: "main",
				Updates: []CheckUpdate{
					update("c2", v1alpha1.PodSetUpdate{Name: "main", Labels: map[string]string{"team": "two"}}),
					update("c1", v1alpha1.PodSetUpdate{Name: "main", Labels: map[string]string{"team": "one"}}),
				},
			},
			wantErr: &ConflictError{PodSet: "main", Check: "c2", Field: FieldLabels, Key: "team",
				Existing: "one", New: "two", ExistingFrom: Source{Kind: SourceCheck, Name: "c1"}},
		},
		{
			name: "check vs check annotations",
			in: Input{
				Name: "main",
				Updates: []CheckUpdate{
					update("a", v1alpha1.PodSetUpdate{Annotations: map[string]string{"x/y": "1"}}),
					update("b", v1alpha1.PodSetUpdate{Annotations: map[string]string{"x/y": "2"}}),
				},
			},
			wantErr: &ConflictError{PodSet: "main", Check: "b", Field: FieldAnnotations, Key: "x/y",
				Existing: "1", New: "2", ExistingFrom: Source{Kind: SourceCheck, Name: "a"}},
		},
		{
			name: "check vs flavor nodeSelector",
			in: Input{
				Name:    "main",
				Flavors: []*v1alpha1.ResourceFlavor{flavor("f", map[string]string{"zone": "a"})},
				Updates: []CheckUpdate{update("c", v1alpha1.PodSetUpdate{NodeSelector: map[string]string{"zone": "b"}})},
			},
			wantErr: &ConflictError{PodSet: "main", Check: "c", Field: FieldNodeSelector, Key: "zone",
				Existing: "a", New: "b", ExistingFrom: Source{Kind: SourceFlavor, Name: "f"}},
		},
		{
			name: "check vs pod labels",
			in: Input{
				Name:     "main",
				Template: v1alpha1.PodSetTemplate{Labels: map[string]string{"app": "web"}},
				Updates:  []CheckUpdate{update("c", v1alpha1.PodSetUpdate{Labels: map[string]string{"app": "db"}})},
			},
			wantErr: &ConflictError{PodSet: "main", Check: "c", Field: FieldLabels, Key: "app",
				Existing: "web", New: "db", ExistingFrom: Source{Kind: SourcePods}},
		},
		{
			name: "check vs pod annotations",
			in: Input{
				Name:     "main",
				Template: v1alpha1.PodSetTemplate{Annotations: map[string]string{"note": "a"}},
				Updates:  []CheckUpdate{update("c", v1alpha1.PodSetUpdate{Annotations: map[string]string{"note": "b"}})},
			},
			wantErr: &ConflictError{PodSet: "main", Check: "c", Field: FieldAnnotations, Key: "note",
				Existing: "a", New: "b", ExistingFrom: Source{Kind: SourcePods}},
		},
		{
			name: "check vs pod nodeSelector",
			in: Input{
				Name:     "main",
				Template: v1alpha1.PodSetTemplate{NodeSelector: map[string]string{"disk": "ssd"}},
				Updates:  []CheckUpdate{update("c", v1alpha1.PodSetUpdate{NodeSelector: map[string]string{"disk": "hdd"}})},
			},
			wantErr: &ConflictError{PodSet: "main", Check: "c", Field: FieldNodeSelector, Key: "disk",
				Existing: "ssd", New: "hdd", ExistingFrom: Source{Kind: SourcePods}},
		},
		{
			name: "check vs sluice label",
			in: Input{
				Name:    "main",
				Labels:  sluiceLabels,
				Updates: []CheckUpdate{update("c", v1alpha1.PodSetUpdate{Labels: map[string]string{"kueue.x-k8s.io/podset": "other"}})},
			},
			wantErr: &ConflictError{PodSet: "main", Check: "c", Field: FieldLabels, Key: "kueue.x-k8s.io/podset",
				Existing: "main", New: "other", ExistingFrom: Source{Kind: SourceSluice}},
		},
		{
			name: "first conflicting key in sorted order is reported",
			in: Input{
				Name:     "main",
				Template: v1alpha1.PodSetTemplate{Labels: map[string]string{"a": "1", "b": "1", "c": "1"}},
				Updates:  []CheckUpdate{update("c", v1alpha1.PodSetUpdate{Labels: map[string]string{"c": "2", "b": "2", "a": "1"}})},
			},
			wantErr: &ConflictError{PodSet: "main", Check: "c", Field: FieldLabels, Key: "b",
				Existing: "1", New: "2", ExistingFrom: Source{Kind: SourcePods}},
		},
		{
			name: "same key and value is fine everywhere",
			in: Input{
				Name: "main",
				Template: v1alpha1.PodSetTemplate{
					Labels:       map[string]string{"app": "web"},
					Annotations:  map[string]string{"note": "a"},
					NodeSelector: map[string]string{"disk": "ssd"},
				},
				Labels:  sluiceLabels,
				Flavors: []*v1alpha1.ResourceFlavor{flavor("f1", map[string]string{"zone": "a"}), flavor("f2", map[string]string{"zone": "a"})},
				Updates: []CheckUpdate{
					update("c1", v1alpha1.PodSetUpdate{
						Labels:       map[string]string{"app": "web", "team": "x", "kueue.x-k8s.io/podset": "main"},
						Annotations:  map[string]string{"note": "a"},
						NodeSelector: map[string]string{"disk": "ssd", "zone": "a", "rack": "r1"},
					}),
					update("c2", v1alpha1.PodSetUpdate{
						Labels:       map[string]string{"team": "x"},
						NodeSelector: map[string]string{"rack": "r1"},
					}),
				},
			},
			want: v1alpha1.PodSetInfo{
				Name: "main",
				// Labels and annotations are listed even when the pods
				// carry the same value; nodeSelector entries are not.
				Labels:       map[string]string{"app": "web", "team": "x", "kueue.x-k8s.io/podset": "main"},
				Annotations:  map[string]string{"note": "a"},
				NodeSelector: map[string]string{"zone": "a", "rack": "r1"},
			},
		},
		{
			name: "sluice keys replace what the pods carry",
			in: Input{
				Name: "main",
				Template: v1alpha1.PodSetTemplate{
					Labels:      map[string]string{"kueue.x-k8s.io/podset": "stale"},
					Annotations: map[string]string{"sluice.dev/workload": "stale"},
				},
				Labels:      sluiceLabels,
				Annotations: sluiceAnnotations,
			},
			want: v1alpha1.PodSetInfo{Name: "main", Labels: sluiceLabels, Annotations: sluiceAnnotations},
		},
		{
			name: "tolerations are de-duplicated and the pods' own are not repeated",
			in: Input{
				Name:     "main",
				Template: v1alpha1.PodSetTemplate{Tolerations: []corev1.Toleration{tolSpotNoOp, tolEvict30}},
				Flavors:  []*v1alpha1.ResourceFlavor{flavor("f", nil, tolGPU, tolEvictInf)},
				Updates: []CheckUpdate{
					update("c2", v1alpha1.PodSetUpdate{Tolerations: []corev1.Toleration{tolGPU, tolEvict60}}),
					// Empty operator on the pod equals Equal here.
					update("c1", v1alpha1.PodSetUpdate{Tolerations: []corev1.Toleration{tolSpotEq, tolEvict30, tolEvictInf}}),
				},
			},
			want: v1alpha1.PodSetInfo{
				Name:        "main",
				Tolerations: []corev1.Toleration{tolGPU, tolEvictInf, tolEvict60},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Merge(tc.in)
			if tc.wantErr != nil {
				var ce *ConflictError
				if !errors.As(err, &ce) {
					t.Fatalf("Merge() error = %v, want %+v", err, tc.wantErr)
				}
				if *ce != *tc.wantErr {
					t.Fatalf("Merge() conflict = %+v, want %+v", *ce, *tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Merge() error = %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Merge() =\n %+v\nwant\n %+v", got, tc.want)
			}
		})
	}
}

func TestMergeDoesNotAliasInput(t *testing.T) {
	in := Input{
		Name:    "main",
		Flavors: []*v1alpha1.ResourceFlavor{flavor("f", map[string]string{"zone": "a"}, tolEvict30)},
		Updates: []CheckUpdate{update("c", v1alpha1.PodSetUpdate{Labels: map[string]string{"team": "x"}})},
	}
	got, err := Merge(in)
	if err != nil {
		t.Fatal(err)
	}
	got.NodeSelector["zone"] = "changed"
	got.Labels["team"] = "changed"
	*got.Tolerations[0].TolerationSeconds = 1
	if in.Flavors[0].Spec.NodeLabels["zone"] != "a" || in.Updates[0].Update.Labels["team"] != "x" ||
		*in.Flavors[0].Spec.Tolerations[0].TolerationSeconds != 30 {
		t.Fatalf("changing the info changed the input: %+v", in)
	}
}

func TestMergeBadInput(t *testing.T) {
	cases := []struct {
		name string
		in   Input
		want string
	}{
		{
			name: "no name",
			in:   Input{},
			want: "merge pod set: name must not be empty",
		},
		{
			name: "unnamed check",
			in:   Input{Name: "main", Updates: []CheckUpdate{{}}},
			want: `merge pod set "main": updates[0].CheckName must not be empty`,
		},
		{
			name: "update for another pod set",
			in:   Input{Name: "main", Updates: []CheckUpdate{update("c", v1alpha1.PodSetUpdate{Name: "other"})}},
			want: `merge pod set "main": update of admission check "c" is for pod set "other"`,
		},
		{
			name: "check twice",
			in:   Input{Name: "main", Updates: []CheckUpdate{update("c", v1alpha1.PodSetUpdate{}), update("b", v1alpha1.PodSetUpdate{}), update("c", v1alpha1.PodSetUpdate{})}},
			want: `merge pod set "main": admission check "c" has more than one update for it`,
		},
		{
			name: "nil flavor",
			in:   Input{Name: "main", Flavors: []*v1alpha1.ResourceFlavor{flavor("f", nil), nil}},
			want: `merge pod set "main": flavors[1] is nil`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Merge(tc.in)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("Merge() error = %v, want %q", err, tc.want)
			}
			var ce *ConflictError
			if errors.As(err, &ce) {
				t.Fatalf("bad input reported as a conflict: %v", err)
			}
		})
	}
}

func TestConflictErrorMessage(t *testing.T) {
	cases := []struct {
		err  ConflictError
		want string
	}{
		{
			err:  ConflictError{Check: "c2", Field: FieldLabels, Key: "K", Existing: "v1", New: "v2"},
			want: `in admission check "c2": conflict for labels: key=K, value1=v1, value2=v2`,
		},
		{
			err:  ConflictError{Check: "c", Field: FieldAnnotations, Key: "a/b", Existing: "x", New: "y"},
			want: `in admission check "c": conflict for annotations: key=a/b, value1=x, value2=y`,
		},
		{
			err:  ConflictError{Flavor: "f", Field: FieldNodeSelector, Key: "zone", Existing: "a", New: "b"},
			want: `in resource flavor "f": conflict for nodeSelector: key=zone, value1=a, value2=b`,
		},
	}
	for _, tc := range cases {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
	}
}

func TestSourceString(t *testing.T) {
	cases := map[Source]string{
		{Kind: SourcePods}:                "the pods",
		{Kind: SourceSluice}:              "sluice",
		{Kind: SourceFlavor, Name: "gpu"}: `flavor "gpu"`,
		{Kind: SourceCheck, Name: "prov"}: `check "prov"`,
	}
	for src, want := range cases {
		if got := src.String(); got != want {
			t.Errorf("%#v.String() = %q, want %q", src, got, want)
		}
	}
}

func TestSameToleration(t *testing.T) {
	cases := []struct {
		name string
		a, b corev1.Toleration
		want bool
	}{
		{"identical", tolGPU, tolGPU, true},
		{"empty operator equals Equal", tolSpotNoOp, tolSpotEq, true},
		{"different key", tolSpotEq, corev1.Toleration{Key: "other", Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoSchedule}, false},
		{"different operator", corev1.Toleration{Key: "k", Operator: corev1.TolerationOpExists}, corev1.Toleration{Key: "k"}, false},
		{"different value", tolSpotEq, corev1.Toleration{Key: "spot", Operator: corev1.TolerationOpEqual, Value: "false", Effect: corev1.TaintEffectNoSchedule}, false},
		{"different effect", tolSpotEq, corev1.Toleration{Key: "spot", Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoExecute}, false},
		{"same seconds in different pointers", tolEvict30, corev1.Toleration{Key: "evict", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: seconds(30)}, true},
		{"different seconds", tolEvict30, tolEvict60, false},
		{"seconds vs forever", tolEvict30, tolEvictInf, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := SameToleration(tc.a, tc.b); got != tc.want {
				t.Errorf("SameToleration(a, b) = %v, want %v", got, tc.want)
			}
			if got := SameToleration(tc.b, tc.a); got != tc.want {
				t.Errorf("SameToleration(b, a) = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestMissingTolerations(t *testing.T) {
	cases := []struct {
		name       string
		have, want []corev1.Toleration
		missing    []corev1.Toleration
	}{
		{"nothing wanted", []corev1.Toleration{tolGPU}, nil, nil},
		{"all present", []corev1.Toleration{tolGPU, tolSpotNoOp}, []corev1.Toleration{tolSpotEq, tolGPU}, nil},
		{"duplicates in want kept once, in order", nil, []corev1.Toleration{tolEvict60, tolGPU, tolEvict60, tolSpotEq, tolSpotNoOp}, []corev1.Toleration{tolEvict60, tolGPU, tolSpotEq}},
		{"seconds matter", []corev1.Toleration{tolEvict30}, []corev1.Toleration{tolEvict30, tolEvictInf}, []corev1.Toleration{tolEvictInf}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := MissingTolerations(tc.have, tc.want); !reflect.DeepEqual(got, tc.missing) {
				t.Errorf("MissingTolerations() = %+v, want %+v", got, tc.missing)
			}
		})
	}
}
