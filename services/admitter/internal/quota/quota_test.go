package quota

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

func rl(kv ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

func flavorQuota(name string, kv ...string) v1alpha1.FlavorQuotas {
	fq := v1alpha1.FlavorQuotas{Name: name}
	for i := 0; i < len(kv); i += 2 {
		fq.Resources = append(fq.Resources, v1alpha1.ResourceQuota{Name: corev1.ResourceName(kv[i]), NominalQuota: resource.MustParse(kv[i+1])})
	}
	return fq
}

func clusterQueue(groups ...v1alpha1.ResourceGroup) *v1alpha1.ClusterQueue {
	return &v1alpha1.ClusterQueue{ObjectMeta: metav1.ObjectMeta{Name: "cq"}, Spec: v1alpha1.ClusterQueueSpec{ResourceGroups: groups}}
}

func group(covered []corev1.ResourceName, flavors ...v1alpha1.FlavorQuotas) v1alpha1.ResourceGroup {
	return v1alpha1.ResourceGroup{CoveredResources: covered, Flavors: flavors}
}

func podSet(name string, count int32, requests corev1.ResourceList) v1alpha1.PodSet {
	return v1alpha1.PodSet{Name: name, Count: count, Template: v1alpha1.PodSetTemplate{Requests: requests}}
}

func flavorObjects(names ...string) map[string]*v1alpha1.ResourceFlavor {
	out := map[string]*v1alpha1.ResourceFlavor{}
	for _, n := range names {
		out[n] = &v1alpha1.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: n}}
	}
	return out
}

var cpuMem = []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory}

// treeOf is a Tree holding cq alone, with used in use.
func treeOf(cq *v1alpha1.ClusterQueue, used Usage) *Tree {
	t := NewTree()
	t.SetClusterQueue(cq.Name, cq.Spec.CohortName, QuotasOf(cq.Spec.ResourceGroups))
	t.AddUsage(cq.Name, Amounts(used))
	return t
}

func TestAssign(t *testing.T) {
	tests := []struct {
		name        string
		cq          *v1alpha1.ClusterQueue
		flavors     map[string]*v1alpha1.ResourceFlavor
		podSets     []v1alpha1.PodSet
		used        Usage
		wantFlavors map[string]map[corev1.ResourceName]string // pod set -> resource -> flavor
		wantErr     string
		permanent   bool
	}{
		{
			name:        "fits",
			cq:          clusterQueue(group(cpuMem, flavorQuota("default", "cpu", "4", "memory", "4Gi"))),
			flavors:     flavorObjects("default"),
			podSets:     []v1alpha1.PodSet{podSet("main", 1, rl("cpu", "1", "memory", "1Gi"))},
			wantFlavors: map[string]map[corev1.ResourceName]string{"main": {"cpu": "default", "memory": "default"}},
		},
		{
			name:    "does not fit",
			cq:      clusterQueue(group(cpuMem, flavorQuota("default", "cpu", "2", "memory", "4Gi"))),
			flavors: flavorObjects("default"),
			podSets: []v1alpha1.PodSet{podSet("main", 1, rl("cpu", "1"))},
			used:    Usage{"default": rl("cpu", "2")},
			wantErr: "couldn't assign flavors to pod set main: insufficient quota for cpu in flavor default, 1 more needed",
		},
		{
			name:    "count multiplies requests",
			cq:      clusterQueue(group(cpuMem, flavorQuota("default", "cpu", "2", "memory", "4Gi"))),
			flavors: flavorObjects("default"),
			podSets: []v1alpha1.PodSet{podSet("main", 5, rl("cpu", "1"))},
			wantErr: "insufficient quota for cpu in flavor default, 3 more needed",
		},
		{
			name:        "exact fit",
			cq:          clusterQueue(group(cpuMem, flavorQuota("default", "cpu", "2", "memory", "4Gi"))),
			flavors:     flavorObjects("default"),
			podSets:     []v1alpha1.PodSet{podSet("main", 1, rl("cpu", "500m", "memory", "1Gi"))},
			used:        Usage{"default": rl("cpu", "1500m", "memory", "3Gi")},
			wantFlavors: map[string]map[corev1.ResourceName]string{"main": {"cpu": "default", "memory": "default"}},
		},
		{
			name:    "multi-resource: one resource short is enough to fail",
			cq:      clusterQueue(group(cpuMem, flavorQuota("default", "cpu", "8", "memory", "1Gi"))),
			flavors: flavorObjects("default"),
			podSets: []v1alpha1.PodSet{podSet("main", 2, rl("cpu", "1", "memory", "1Gi"))},
			wantErr: "insufficient quota for memory in flavor default, 1Gi more needed",
		},
		{
			name: "second flavor when the first is full",
			cq: clusterQueue(group(cpuMem,
				flavorQuota("on-demand", "cpu", "2", "memory", "4Gi"),
				flavorQuota("spot", "cpu", "4", "memory", "4Gi"))),
			flavors:     flavorObjects("on-demand", "spot"),
			podSets:     []v1alpha1.PodSet{podSet("main", 1, rl("cpu", "1"))},
			used:        Usage{"on-demand": rl("cpu", "2")},
			wantFlavors: map[string]map[corev1.ResourceName]string{"main": {"cpu": "spot"}},
		},
		{
			name: "every flavor full lists each",
			cq: clusterQueue(group(cpuMem,
				flavorQuota("a", "cpu", "1", "memory", "4Gi"),
				flavorQuota("b", "cpu", "1", "memory", "4Gi"))),
			flavors: flavorObjects("a", "b"),
			podSets: []v1alpha1.PodSet{podSet("main", 1, rl("cpu", "2"))},
			wantErr: "insufficient quota for cpu in flavor a, 1 more needed; insufficient quota for cpu in flavor b, 1 more needed",
		},
		{
			name:      "uncovered resource",
			cq:        clusterQueue(group([]corev1.ResourceName{"cpu"}, flavorQuota("default", "cpu", "4"))),
			flavors:   flavorObjects("default"),
			podSets:   []v1alpha1.PodSet{podSet("main", 1, rl("cpu", "1", "nvidia.com/gpu", "1"))},
			wantErr:   "resource nvidia.com/gpu is not covered by ClusterQueue cq",
			permanent: true,
		},
		{
			name:    "pod sets of one workload add up",
			cq:      clusterQueue(group([]corev1.ResourceName{"cpu"}, flavorQuota("default", "cpu", "3"))),
			flavors: flavorObjects("default"),
			podSets: []v1alpha1.PodSet{podSet("driver", 1, rl("cpu", "1")), podSet("workers", 3, rl("cpu", "1"))},
			wantErr: "couldn't assign flavors to pod set workers: insufficient quota for cpu in flavor default, 1 more needed",
		},
		{
			name: "pod sets may land in different flavors",
			cq: clusterQueue(group([]corev1.ResourceName{"cpu"},
				flavorQuota("a", "cpu", "1"), flavorQuota("b", "cpu", "3"))),
			flavors:     flavorObjects("a", "b"),
			podSets:     []v1alpha1.PodSet{podSet("driver", 1, rl("cpu", "1")), podSet("workers", 3, rl("cpu", "1"))},
			wantFlavors: map[string]map[corev1.ResourceName]string{"driver": {"cpu": "a"}, "workers": {"cpu": "b"}},
		},
		{
			name: "separate resource groups get their own flavors",
			cq: clusterQueue(
				group([]corev1.ResourceName{"cpu"}, flavorQuota("cpu-f", "cpu", "4")),
				group([]corev1.ResourceName{"nvidia.com/gpu"}, flavorQuota("a100", "nvidia.com/gpu", "1"), flavorQuota("h100", "nvidia.com/gpu", "8"))),
			flavors:     flavorObjects("cpu-f", "a100", "h100"),
			podSets:     []v1alpha1.PodSet{podSet("main", 2, rl("cpu", "1", "nvidia.com/gpu", "1"))},
			wantFlavors: map[string]map[corev1.ResourceName]string{"main": {"cpu": "cpu-f", "nvidia.com/gpu": "h100"}},
		},
		{
			name:    "missing flavor object is skipped",
			cq:      clusterQueue(group([]corev1.ResourceName{"cpu"}, flavorQuota("ghost", "cpu", "4"))),
			flavors: flavorObjects(),
			podSets: []v1alpha1.PodSet{podSet("main", 1, rl("cpu", "1"))},
			wantErr: "flavor ghost not found",
		},
		{
			name:        "zero requests need nothing",
			cq:          clusterQueue(group([]corev1.ResourceName{"cpu"}, flavorQuota("default", "cpu", "0"))),
			flavors:     flavorObjects("default"),
			podSets:     []v1alpha1.PodSet{podSet("main", 1, rl("cpu", "0"))},
			wantFlavors: map[string]map[corev1.ResourceName]string{"main": {}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Assign(tc.cq, tc.podSets, tc.flavors, treeOf(tc.cq, tc.used))
			if tc.wantErr != "" {
				var unfit *UnfitError
				if !errors.As(err, &unfit) {
					t.Fatalf("Assign error = %v, want an *UnfitError containing %q", err, tc.wantErr)
				}
				if !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Assign error = %q, want it to contain %q", err, tc.wantErr)
				}
				if unfit.Permanent != tc.permanent {
					t.Fatalf("Permanent = %v, want %v", unfit.Permanent, tc.permanent)
				}
				return
			}
			if err != nil {
				t.Fatalf("Assign: %v", err)
			}
			if len(got.PodSets) != len(tc.podSets) {
				t.Fatalf("got %d assignments, want %d", len(got.PodSets), len(tc.podSets))
			}
			for _, a := range got.PodSets {
				want := tc.wantFlavors[a.Name]
				if len(a.Flavors) != len(want) {
					t.Fatalf("pod set %s flavors = %v, want %v", a.Name, a.Flavors, want)
				}
				for res, f := range want {
					if a.Flavors[res] != f {
						t.Fatalf("pod set %s flavor of %s = %q, want %q", a.Name, res, a.Flavors[res], f)
					}
				}
			}
		})
	}
}

func TestAssignRecordsUsage(t *testing.T) {
	cq := clusterQueue(group(cpuMem, flavorQuota("default", "cpu", "8", "memory", "8Gi")))
	got, err := Assign(cq, []v1alpha1.PodSet{podSet("main", 3, rl("cpu", "500m", "memory", "1Gi"))}, flavorObjects("default"), treeOf(cq, nil))
	if err != nil {
		t.Fatal(err)
	}
	a := got.PodSets[0]
	if *a.Count != 3 {
		t.Fatalf("count = %d, want 3", *a.Count)
	}
	cpu := a.ResourceUsage[corev1.ResourceCPU]
	if cpu.Cmp(resource.MustParse("1500m")) != 0 {
		t.Fatalf("cpu usage = %s, want 1500m", cpu.String())
	}
	total := got.Usage.Get("default", corev1.ResourceMemory)
	if total.Cmp(resource.MustParse("3Gi")) != 0 {
		t.Fatalf("memory usage = %s, want 3Gi", total.String())
	}
}

func TestFlavorTaintsAndSelectors(t *testing.T) {
	cq := clusterQueue(group([]corev1.ResourceName{"cpu"}, flavorQuota("tainted", "cpu", "4"), flavorQuota("zone-b", "cpu", "4"), flavorQuota("plain", "cpu", "4")))
	flavors := flavorObjects("tainted", "zone-b", "plain")
	flavors["tainted"].Spec.NodeTaints = []corev1.Taint{{Key: "spot", Value: "true", Effect: corev1.TaintEffectNoSchedule}}
	flavors["zone-b"].Spec.NodeLabels = map[string]string{"zone": "b"}

	tests := []struct {
		name     string
		template v1alpha1.PodSetTemplate
		want     string
	}{
		{"untolerated taint and mismatched selector skip to plain",
			v1alpha1.PodSetTemplate{NodeSelector: map[string]string{"zone": "a"}}, "plain"},
		{"toleration allows the tainted flavor",
			v1alpha1.PodSetTemplate{Tolerations: []corev1.Toleration{{Key: "spot", Operator: corev1.TolerationOpExists}}}, "tainted"},
		{"matching selector allows zone-b",
			v1alpha1.PodSetTemplate{NodeSelector: map[string]string{"zone": "b"}}, "zone-b"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.template.Requests = rl("cpu", "1")
			got, err := Assign(cq, []v1alpha1.PodSet{{Name: "main", Count: 1, Template: tc.template}}, flavors, treeOf(cq, nil))
			if err != nil {
				t.Fatal(err)
			}
			if f := got.PodSets[0].Flavors["cpu"]; f != tc.want {
				t.Fatalf("flavor = %q, want %q", f, tc.want)
			}
		})
	}
}

func TestWorkloadUsage(t *testing.T) {
	three := int32(3)
	wl := func(reclaim ...v1alpha1.ReclaimablePod) *v1alpha1.Workload {
		return &v1alpha1.Workload{
			Spec: v1alpha1.WorkloadSpec{PodSets: []v1alpha1.PodSet{podSet("workers", 3, rl("cpu", "2", "memory", "1Gi"))}},
			Status: v1alpha1.WorkloadStatus{
				Admission: &v1alpha1.Admission{ClusterQueue: "cq", PodSetAssignments: []v1alpha1.PodSetAssignment{{
					Name: "workers", Count: &three,
					Flavors: map[corev1.ResourceName]string{"cpu": "default", "memory": "default"},
				}}},
				ReclaimablePods: reclaim,
			},
		}
	}
	tests := []struct {
		name    string
		wl      *v1alpha1.Workload
		wantCPU string
		wantMem string
	}{
		{"whole workload", wl(), "6", "3Gi"},
		{"reclaimable pods release their share", wl(v1alpha1.ReclaimablePod{Name: "workers", Count: 2}), "2", "1Gi"},
		{"all pods reclaimed", wl(v1alpha1.ReclaimablePod{Name: "workers", Count: 3}), "0", "0"},
		{"not reserved holds nothing", &v1alpha1.Workload{Spec: wl().Spec}, "0", "0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			u := WorkloadUsage(tc.wl)
			cpu, mem := u.Get("default", "cpu"), u.Get("default", "memory")
			if cpu.Cmp(resource.MustParse(tc.wantCPU)) != 0 || mem.Cmp(resource.MustParse(tc.wantMem)) != 0 {
				t.Fatalf("usage = cpu %s memory %s, want %s %s", cpu.String(), mem.String(), tc.wantCPU, tc.wantMem)
			}
		})
	}
}

func TestReclaimFreesRoomForAnother(t *testing.T) {
	two := int32(2)
	running := &v1alpha1.Workload{
		Spec: v1alpha1.WorkloadSpec{PodSets: []v1alpha1.PodSet{podSet("main", 2, rl("cpu", "1"))}},
		Status: v1alpha1.WorkloadStatus{Admission: &v1alpha1.Admission{PodSetAssignments: []v1alpha1.PodSetAssignment{{
			Name: "main", Count: &two, Flavors: map[corev1.ResourceName]string{"cpu": "default"},
		}}}},
	}
	cq := clusterQueue(group([]corev1.ResourceName{"cpu"}, flavorQuota("default", "cpu", "2")))
	next := []v1alpha1.PodSet{podSet("main", 1, rl("cpu", "1"))}
	if _, err := Assign(cq, next, flavorObjects("default"), treeOf(cq, WorkloadUsage(running))); err == nil {
		t.Fatal("Assign succeeded while the quota is fully used")
	}
	running.Status.ReclaimablePods = []v1alpha1.ReclaimablePod{{Name: "main", Count: 1}}
	if _, err := Assign(cq, next, flavorObjects("default"), treeOf(cq, WorkloadUsage(running))); err != nil {
		t.Fatalf("Assign after a pod was reclaimed: %v", err)
	}
}
