package workload

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

func TestCheckJoin(t *testing.T) {
	wl := &v1alpha1.Workload{
		ObjectMeta: metav1.ObjectMeta{Name: "spark"},
		Spec: v1alpha1.WorkloadSpec{PodSets: []v1alpha1.PodSet{
			{Name: "driver", Count: 1, Template: v1alpha1.PodSetTemplate{Requests: corev1.ResourceList{"cpu": resource.MustParse("500m")}}},
			{Name: "worker", Count: 3, Template: v1alpha1.PodSetTemplate{Requests: corev1.ResourceList{"cpu": resource.MustParse("1"), "memory": resource.MustParse("1Gi")}}},
		}},
	}
	reqs := func(kv ...string) corev1.ResourceList {
		out := corev1.ResourceList{}
		for i := 0; i < len(kv); i += 2 {
			out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
		}
		return out
	}
	tests := []struct {
		name     string
		podSet   string
		requests corev1.ResourceList
		refused  string // part of the refusal; empty when it may join
	}{
		{"same shape", "worker", reqs("cpu", "1", "memory", "1Gi"), ""},
		{"smaller", "worker", reqs("cpu", "250m"), ""},
		{"nothing", "worker", nil, ""},
		{"zero of a resource the set lacks", "worker", reqs("nvidia.com/gpu", "0"), ""},
		{"more cpu", "worker", reqs("cpu", "2"), "cpu 2 (the pod set reserves 1 per pod)"},
		{"a resource the set lacks", "worker", reqs("nvidia.com/gpu", "1"), "nvidia.com/gpu 1 (the pod set reserves none)"},
		{"unknown pod set", "executor", reqs("cpu", "1"), `has no pod set "executor" (it has [driver worker])`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckJoin(wl, "w-1", tt.podSet, tt.requests)
			switch {
			case tt.refused == "" && err != nil:
				t.Fatalf("CheckJoin: %v", err)
			case tt.refused != "" && (!errors.Is(err, ErrJoinRefused) || !strings.Contains(err.Error(), tt.refused)):
				t.Fatalf("CheckJoin = %v, want a refusal containing %q", err, tt.refused)
			}
		})
	}
	ended := wl.DeepCopy()
	ended.Status.Conditions = []metav1.Condition{{Type: v1alpha1.WorkloadFinished, Status: metav1.ConditionTrue}}
	if err := CheckJoin(ended, "w-1", "worker", nil); !errors.Is(err, ErrJoinRefused) {
		t.Errorf("CheckJoin on a finished workload = %v, want a refusal", err)
	}
}

func TestJoinFromProto(t *testing.T) {
	tests := []struct {
		join *admitterv1.PodJoin
		err  string
	}{
		{&admitterv1.PodJoin{PodName: "w", PodSet: "worker", Requests: map[string]string{"cpu": "1"}}, ""},
		{&admitterv1.PodJoin{PodSet: "worker"}, "join.pod_name is required"},
		{&admitterv1.PodJoin{PodName: "w", PodSet: "Worker"}, `join.pod_set "Worker"`},
		{&admitterv1.PodJoin{PodName: "w", PodSet: "worker", Requests: map[string]string{"cpu": "lots"}}, `join.requests["cpu"] "lots": not a quantity`},
		{&admitterv1.PodJoin{PodName: "w", PodSet: "worker", Requests: map[string]string{"cpu": "-1"}}, "must not be negative"},
	}
	for _, tt := range tests {
		_, err := JoinFromProto(tt.join)
		if (tt.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("JoinFromProto(%v) = %v, want %q", tt.join, err, tt.err)
		}
	}
}
