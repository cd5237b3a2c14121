package fit

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/pkg/podset"
	"github.com/sluice-dev/sluice/pkg/rolehash"
	"github.com/sluice-dev/sluice/services/grouper/internal/workload"
)

func cpu(q string) corev1.ResourceList {
	return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(q)}
}

// admittedPod is a gated pod as the API server keeps it: priority set,
// the two default tolerations added.
func admittedPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "uid-p",
			Labels: map[string]string{podkeys.QueueNameLabel: "user-queue"}},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{
				{Name: "setup", Resources: corev1.ResourceRequirements{Requests: cpu("100m")}},
				{Name: "proxy", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways), Resources: corev1.ResourceRequirements{Requests: cpu("200m")}},
			},
			Containers:   []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{Requests: cpu("1")}}},
			NodeSelector: map[string]string{"disk": "ssd"},
			Tolerations: []corev1.Toleration{
				{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
				{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
			},
			Overhead: cpu("10m"),
			Priority: ptr.To[int32](0),
		},
	}
}

// builtFrom returns the admission of pod's single-pod workload as the
// admitter sends it, and the Workload's template of its pod set, both
// built from pod as it is now.
func builtFrom(t *testing.T, pod *corev1.Pod) (*admitterv1.Decision, *v1alpha1.PodSetTemplate) {
	t.Helper()
	wl, err := workload.ForSinglePod(pod)
	if err != nil {
		t.Fatal(err)
	}
	ps := wl.GetPodSets()[0]
	tmpl := &v1alpha1.PodSetTemplate{RoleHash: ps.GetRoleHash(), NodeSelector: ps.GetNodeSelector(),
		Tolerations: podset.TolerationsFromProto(ps.GetTolerations()), Requests: corev1.ResourceList{}}
	for name, q := range ps.GetRequests() {
		tmpl.Requests[corev1.ResourceName(name)] = resource.MustParse(q)
	}
	d := &admitterv1.Decision{
		Action: admitterv1.Decision_ACTION_ADMIT, QueueName: wl.GetQueueName(), Priority: ptr.To(wl.GetPriority()),
		PodSetRoleHashes: map[string]string{ps.GetName(): ps.GetRoleHash()},
	}
	return d, tmpl
}

func TestCheck(t *testing.T) {
	d, tmpl := builtFrom(t, admittedPod())
	tests := []struct {
		name   string
		change func(*corev1.Pod)
		// fits: ungated as it is. Otherwise the Explain message holds
		// every part of explain.
		fits    bool
		explain []string
	}{
		{name: "exact fit", change: func(*corev1.Pod) {}, fits: true},
		{name: "only what the hash leaves out changed", fits: true, change: func(p *corev1.Pod) {
			p.Spec.Containers[0].Image = "other:2"
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "RANK", Value: "3"}}
			p.Labels["app"] = "x"
		}},
		{name: "node selector grown", change: func(p *corev1.Pod) { p.Spec.NodeSelector["zone"] = "b" },
			explain: []string{"nodeSelector: pod {disk=ssd, zone=b}, pod set {disk=ssd}"}},
		{name: "toleration added", change: func(p *corev1.Pod) {
			p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: "gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
		}, explain: []string{"tolerations: pod [gpu:NoSchedule exists], pod set none"}},
		{name: "affinity added", change: func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}}},
			}}}
		}, explain: []string{"role hash", "affinity, priority or another scheduling field"}},
		{name: "init container requests", change: func(p *corev1.Pod) { p.Spec.InitContainers[0].Resources.Requests = cpu("4") },
			explain: []string{"requests: pod {cpu=4010m}, pod set {cpu=1210m}"}}, // it runs before the sidecar starts
		{name: "sidecar requests", change: func(p *corev1.Pod) { p.Spec.InitContainers[1].Resources.Requests = cpu("500m") },
			explain: []string{"requests: pod {cpu=1510m}, pod set {cpu=1210m}"}},
		{name: "overhead", change: func(p *corev1.Pod) { p.Spec.Overhead = cpu("50m") },
			explain: []string{"requests: pod {cpu=1250m}, pod set {cpu=1210m}"}},
		{name: "pod-level requests", change: func(p *corev1.Pod) { p.Spec.Resources = &corev1.ResourceRequirements{Requests: cpu("2")} },
			explain: []string{"requests: pod {cpu=2010m}, pod set {cpu=1210m}"}},
		{name: "other priority", change: func(p *corev1.Pod) { p.Spec.Priority = ptr.To[int32](100) },
			explain: []string{"priority: pod 100, workload 0"}},
		{name: "other queue", change: func(p *corev1.Pod) { p.Labels[podkeys.QueueNameLabel] = "other-queue" },
			explain: []string{"kueue.x-k8s.io/queue-name: pod other-queue, workload user-queue"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := admittedPod()
			tt.change(pod)
			v, err := Check(pod, d, workload.SinglePodSetName, true)
			if err != nil {
				t.Fatal(err)
			}
			if v.Fits() != tt.fits {
				t.Fatalf("Fits = %v, want %v (verdict %+v)", v.Fits(), tt.fits, v)
			}
			if tt.fits {
				if v.Key() != "" {
					t.Errorf("a pod that fits has problem key %q", v.Key())
				}
				return
			}
			if v.Key() == "" {
				t.Errorf("a pod that does not fit has no problem key")
			}
			msg := Explain(pod, v, tmpl)
			for _, part := range tt.explain {
				if !strings.Contains(msg, part) {
					t.Errorf("Explain = %q, want it to hold %q", msg, part)
				}
			}
		})
	}
}

func TestCheckWhatTheDecisionCarries(t *testing.T) {
	pod := admittedPod()
	pod.Spec.NodeSelector["zone"] = "b"
	pod.Spec.Priority = ptr.To[int32](7)
	pod.Labels[podkeys.QueueNameLabel] = "elsewhere"
	// An older admitter carries none of it: nothing is checked.
	v, err := Check(pod, &admitterv1.Decision{Action: admitterv1.Decision_ACTION_ADMIT}, "main", true)
	if err != nil || !v.Fits() || v.SameShape() {
		t.Fatalf("Check against a decision without the fields = %+v, %v; want a fit, not known to be of the same shape", v, err)
	}

	d, _ := builtFrom(t, admittedPod())
	// A group's roles may differ in priority: not compared.
	pod = admittedPod()
	pod.Spec.Priority = ptr.To[int32](7)
	if v, _ := Check(pod, d, "main", false); v.Problem != nil {
		t.Errorf("priority compared for a group: %v", v.Problem)
	}
	// The queue is compared first: the workload follows a moved pod.
	pod.Labels[podkeys.QueueNameLabel] = "elsewhere"
	if v, _ := Check(pod, d, "main", true); !v.QueueMoved() {
		t.Errorf("QueueMoved = false for a pod in another queue: %+v", v)
	}
	// A set the decision has no hash for is not compared.
	if v, _ := Check(admittedPod(), d, "other-set", true); !v.Fits() {
		t.Errorf("a set without a hash did not fit: %+v", v)
	}
}

func TestSameShape(t *testing.T) {
	pod := admittedPod()
	hash, err := rolehash.Compute(&pod.Spec)
	if err != nil {
		t.Fatal(err)
	}
	d := &admitterv1.Decision{PodSetRoleHashes: map[string]string{"driver": hash, "worker": "0badc0de"}}
	if v, _ := Check(pod, d, "driver", false); !v.SameShape() {
		t.Errorf("a pod shaped like its set: SameShape false (%+v)", v)
	}
	if v, _ := Check(pod, d, "worker", false); v.SameShape() || v.Fits() {
		t.Errorf("a pod shaped otherwise: %+v, want neither SameShape nor Fits", v)
	}
	if v, _ := Check(pod, d, "unknown", false); v.SameShape() {
		t.Errorf("a set without a hash: SameShape true; such a pod must still ask to join")
	}
}

func TestExplainWithoutTheWorkload(t *testing.T) {
	v := Verdict{PodSet: "main", Hash: "aaaaaaaa", SetHash: "bbbbbbbb"}
	msg := Explain(admittedPod(), v, nil)
	for _, part := range []string{"aaaaaaaa", "bbbbbbbb", "node selector", "affinity"} {
		if !strings.Contains(msg, part) {
			t.Errorf("Explain without a template = %q, want it to hold %q", msg, part)
		}
	}
}

// BenchmarkCheck is the fit check's cost on the ungate path: one role hash
// of a pod that fits.
func BenchmarkCheck(b *testing.B) {
	pod := admittedPod()
	hash, err := rolehash.Compute(&pod.Spec)
	if err != nil {
		b.Fatal(err)
	}
	d := &admitterv1.Decision{QueueName: "user-queue", Priority: ptr.To[int32](0),
		PodSetRoleHashes: map[string]string{workload.SinglePodSetName: hash}}
	b.ReportAllocs()
	for b.Loop() {
		v, err := Check(pod, d, workload.SinglePodSetName, true)
		if err != nil || !v.Fits() {
			b.Fatalf("Check = %+v, %v; want a fit", v, err)
		}
	}
}
