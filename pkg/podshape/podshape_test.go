package podshape

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

func defaults() []corev1.Toleration {
	return []corev1.Toleration{
		{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
	}
}

func TestNodeSelector(t *testing.T) {
	tests := []struct {
		name     string
		pod, set map[string]string
		want     string // empty: equal
	}{
		{"both empty", nil, map[string]string{}, ""},
		{"equal", map[string]string{"a": "1", "b": "2"}, map[string]string{"b": "2", "a": "1"}, ""},
		{"added", map[string]string{"disk": "ssd", "zone": "b"}, map[string]string{"disk": "ssd"},
			"nodeSelector: pod {disk=ssd, zone=b}, pod set {disk=ssd}"},
		{"changed", map[string]string{"disk": "hdd"}, map[string]string{"disk": "ssd"}, "nodeSelector: pod {disk=hdd}, pod set {disk=ssd}"},
		{"pod has none", nil, map[string]string{"disk": "ssd"}, "nodeSelector: pod none, pod set {disk=ssd}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkDiff(t, NodeSelector(tt.pod, tt.set), tt.want)
		})
	}
}

func TestTolerations(t *testing.T) {
	gpu := corev1.Toleration{Key: "gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	spot := corev1.Toleration{Key: "spot", Value: "yes", Effect: corev1.TaintEffectNoSchedule}
	tests := []struct {
		name     string
		pod, set []corev1.Toleration
		want     string
	}{
		{"none", nil, nil, ""},
		{"the API server's defaults on the pod only", defaults(), nil, ""},
		{"the API server's defaults on the set only", []corev1.Toleration{gpu}, append(defaults(), gpu), ""},
		{"other order, one repeated", []corev1.Toleration{spot, gpu, gpu}, []corev1.Toleration{gpu, spot}, ""},
		{"empty operator is Equal", []corev1.Toleration{spot}, []corev1.Toleration{{Key: "spot", Operator: corev1.TolerationOpEqual, Value: "yes", Effect: corev1.TaintEffectNoSchedule}}, ""},
		{"added", append(defaults(), gpu), defaults(), "tolerations: pod [gpu:NoSchedule exists], pod set none"},
		{"missing", nil, []corev1.Toleration{spot}, "tolerations: pod none, pod set [spot=yes:NoSchedule]"},
		{"not-ready for another time counts", []corev1.Toleration{{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists,
			Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](60)}}, nil,
			"tolerations: pod [node.kubernetes.io/not-ready:NoExecute exists for 60s], pod set none"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkDiff(t, Tolerations(tt.pod, tt.set), tt.want)
		})
	}
}

func TestWithoutAPIServerDefaultsDoesNotAlias(t *testing.T) {
	in := append(defaults(), corev1.Toleration{Key: "gpu", Operator: corev1.TolerationOpExists})
	out := WithoutAPIServerDefaults(in)
	if len(out) != 1 || out[0].Key != "gpu" {
		t.Fatalf("WithoutAPIServerDefaults = %v, want only gpu", out)
	}
	if len(in) != 3 || in[0].Key != corev1.TaintNodeNotReady {
		t.Fatalf("the input changed: %v", in)
	}
}

func TestPriority(t *testing.T) {
	checkDiff(t, Priority(5, 5), "")
	checkDiff(t, Priority(10, 0), "priority: pod 10, workload 0")
}

func TestRequests(t *testing.T) {
	list := func(kv ...string) corev1.ResourceList {
		out := corev1.ResourceList{}
		for i := 0; i < len(kv); i += 2 {
			out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
		}
		return out
	}
	tests := []struct {
		name     string
		pod, set corev1.ResourceList
		want     string
	}{
		{"equal in other units", list("cpu", "1", "memory", "1Gi"), list("cpu", "1000m", "memory", "1024Mi"), ""},
		{"a zero request is none", list("cpu", "1", "nvidia.com/gpu", "0"), list("cpu", "1"), ""},
		{"more", list("cpu", "2"), list("cpu", "1"), "requests: pod {cpu=2}, pod set {cpu=1}"},
		{"less", list("cpu", "1"), list("cpu", "1", "memory", "1Gi"), "requests: pod {cpu=1}, pod set {cpu=1, memory=1Gi}"},
		{"none", nil, list("cpu", "1"), "requests: pod none, pod set {cpu=1}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkDiff(t, Requests(tt.pod, tt.set), tt.want)
		})
	}
}

func TestJoin(t *testing.T) {
	got := Join([]Difference{*Priority(1, 0), *NodeSelector(map[string]string{"a": "b"}, nil)})
	if want := "priority: pod 1, workload 0; nodeSelector: pod {a=b}, pod set none"; got != want {
		t.Fatalf("Join = %q, want %q", got, want)
	}
}

func checkDiff(t *testing.T, d *Difference, want string) {
	t.Helper()
	switch {
	case want == "" && d != nil:
		t.Fatalf("difference %q, want none", d.String())
	case want != "" && d == nil:
		t.Fatalf("no difference, want %q", want)
	case d != nil && d.String() != want:
		t.Fatalf("difference %q, want %q", d.String(), want)
	}
}
