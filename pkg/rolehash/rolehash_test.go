package rolehash

import (
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

// oneContainer returns a spec with a single container carrying requests.
func oneContainer(requests corev1.ResourceList) *corev1.PodSpec {
	return &corev1.PodSpec{Containers: []corev1.Container{{
		Name:      "main",
		Resources: corev1.ResourceRequirements{Requests: requests},
	}}}
}

func cpu(q string) corev1.ResourceList {
	return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(q)}
}

func TestComputeVectors(t *testing.T) {
	tests := []struct {
		name string
		spec *corev1.PodSpec
		want string
	}{
		{name: "empty requests", spec: oneContainer(corev1.ResourceList{}), want: "a9f06f3a"},
		{name: "one cpu", spec: oneContainer(cpu("1")), want: "dc85db45"},
		{name: "nil requests", spec: oneContainer(nil), want: "7aa6c7b8"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Compute(tc.spec)
			if err != nil {
				t.Fatalf("Compute: %v", err)
			}
			if got != tc.want {
				t.Errorf("Compute = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestCanonicalBytes(t *testing.T) {
	const want = `{"spec":{"affinity":null,"containers":[{"ports":null,"resources":{"requests":{"cpu":"1"}}}],"initContainers":null,"nodeSelector":null,"overhead":null,"priority":null,"resourceClaims":null,"runtimeClassName":null,"tolerations":null,"topologySpreadConstraints":null}}`
	got, err := Canonical(oneContainer(cpu("1")))
	if err != nil {
		t.Fatalf("Canonical: %v", err)
	}
	if string(got) != want {
		t.Errorf("Canonical =\n%s\nwant\n%s", got, want)
	}
}

func TestCanonicalSortsNestedKeysAndIncludesPodResources(t *testing.T) {
	spec := oneContainer(cpu("1"))
	spec.Tolerations = []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](9007199254740993)}}
	spec.Resources = &corev1.ResourceRequirements{Limits: cpu("2")}
	got, err := Canonical(spec)
	if err != nil {
		t.Fatalf("Canonical: %v", err)
	}
	const wantTolerations = `"tolerations":[{"effect":"NoExecute","key":"k","operator":"Exists","tolerationSeconds":9007199254740993}]`
	const wantResources = `"resources":{"limits":{"cpu":"2"}}`
	for _, want := range []string{wantTolerations, wantResources} {
		if !strings.Contains(string(got), want) {
			t.Errorf("Canonical = %s, want it to contain %s", got, want)
		}
	}
}

// base is a realistic pod spec that the variations below start from.
func base() *corev1.PodSpec {
	return &corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "init", Image: "busybox", Resources: corev1.ResourceRequirements{Requests: cpu("100m")}}},
		Containers: []corev1.Container{{
			Name:      "main",
			Image:     "registry.example/app:1",
			Command:   []string{"run"},
			Env:       []corev1.EnvVar{{Name: "RANK", Value: "0"}},
			Ports:     []corev1.ContainerPort{{ContainerPort: 8080}},
			Resources: corev1.ResourceRequirements{Requests: cpu("1"), Limits: cpu("2")},
		}},
		NodeSelector: map[string]string{"pool": "a"},
		Priority:     ptr.To[int32](0),
		Volumes:      []corev1.Volume{{Name: "data"}},
	}
}

func TestComputeSensitivity(t *testing.T) {
	baseHash, err := Compute(base())
	if err != nil {
		t.Fatalf("Compute(base): %v", err)
	}
	tests := []struct {
		name     string
		change   func(*corev1.PodSpec)
		sameHash bool
	}{
		{name: "image", change: func(s *corev1.PodSpec) { s.Containers[0].Image = "other:2" }, sameHash: true},
		{name: "env", change: func(s *corev1.PodSpec) { s.Containers[0].Env[0].Value = "7" }, sameHash: true},
		{name: "command", change: func(s *corev1.PodSpec) { s.Containers[0].Command = []string{"other"} }, sameHash: true},
		{name: "container name", change: func(s *corev1.PodSpec) { s.Containers[0].Name = "worker" }, sameHash: true},
		{name: "limits", change: func(s *corev1.PodSpec) { s.Containers[0].Resources.Limits = cpu("4") }, sameHash: true},
		{name: "volumes", change: func(s *corev1.PodSpec) { s.Volumes = nil }, sameHash: true},
		{name: "hostname", change: func(s *corev1.PodSpec) { s.Hostname = "worker-3" }, sameHash: true},
		{name: "requests", change: func(s *corev1.PodSpec) { s.Containers[0].Resources.Requests = cpu("2") }},
		{name: "init requests", change: func(s *corev1.PodSpec) { s.InitContainers[0].Resources.Requests = cpu("200m") }},
		{name: "ports", change: func(s *corev1.PodSpec) { s.Containers[0].Ports[0].ContainerPort = 9090 }},
		{name: "tolerations", change: func(s *corev1.PodSpec) {
			s.Tolerations = []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists}}
		}},
		{name: "node selector", change: func(s *corev1.PodSpec) { s.NodeSelector["pool"] = "b" }},
		{name: "priority", change: func(s *corev1.PodSpec) { s.Priority = ptr.To[int32](10) }},
		{name: "runtime class", change: func(s *corev1.PodSpec) { s.RuntimeClassName = ptr.To("gvisor") }},
		{name: "affinity", change: func(s *corev1.PodSpec) { s.Affinity = &corev1.Affinity{} }},
		{name: "overhead", change: func(s *corev1.PodSpec) { s.Overhead = cpu("10m") }},
		{name: "pod resources", change: func(s *corev1.PodSpec) { s.Resources = &corev1.ResourceRequirements{Requests: cpu("1")} }},
		{name: "topology spread", change: func(s *corev1.PodSpec) {
			s.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "zone"}}
		}},
		{name: "resource claims", change: func(s *corev1.PodSpec) {
			s.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu"}}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec := base()
			tc.change(spec)
			got, err := Compute(spec)
			if err != nil {
				t.Fatalf("Compute: %v", err)
			}
			if (got == baseHash) != tc.sameHash {
				t.Errorf("hash after changing %s = %q, base %q; want same=%v", tc.name, got, baseHash, tc.sameHash)
			}
		})
	}
}

func TestComputeNilSpec(t *testing.T) {
	if _, err := Compute(nil); err == nil {
		t.Fatal("Compute(nil) succeeded, want an error")
	}
}

// FuzzCompute: for any pod spec the fuzzer can build from JSON, the hash is
// Length lowercase hex characters, the same on every call, and blind to
// what pods of one role may differ in (container names, images, env,
// commands, volumes).
func FuzzCompute(f *testing.F) {
	for _, seed := range []string{
		`{"containers":[{"name":"main","resources":{"requests":{"cpu":"1"}}}]}`,
		`{"containers":[{"name":"a","ports":[{"containerPort":80}]}],"nodeSelector":{"pool":"gpu"},"priority":5}`,
		`{"initContainers":[{"name":"i","restartPolicy":"Always"}],"containers":[{"name":"m"}],"tolerations":[{"key":"k","operator":"Exists"}]}`,
		`{}`,
	} {
		f.Add([]byte(seed), "image:tag", "value")
	}
	f.Fuzz(func(t *testing.T, specJSON []byte, image, env string) {
		var spec corev1.PodSpec
		if err := json.Unmarshal(specJSON, &spec); err != nil {
			return
		}
		h1, err := Compute(&spec)
		if err != nil {
			return // a spec JSON cannot encode (NaN quantities) is not a pod
		}
		if len(h1) != Length || strings.Trim(h1, "0123456789abcdef") != "" {
			t.Fatalf("hash %q is not %d lowercase hex characters", h1, Length)
		}
		h2, _ := Compute(&spec)
		if h1 != h2 {
			t.Fatalf("hash changed between calls: %s, %s", h1, h2)
		}
		other := spec.DeepCopy()
		other.Volumes = append(other.Volumes, corev1.Volume{Name: "scratch"})
		for i := range other.Containers {
			c := &other.Containers[i]
			c.Name, c.Image, c.Command = c.Name+"-x", image, []string{env}
			c.Env = append(c.Env, corev1.EnvVar{Name: "RANK", Value: env})
		}
		if h3, err := Compute(other); err != nil || h3 != h1 {
			t.Fatalf("hash %s changed to %s (err %v) with names, images, env, commands and volumes only", h1, h3, err)
		}
	})
}
