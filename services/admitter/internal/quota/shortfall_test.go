package quota

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

// cohortMember is a ClusterQueue named name in cohort, with one flavor f of
// cpu and memory: nominal quotas and optional limits as quantities.
type cohortMember struct {
	name, cohort       string
	cpu, memory        string
	borrowing, lending string // cpu limits; "" for none
	usedCPU, usedMem   string
}

func (m cohortMember) clusterQueue() *v1alpha1.ClusterQueue {
	cpu := v1alpha1.ResourceQuota{Name: corev1.ResourceCPU, NominalQuota: resource.MustParse(m.cpu)}
	if m.borrowing != "" {
		q := resource.MustParse(m.borrowing)
		cpu.BorrowingLimit = &q
	}
	if m.lending != "" {
		q := resource.MustParse(m.lending)
		cpu.LendingLimit = &q
	}
	mem := v1alpha1.ResourceQuota{Name: corev1.ResourceMemory, NominalQuota: resource.MustParse(orZero(m.memory))}
	return &v1alpha1.ClusterQueue{
		ObjectMeta: metav1.ObjectMeta{Name: m.name},
		Spec: v1alpha1.ClusterQueueSpec{
			CohortName: m.cohort,
			ResourceGroups: []v1alpha1.ResourceGroup{{
				CoveredResources: cpuMem,
				Flavors:          []v1alpha1.FlavorQuotas{{Name: "f", Resources: []v1alpha1.ResourceQuota{cpu, mem}}},
			}},
		},
	}
}

func orZero(s string) string {
	if s == "" {
		return "0"
	}
	return s
}

// cohortDecl is a Cohort: its parent, its own cpu pool and cpu limits.
type cohortDecl struct {
	name, parent, cpu, borrowing string
}

func buildTree(members []cohortMember, cohorts []cohortDecl) (*Tree, map[string]*v1alpha1.ClusterQueue) {
	t := NewTree()
	for _, c := range cohorts {
		q := Quota{Nominal: AmountOf(corev1.ResourceCPU, resource.MustParse(orZero(c.cpu)))}
		if c.borrowing != "" {
			bl := AmountOf(corev1.ResourceCPU, resource.MustParse(c.borrowing))
			q.BorrowingLimit = &bl
		}
		t.SetCohort(c.name, c.parent, map[FR]Quota{{Flavor: "f", Resource: corev1.ResourceCPU}: q})
	}
	cqs := map[string]*v1alpha1.ClusterQueue{}
	for _, m := range members {
		cq := m.clusterQueue()
		cqs[m.name] = cq
		t.SetClusterQueue(cq.Name, cq.Spec.CohortName, QuotasOf(cq.Spec.ResourceGroups))
		t.AddUsage(cq.Name, Amounts(Usage{"f": rl("cpu", orZero(m.usedCPU), "memory", orZero(m.usedMem))}))
	}
	return t, cqs
}

// TestWhyNot is the format of the message a workload that does not fit is
// told: which flavor and resource are short and by how much; in a cohort,
// what borrowing leaves available and what stops it, or that no amount of
// freed quota is enough and which limit says so.
func TestWhyNot(t *testing.T) {
	tests := []struct {
		name    string
		members []cohortMember
		cohorts []cohortDecl
		request corev1.ResourceList
		want    string
	}{{
		name:    "no cohort: the nominal quota is all",
		members: []cohortMember{{name: "a", cpu: "4", usedCPU: "3"}},
		request: rl("cpu", "2"),
		want:    "insufficient quota for cpu in flavor f, 1 more needed",
	}, {
		name:    "no cohort, in bytes",
		members: []cohortMember{{name: "a", cpu: "4", memory: "4Gi", usedMem: "3Gi"}},
		request: rl("memory", "2Gi"),
		want:    "insufficient quota for memory in flavor f, 1Gi more needed",
	}, {
		name: "the cohort's quota is in use, some of it lent by the queue",
		members: []cohortMember{
			{name: "a", cohort: "org", cpu: "4", usedCPU: "1"},
			{name: "b", cohort: "org", cpu: "4", usedCPU: "6"},
		},
		request: rl("cpu", "3"),
		want: "insufficient quota for cpu in flavor f, 2 more needed: 1 available with borrowing, as Cohort org's pool has 7 of its 8 in use; " +
			"it fits once 2 more of Cohort org's quota is given back (others hold 2 of the queue's nominal quota, lent while it was unused)",
	}, {
		name: "the queue's borrowingLimit stops it",
		members: []cohortMember{
			{name: "a", cohort: "org", cpu: "4", borrowing: "1", usedCPU: "4"},
			{name: "b", cohort: "org", cpu: "10"},
		},
		request: rl("cpu", "2"),
		want: "insufficient quota for cpu in flavor f, 1 more needed: 1 available with borrowing, as ClusterQueue a may borrow at most 1 (borrowingLimit); " +
			"it fits once ClusterQueue a holds 1 less",
	}, {
		name: "more than the borrowingLimit allows, ever",
		members: []cohortMember{
			{name: "a", cohort: "org", cpu: "4", borrowing: "1"},
			{name: "b", cohort: "org", cpu: "10"},
		},
		request: rl("cpu", "6"),
		want:    "insufficient quota for cpu in flavor f, 1 more needed: ClusterQueue a could take at most 5 even with nothing else in use, as ClusterQueue a may borrow at most 1 (borrowingLimit)",
	}, {
		name: "more than the cohort has, the others' lendingLimits counted",
		members: []cohortMember{
			{name: "a", cohort: "org", cpu: "4"},
			{name: "b", cohort: "org", cpu: "4", lending: "2"},
		},
		request: rl("cpu", "7"),
		want:    "insufficient quota for cpu in flavor f, 1 more needed: ClusterQueue a could take at most 6 even with nothing else in use, as Cohort org's pool holds 6 in all",
	}, {
		name:    "a nested cohort's borrowingLimit caps what its queues take from the pool above",
		members: []cohortMember{{name: "a", cohort: "dept", cpu: "2"}},
		cohorts: []cohortDecl{{name: "org", cpu: "10"}, {name: "dept", parent: "org", borrowing: "1"}},
		request: rl("cpu", "4"),
		want:    "insufficient quota for cpu in flavor f, 1 more needed: ClusterQueue a could take at most 3 even with nothing else in use, as Cohort dept may borrow at most 1 (borrowingLimit)",
	}, {
		name:    "below a loop of cohorts nothing is available",
		members: []cohortMember{{name: "a", cohort: "x", cpu: "4"}},
		cohorts: []cohortDecl{{name: "x", parent: "y"}, {name: "y", parent: "x"}},
		request: rl("cpu", "1"),
		want:    "insufficient quota for cpu in flavor f, 1 more needed: ClusterQueue a is below a loop of Cohorts (x)",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tree, cqs := buildTree(tc.members, tc.cohorts)
			_, err := Assign(cqs["a"], []v1alpha1.PodSet{podSet("main", 1, tc.request)}, flavorObjects("f"), tree)
			if err == nil {
				t.Fatal("Assign fitted the workload; want a shortfall")
			}
			if got := strings.TrimPrefix(err.Error(), "couldn't assign flavors to pod set main: "); got != tc.want {
				t.Fatalf("message:\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

// TestAssignRecordsBorrowing: each pod set records what it took beyond
// the queue's nominal quota, counting what the earlier pod sets took, and
// the assignment says it borrows; a nested cohort's own pool lends too.
func TestAssignRecordsBorrowing(t *testing.T) {
	tests := []struct {
		name          string
		members       []cohortMember
		cohorts       []cohortDecl
		podSets       []v1alpha1.PodSet
		wantBorrowed  map[string]string // pod set -> borrowed cpu ("" for none)
		wantBorrowing bool
	}{{
		name:          "within the nominal quota nothing is borrowed",
		members:       []cohortMember{{name: "a", cohort: "org", cpu: "4"}, {name: "b", cohort: "org", cpu: "4"}},
		podSets:       []v1alpha1.PodSet{podSet("main", 4, rl("cpu", "1"))},
		wantBorrowed:  map[string]string{"main": ""},
		wantBorrowing: false,
	}, {
		name:          "the second pod set borrows what the first left short",
		members:       []cohortMember{{name: "a", cohort: "org", cpu: "4", usedCPU: "1"}, {name: "b", cohort: "org", cpu: "4"}},
		podSets:       []v1alpha1.PodSet{podSet("driver", 1, rl("cpu", "2")), podSet("workers", 3, rl("cpu", "1"))},
		wantBorrowed:  map[string]string{"driver": "", "workers": "2"},
		wantBorrowing: true,
	}, {
		name:          "a nested cohort's pool lends what no queue has",
		members:       []cohortMember{{name: "a", cohort: "dept", cpu: "2"}},
		cohorts:       []cohortDecl{{name: "org", cpu: "10"}, {name: "dept", parent: "org"}},
		podSets:       []v1alpha1.PodSet{podSet("main", 8, rl("cpu", "500m"))},
		wantBorrowed:  map[string]string{"main": "2"},
		wantBorrowing: true,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tree, cqs := buildTree(tc.members, tc.cohorts)
			asg, err := Assign(cqs["a"], tc.podSets, flavorObjects("f"), tree)
			if err != nil {
				t.Fatal(err)
			}
			if asg.Borrowing != tc.wantBorrowing {
				t.Fatalf("Borrowing = %v, want %v", asg.Borrowing, tc.wantBorrowing)
			}
			for _, ps := range asg.PodSets {
				got := ps.Borrowed[corev1.ResourceCPU]
				want := tc.wantBorrowed[ps.Name]
				if want == "" {
					if len(ps.Borrowed) != 0 {
						t.Fatalf("pod set %s borrowed %v, want nothing", ps.Name, ps.Borrowed)
					}
					continue
				}
				if got.Cmp(resource.MustParse(want)) != 0 {
					t.Fatalf("pod set %s borrowed %s cpu, want %s", ps.Name, got.String(), want)
				}
			}
		})
	}
}
