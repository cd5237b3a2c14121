package workload

import (
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	sluicev1 "github.com/sluice-dev/sluice/gen/sluice/v1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/pkg/rolehash"
)

func TestSinglePodName(t *testing.T) {
	long := strings.Repeat("a", 240) + "." + strings.Repeat("b", 12) // 253, a valid pod name
	dotCut := strings.Repeat("c", 242) + ".d"                        // the cut lands right after the dot
	tests := []struct {
		name    string
		podName string
		uid     string
		want    string // empty: only check validity
	}{
		{name: "short name kept whole", podName: "foo", uid: "1234", want: "pod-foo-" + hashOf("foo/1234")},
		{name: "longest pod name is cut", podName: long, uid: "u1"},
		{name: "cut after a dot drops the dot", podName: dotCut, uid: "u2"},
		{name: "dotted name", podName: "a.b-c", uid: "u3", want: "pod-a.b-c-" + hashOf("a.b-c/u3")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := SinglePodName(tt.podName, tt.uid)
			if tt.want != "" && got != tt.want {
				t.Errorf("SinglePodName(%q, %q) = %q, want %q", tt.podName, tt.uid, got, tt.want)
			}
			if len(got) > validation.DNS1123SubdomainMaxLength {
				t.Errorf("name has %d characters, more than %d", len(got), validation.DNS1123SubdomainMaxLength)
			}
			if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
				t.Errorf("name %q is not a DNS subdomain: %v", got, errs)
			}
			if again := SinglePodName(tt.podName, tt.uid); again != got {
				t.Errorf("not deterministic: %q then %q", got, again)
			}
			if other := SinglePodName(tt.podName, tt.uid+"x"); other == got {
				t.Errorf("another uid gives the same name %q", got)
			}
		})
	}
}

func TestKeyFor(t *testing.T) {
	single := pod("p", nil)
	group := pod("g", func(p *corev1.Pod) { p.Labels[podkeys.PodGroupNameLabel] = "grp" })
	key, ok := KeyFor(single)
	if !ok || key != (Key{Namespace: "ns", Name: SinglePodName("p", "uid-p")}) {
		t.Errorf("KeyFor(single) = %v, %v", key, ok)
	}
	if key.String() != "ns/"+SinglePodName("p", "uid-p") {
		t.Errorf("Key.String() = %q", key.String())
	}
	if key, ok := KeyFor(group); !ok || key != (Key{Namespace: "ns", Name: "grp"}) {
		t.Errorf("KeyFor(group member) = %v, %v; want the group's workload ns/grp", key, ok)
	}
}

func TestPodRequests(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	tests := []struct {
		name   string
		mutate func(*corev1.PodSpec)
		want   corev1.ResourceList
	}{
		{
			name: "containers are summed",
			mutate: func(s *corev1.PodSpec) {
				s.Containers = []corev1.Container{ctr("1", "1Gi"), ctr("500m", "")}
			},
			want: list("1500m", "1Gi"),
		},
		{
			name: "a bigger init container wins",
			mutate: func(s *corev1.PodSpec) {
				s.Containers = []corev1.Container{ctr("1", "1Gi")}
				s.InitContainers = []corev1.Container{ctr("3", "512Mi"), ctr("2", "")}
			},
			want: list("3", "1Gi"),
		},
		{
			name: "sidecars add to containers and to later init containers",
			mutate: func(s *corev1.PodSpec) {
				s.Containers = []corev1.Container{ctr("1", "")}
				side := ctr("500m", "")
				side.RestartPolicy = &always
				s.InitContainers = []corev1.Container{side, ctr("2", "")}
			},
			want: list("2500m", ""),
		},
		{
			name: "overhead is added",
			mutate: func(s *corev1.PodSpec) {
				s.Containers = []corev1.Container{ctr("1", "1Gi")}
				s.Overhead = list("250m", "64Mi")
			},
			want: list("1250m", "1088Mi"),
		},
		{
			name: "pod-level requests replace the container sum, overhead still added",
			mutate: func(s *corev1.PodSpec) {
				s.Containers = []corev1.Container{ctr("1", "1Gi"), ctr("1", "")}
				s.Resources = &corev1.ResourceRequirements{Requests: list("4", "")}
				s.Overhead = list("100m", "")
			},
			want: list("4100m", "1Gi"),
		},
		{
			name: "extended resources",
			mutate: func(s *corev1.PodSpec) {
				c := ctr("1", "")
				c.Resources.Requests["example.com/gpu"] = resource.MustParse("2")
				s.Containers = []corev1.Container{c}
			},
			want: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), "example.com/gpu": resource.MustParse("2")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := pod("p", nil)
			p.Spec = corev1.PodSpec{}
			tt.mutate(&p.Spec)
			got := PodRequests(p)
			if len(got) != len(tt.want) {
				t.Fatalf("PodRequests = %v, want %v", got, tt.want)
			}
			for name, q := range tt.want {
				if g, ok := got[name]; !ok || g.Cmp(q) != 0 {
					t.Errorf("%s = %v, want %v", name, got[name], q)
				}
			}
		})
	}
}

func TestForSinglePod(t *testing.T) {
	seconds := int64(30)
	prio := int32(7)
	p := pod("job", func(p *corev1.Pod) {
		p.Spec.Priority = &prio
		p.Spec.PriorityClassName = "high"
		p.Spec.NodeSelector = map[string]string{"zone": "a"}
		p.Spec.Tolerations = []corev1.Toleration{
			{Key: "gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
			{Key: "x", Operator: corev1.TolerationOpEqual, Value: "y", Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &seconds},
		}
		p.Spec.InitContainers = []corev1.Container{ctr("2", "")}
		p.Annotations["kubectl.kubernetes.io/last-applied-configuration"] = "{...}"
	})
	got, err := ForSinglePod(p)
	if err != nil {
		t.Fatalf("ForSinglePod: %v", err)
	}
	want := &sluicev1.Workload{
		Ref:               &sluicev1.WorkloadRef{Namespace: "ns", Name: SinglePodName("job", "uid-job")},
		QueueName:         "q",
		Priority:          7,
		PriorityClassName: "high",
		Owners:            []*sluicev1.OwnerReference{{Name: "job", Uid: "uid-job", Controller: true}},
		Traceparent:       "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		PodSets: []*sluicev1.PodSet{{
			Name:         "main",
			Count:        1,
			RoleHash:     "abcd1234",
			Requests:     map[string]string{"cpu": "2", "memory": "1Gi"},
			NodeSelector: map[string]string{"zone": "a"},
			Tolerations: []*sluicev1.Toleration{
				{Key: "gpu", Operator: "Exists", Effect: "NoSchedule"},
				{Key: "x", Operator: "Equal", Value: "y", Effect: "NoExecute", TolerationSeconds: &seconds},
			},
			Labels: map[string]string{podkeys.QueueNameLabel: "q", podkeys.ManagedLabel: "true", "app": "demo"},
			Annotations: map[string]string{
				podkeys.RoleHashAnnotation:    "abcd1234",
				podkeys.TraceparentAnnotation: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
			},
		}},
	}
	if !proto.Equal(got, want) {
		t.Errorf("ForSinglePod =\n%v\nwant\n%v", got, want)
	}
}

func TestForSinglePodErrors(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*corev1.Pod)
		wantErr string
	}{
		{name: "no queue", mutate: func(p *corev1.Pod) { delete(p.Labels, podkeys.QueueNameLabel) }, wantErr: podkeys.QueueNameLabel},
		{name: "group member", mutate: func(p *corev1.Pod) { p.Labels[podkeys.PodGroupNameLabel] = "g" }, wantErr: podkeys.PodGroupNameLabel},
		{name: "no uid", mutate: func(p *corev1.Pod) { p.UID = "" }, wantErr: "metadata.uid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ForSinglePod(pod("p", tt.mutate))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ForSinglePod error = %v, want one naming %q", err, tt.wantErr)
			}
		})
	}
}

// The WorkloadPriorityClass and the maximum execution time the pods name
// reach the workload of a single pod, of a group created beforehand and of
// a declared group alike; a time the webhook would have refused queues no
// workload.
func TestPriorityClassAndMaxExecTime(t *testing.T) {
	build := map[string]func(*corev1.Pod) (*sluicev1.Workload, error){
		"single pod": ForSinglePod,
		"group": func(p *corev1.Pod) (*sluicev1.Workload, error) {
			p.Labels[podkeys.PodGroupNameLabel] = "g"
			return ForGroup("ns", "g", []*corev1.Pod{p})
		},
		"declared group": func(p *corev1.Pod) (*sluicev1.Workload, error) {
			p.Labels[podkeys.PodGroupNameLabel] = "g"
			p.Annotations[podkeys.PodGroupSetsAnnotation] = `[{"name":"driver","count":1}]`
			return ForDeclared("g", p)
		},
	}
	tests := []struct {
		name        string
		labels      map[string]string
		wantClass   string
		wantSeconds *int32
		wantErr     string
	}{
		{name: "neither"},
		{name: "a class", labels: map[string]string{podkeys.PriorityClassLabel: "urgent"}, wantClass: "urgent"},
		{name: "a time", labels: map[string]string{podkeys.MaxExecTimeLabel: "3600"}, wantSeconds: ptr.To[int32](3600)},
		{
			name:      "both, the longest time",
			labels:    map[string]string{podkeys.PriorityClassLabel: "batch", podkeys.MaxExecTimeLabel: "2147483647"},
			wantClass: "batch", wantSeconds: ptr.To[int32](2147483647),
		},
		{name: "zero seconds", labels: map[string]string{podkeys.MaxExecTimeLabel: "0"}, wantErr: `is "0"`},
		{name: "negative", labels: map[string]string{podkeys.MaxExecTimeLabel: "-1"}, wantErr: `is "-1"`},
		{name: "a duration", labels: map[string]string{podkeys.MaxExecTimeLabel: "1h"}, wantErr: `is "1h"`},
		{name: "beyond an int32", labels: map[string]string{podkeys.MaxExecTimeLabel: "2147483648"}, wantErr: `is "2147483648"`},
		{name: "empty", labels: map[string]string{podkeys.MaxExecTimeLabel: ""}, wantErr: `is ""`},
	}
	for kind, build := range build {
		for _, tt := range tests {
			t.Run(kind+"/"+tt.name, func(t *testing.T) {
				wl, err := build(pod("p", func(p *corev1.Pod) { maps.Copy(p.Labels, tt.labels) }))
				if tt.wantErr != "" {
					if err == nil || !strings.Contains(err.Error(), podkeys.MaxExecTimeLabel) || !strings.Contains(err.Error(), tt.wantErr) {
						t.Fatalf("error = %v, want one naming %s and saying %s", err, podkeys.MaxExecTimeLabel, tt.wantErr)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if got := wl.GetWorkloadPriorityClass(); got != tt.wantClass {
					t.Errorf("workload priority class = %q, want %q", got, tt.wantClass)
				}
				if got := wl.MaximumExecutionTimeSeconds; !ptr.Equal(got, tt.wantSeconds) {
					t.Errorf("maximum execution time = %s, want %s", orUnset(got), orUnset(tt.wantSeconds))
				}
			})
		}
	}
}

// orUnset renders an optional number for messages.
func orUnset(p *int32) string {
	if p == nil {
		return "unset"
	}
	return strconv.Itoa(int(*p))
}

func TestForSinglePodComputesMissingRoleHash(t *testing.T) {
	p := pod("p", func(p *corev1.Pod) { delete(p.Annotations, podkeys.RoleHashAnnotation) })
	w, err := ForSinglePod(p)
	if err != nil {
		t.Fatalf("ForSinglePod: %v", err)
	}
	if h := w.GetPodSets()[0].GetRoleHash(); len(h) == 0 {
		t.Errorf("role hash is empty, want one computed from the spec")
	}
}

// TestPodSetRoleHashOfAChangedPod: a pod set's role hash is that of the
// pod's spec as it is when the set is built. Unchanged since its creation
// (generation 1, or an API server that does not count), the webhook's
// annotation is that; a pod changed since is hashed again.
func TestPodSetRoleHashOfAChangedPod(t *testing.T) {
	for _, tt := range []struct {
		generation int64
		want       func(*corev1.Pod) string
	}{
		{0, func(*corev1.Pod) string { return "abcd1234" }},
		{1, func(*corev1.Pod) string { return "abcd1234" }},
		{2, func(p *corev1.Pod) string {
			h, err := rolehash.Compute(&p.Spec)
			if err != nil {
				t.Fatal(err)
			}
			return h
		}},
	} {
		p := pod("p", func(p *corev1.Pod) {
			p.Generation = tt.generation
			p.Spec.NodeSelector = map[string]string{"zone": "b"} // since the webhook's hash
		})
		w, err := ForSinglePod(p)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := w.GetPodSets()[0].GetRoleHash(), tt.want(p); got != want {
			t.Errorf("generation %d: role hash %s, want %s", tt.generation, got, want)
		}
		// The pod set's name in a group stays the role the pod was created
		// in: its annotation.
		g, err := ForGroup("ns", "g", []*corev1.Pod{p})
		if err != nil {
			t.Fatal(err)
		}
		if ps := g.GetPodSets()[0]; ps.GetName() != "abcd1234" || ps.GetRoleHash() != tt.want(p) {
			t.Errorf("generation %d: group pod set %s with role hash %s, want abcd1234 with %s", tt.generation, ps.GetName(), ps.GetRoleHash(), tt.want(p))
		}
	}
}

func pod(name string, mutate func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: "ns",
			UID:       types.UID("uid-" + name),
			Labels:    map[string]string{podkeys.QueueNameLabel: "q", podkeys.ManagedLabel: "true", "app": "demo"},
			Annotations: map[string]string{
				podkeys.RoleHashAnnotation:    "abcd1234",
				podkeys.TraceparentAnnotation: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
			},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{ctr("1", "1Gi")}},
	}
	if mutate != nil {
		mutate(p)
	}
	return p
}

func ctr(cpu, mem string) corev1.Container {
	return corev1.Container{Name: "c", Resources: corev1.ResourceRequirements{Requests: list(cpu, mem)}}
}

func list(cpu, mem string) corev1.ResourceList {
	l := corev1.ResourceList{}
	if cpu != "" {
		l[corev1.ResourceCPU] = resource.MustParse(cpu)
	}
	if mem != "" {
		l[corev1.ResourceMemory] = resource.MustParse(mem)
	}
	return l
}

// hashOf is the expected name suffix, computed independently of the code.
func hashOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:5]
}
