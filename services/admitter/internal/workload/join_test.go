package workload

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	sluicev1 "github.com/sluice-dev/sluice/gen/sluice/v1"
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
			err := CheckJoin(wl, Join{Pod: "w-1", PodSet: tt.podSet, Requests: tt.requests})
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
	if err := CheckJoin(ended, Join{Pod: "w-1", PodSet: "worker"}); !errors.Is(err, ErrJoinRefused) {
		t.Errorf("CheckJoin on a finished workload = %v, want a refusal", err)
	}
}

// TestCheckJoinScheduling: a join that carries the pod's scheduling is
// refused when its node selector or tolerations differ from its pod
// set's (the API server's two default tolerations left out) or its
// priority from the workload's; the refusal names each field with both
// values. A join without it (an older grouper) compares requests only.
func TestCheckJoinScheduling(t *testing.T) {
	wl := &v1alpha1.Workload{
		ObjectMeta: metav1.ObjectMeta{Name: "spark"},
		Spec: v1alpha1.WorkloadSpec{
			Priority: ptr.To[int32](10),
			PodSets: []v1alpha1.PodSet{
				// Shaped like the driver: it went through the API server.
				{Name: "driver", Count: 1, Template: v1alpha1.PodSetTemplate{
					Requests:     corev1.ResourceList{"cpu": resource.MustParse("1")},
					NodeSelector: map[string]string{"pool": "batch"},
					Tolerations:  append(apiServerDefaults(), corev1.Toleration{Key: "batch", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}),
				}},
				// Shaped by a template: no defaults.
				{Name: "executor", Count: 3, Template: v1alpha1.PodSetTemplate{
					Requests:     corev1.ResourceList{"cpu": resource.MustParse("1")},
					NodeSelector: map[string]string{"pool": "batch"},
				}},
			},
		},
	}
	fits := func(nodeSelector map[string]string, tolerations ...corev1.Toleration) *JoinScheduling {
		return &JoinScheduling{NodeSelector: nodeSelector, Tolerations: tolerations, Priority: 10}
	}
	batch := corev1.Toleration{Key: "batch", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	gpu := corev1.Toleration{Key: "gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	pool := map[string]string{"pool": "batch"}
	tests := []struct {
		name       string
		podSet     string
		cpu        string
		scheduling *JoinScheduling
		refused    []string // parts of the refusal; none when it may join
	}{
		{"executor as its template, with the API server's tolerations", "executor", "1", fits(pool, apiServerDefaults()...), nil},
		{"driver-shaped pod naming the driver's role", "driver", "1", fits(pool, append(apiServerDefaults(), batch)...), nil},
		{"tolerations in another order, without the defaults", "driver", "1", fits(pool, batch), nil},
		{"older grouper: requests only", "executor", "1", nil, nil},
		{"other node selector", "executor", "1", fits(map[string]string{"pool": "gpu"}),
			[]string{"pod w-1 does not match pod set executor of workload spark", "nodeSelector: pod {pool=gpu}, pod set {pool=batch}"}},
		{"node selector grown", "executor", "1", fits(map[string]string{"pool": "batch", "zone": "a"}),
			[]string{"nodeSelector: pod {pool=batch, zone=a}, pod set {pool=batch}"}},
		{"no node selector", "executor", "1", fits(nil), []string{"nodeSelector: pod none, pod set {pool=batch}"}},
		{"a toleration added", "executor", "1", fits(pool, append(apiServerDefaults(), gpu)...),
			[]string{"tolerations: pod [gpu:NoSchedule exists], pod set none"}},
		{"a toleration missing", "driver", "1", fits(pool), []string{"tolerations: pod none, pod set [batch:NoSchedule exists]"}},
		{"other priority", "executor", "1", &JoinScheduling{NodeSelector: pool, Priority: 0}, []string{"priority: pod 0, workload 10"}},
		{"everything at once", "executor", "2", &JoinScheduling{Priority: 1, Tolerations: []corev1.Toleration{gpu}}, []string{
			"cpu 2 (the pod set reserves 1 per pod)", "nodeSelector: pod none, pod set {pool=batch}",
			"tolerations: pod [gpu:NoSchedule exists], pod set none", "priority: pod 1, workload 10"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckJoin(wl, Join{Pod: "w-1", PodSet: tt.podSet,
				Requests: corev1.ResourceList{"cpu": resource.MustParse(tt.cpu)}, Scheduling: tt.scheduling})
			if len(tt.refused) == 0 {
				if err != nil {
					t.Fatalf("CheckJoin: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrJoinRefused) {
				t.Fatalf("CheckJoin = %v, want a refusal", err)
			}
			for _, part := range tt.refused {
				if !strings.Contains(err.Error(), part) {
					t.Errorf("refusal %q lacks %q", err.Error(), part)
				}
			}
		})
	}
	unset := wl.DeepCopy()
	unset.Spec.Priority = nil
	if err := CheckJoin(unset, Join{Pod: "w-1", PodSet: "executor", Scheduling: &JoinScheduling{NodeSelector: pool}}); err != nil {
		t.Errorf("priority 0 against a workload without one: %v", err)
	}
	// A WorkloadPriorityClass's value is no pod's priority: a worker's
	// own priority is not compared with it.
	classed := wl.DeepCopy()
	classed.Spec.PriorityClassRef = &v1alpha1.PriorityClassRef{Group: "sluice.dev", Kind: v1alpha1.WorkloadPriorityClassKind, Name: "urgent"}
	classed.Spec.Priority = ptr.To[int32](1000)
	if err := CheckJoin(classed, Join{Pod: "w-1", PodSet: "executor", Scheduling: &JoinScheduling{NodeSelector: pool, Priority: 10}}); err != nil {
		t.Errorf("a worker of a workload queued at its WorkloadPriorityClass: %v", err)
	}
}

func apiServerDefaults() []corev1.Toleration {
	return []corev1.Toleration{
		{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
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

	sec := int64(300)
	j, err := JoinFromProto(&admitterv1.PodJoin{PodName: "w", PodSet: "worker", Scheduling: &admitterv1.PodScheduling{
		NodeSelector: map[string]string{"pool": "batch"}, Priority: 7,
		Tolerations: []*sluicev1.Toleration{{Key: corev1.TaintNodeNotReady, Operator: "Exists", Effect: "NoExecute", TolerationSeconds: &sec}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if s := j.Scheduling; s == nil || s.NodeSelector["pool"] != "batch" || s.Priority != 7 || len(s.Tolerations) != 1 || s.Tolerations[0].Key != corev1.TaintNodeNotReady {
		t.Errorf("scheduling read as %+v", j.Scheduling)
	}
	if j, _ := JoinFromProto(&admitterv1.PodJoin{PodName: "w", PodSet: "worker"}); j.Scheduling != nil {
		t.Errorf("a join without scheduling read as %+v, want nil: requests only", j.Scheduling)
	}
}
