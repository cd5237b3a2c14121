package workload

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

func TestShrinkKeepsOnlyWhatAFinishedWorkloadNeeds(t *testing.T) {
	build := func(finished bool) *v1alpha1.Workload {
		wl := &v1alpha1.Workload{
			Spec: v1alpha1.WorkloadSpec{PodSets: []v1alpha1.PodSet{{Name: "main", Count: 2, Template: v1alpha1.PodSetTemplate{
				RoleHash: "h", Labels: map[string]string{"a": "b"}, Annotations: map[string]string{"c": "d"},
				NodeSelector: map[string]string{"e": "f"}, Tolerations: []corev1.Toleration{{Key: "g"}},
			}}}},
			Status: v1alpha1.WorkloadStatus{
				PodSetInfos:     []v1alpha1.PodSetInfo{{Name: "main"}},
				AdmissionChecks: []v1alpha1.AdmissionCheckState{{Name: "c", PodSetUpdates: []v1alpha1.PodSetUpdate{{Name: "main"}}}},
			},
		}
		if finished {
			wl.Status.Conditions = []metav1.Condition{{Type: v1alpha1.WorkloadFinished, Status: metav1.ConditionTrue}}
		}
		return wl
	}
	tests := []struct {
		name     string
		finished bool
		shrunk   bool
	}{
		{"running workloads are kept whole", false, false},
		{"finished workloads are shrunk", true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := Shrink(build(tt.finished))
			if err != nil {
				t.Fatal(err)
			}
			wl := out.(*v1alpha1.Workload)
			tmpl := wl.Spec.PodSets[0].Template
			shrunk := tmpl.Labels == nil && tmpl.Annotations == nil && tmpl.NodeSelector == nil && tmpl.Tolerations == nil &&
				wl.Status.PodSetInfos == nil && wl.Status.AdmissionChecks[0].PodSetUpdates == nil
			if shrunk != tt.shrunk || tmpl.RoleHash != "h" || wl.Spec.PodSets[0].Count != 2 {
				t.Fatalf("shrunk = %v (want %v): %+v", shrunk, tt.shrunk, wl)
			}
		})
	}
	if out, _ := Shrink(&corev1.Pod{}); out == nil {
		t.Fatal("other objects must pass through")
	}
}

func TestEvaluationKeyIsUniquePerCheckAndReservation(t *testing.T) {
	keys := map[string]string{}
	for _, uid := range []types.UID{"uid-1", "uid-2"} {
		for _, res := range []string{"r1", "r2"} {
			for _, check := range []string{"pool", "budget"} {
				key := EvaluationKey(uid, res, check)
				what := string(uid) + " " + res + " " + check
				if other, dup := keys[key]; dup {
					t.Fatalf("%s and %s share the key %q", other, what, key)
				}
				keys[key] = what
				if again := EvaluationKey(uid, res, check); again != key {
					t.Fatalf("%s: key %q, then %q", what, key, again)
				}
			}
		}
	}
}

func TestParseEvaluationKey(t *testing.T) {
	tests := []struct {
		key         string
		ok          bool
		uid         types.UID
		reservation string
		check       string
	}{
		{key: EvaluationKey("u-1", "abc", "budget"), ok: true, uid: "u-1", reservation: "abc", check: "budget"},
		{key: "u/r/c.example.com", ok: true, uid: "u", reservation: "r", check: "c.example.com"},
		{key: ""},
		{key: "u/r"},
		{key: "u/r/c/extra"},
		{key: "/r/c"},
		{key: "u//c"},
		{key: "u/r/"},
		{key: "made-up-by-the-provider"},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			uid, res, check, ok := ParseEvaluationKey(tt.key)
			if ok != tt.ok || uid != tt.uid || res != tt.reservation || check != tt.check {
				t.Fatalf("ParseEvaluationKey(%q) = %q, %q, %q, %v; want %q, %q, %q, %v",
					tt.key, uid, res, check, ok, tt.uid, tt.reservation, tt.check, tt.ok)
			}
		})
	}
}
