package scheduler

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

// The scheduler with cohorts: ClusterQueues sharing quota through a tree
// of Cohorts. Every queue here has one flavor f of cpu (see fixture); the
// messages below are the ones a waiting workload is told.

// inCohort puts a ClusterQueue in cohort ("" for none).
func inCohort(cohort string) func(*v1alpha1.ClusterQueue) {
	return func(cq *v1alpha1.ClusterQueue) { cq.Spec.CohortName = cohort }
}

// cpuLimits sets the borrowingLimit and lendingLimit of a ClusterQueue's
// cpu in flavor f; "" leaves a limit unset.
func cpuLimits(borrowing, lending string) func(*v1alpha1.ClusterQueue) {
	return func(cq *v1alpha1.ClusterQueue) {
		r := &cq.Spec.ResourceGroups[0].Flavors[0].Resources[0]
		r.BorrowingLimit, r.LendingLimit = quantityOrNil(borrowing), quantityOrNil(lending)
	}
}

// atGeneration gives a ClusterQueue a new generation, so that an edit is
// taken as one.
func atGeneration(g int64) func(*v1alpha1.ClusterQueue) {
	return func(cq *v1alpha1.ClusterQueue) { cq.Generation = g }
}

func quantityOrNil(s string) *resource.Quantity {
	if s == "" {
		return nil
	}
	q := resource.MustParse(s)
	return &q
}

// cohortDef is a Cohort object: its parent, its own cpu pool in flavor f
// ("" for no resource groups) and its cpu limits ("" for none).
type cohortDef struct {
	name, parent       string
	cpu                string
	borrowing, lending string
	generation         int64
}

func (c cohortDef) object() *v1alpha1.Cohort {
	gen := c.generation
	if gen == 0 {
		gen = 1
	}
	obj := &v1alpha1.Cohort{
		ObjectMeta: metav1.ObjectMeta{Name: c.name, UID: types.UID("cohort-" + c.name), Generation: gen},
		Spec:       v1alpha1.CohortSpec{ParentName: c.parent},
	}
	if c.cpu != "" || c.borrowing != "" || c.lending != "" {
		obj.Spec.ResourceGroups = []v1alpha1.ResourceGroup{{
			CoveredResources: []corev1.ResourceName{corev1.ResourceCPU},
			Flavors: []v1alpha1.FlavorQuotas{{Name: "f", Resources: []v1alpha1.ResourceQuota{{
				Name:           corev1.ResourceCPU,
				NominalQuota:   resource.MustParse(orZeroQuantity(c.cpu)),
				BorrowingLimit: quantityOrNil(c.borrowing),
				LendingLimit:   quantityOrNil(c.lending),
			}}}},
		}}
	}
	return obj
}

func orZeroQuantity(s string) string {
	if s == "" {
		return "0"
	}
	return s
}

// queueDef is a ClusterQueue of the fixture in a cohort, with cpu limits.
type queueDef struct {
	name, cohort, cpu  string
	borrowing, lending string
}

func (f *fixture) cohortQueues(queues []queueDef, cohorts []cohortDef) {
	for _, c := range cohorts {
		f.s.SetCohort(c.object())
	}
	for _, q := range queues {
		f.clusterQueue(q.name, q.cpu, inCohort(q.cohort), cpuLimits(q.borrowing, q.lending))
	}
}

// runCycle runs cycles until none asks for more, writes every reservation
// back as admitted, and returns the reservations and waiting messages of
// all of them.
func (f *fixture) runCycle() ([]Reservation, map[string]string, map[string]*v1alpha1.Workload) {
	var reserved []Reservation
	waiting := map[string]string{}
	written := map[string]*v1alpha1.Workload{}
	for {
		plan := f.cycle()
		reserved = append(reserved, plan.Reservations...)
		maps.Copy(waiting, messages(plan.Waiting))
		for _, r := range plan.Reservations {
			wl := f.written(r, true)
			f.s.Observe(wl)
			written[wl.Name] = wl
			delete(waiting, wl.Name)
		}
		if !plan.More {
			return reserved, waiting, written
		}
	}
}

// borrowedCPU is what the reservation records as borrowed cpu, summed over
// its pod sets; "" when nothing is.
func borrowedCPU(r Reservation) string {
	var sum resource.Quantity
	found := false
	for _, ps := range r.Assignment.PodSets {
		if q, ok := ps.Borrowed[corev1.ResourceCPU]; ok {
			sum.Add(q)
			found = true
		}
	}
	if !found {
		return ""
	}
	return sum.String()
}

// reservedAs is a reservation as the tests expect it: workload name and
// borrowed cpu ("" for none).
type reservedAs struct{ name, borrowed string }

func reservations(rs []Reservation) []reservedAs {
	var out []reservedAs
	for _, r := range rs {
		out = append(out, reservedAs{r.Workload.Name, borrowedCPU(r)})
		if r.Assignment.Borrowing != (borrowedCPU(r) != "") {
			out[len(out)-1].borrowed += fmt.Sprintf(" (Borrowing=%v)", r.Assignment.Borrowing)
		}
	}
	return out
}

// cpuFigures are the cpu figures of flavor f in a status: total, borrowed
// and lent ("-" for a figure not reported).
type cpuFigures struct{ total, borrowed, lent string }

func figuresOf(flavors []v1alpha1.FlavorUsage) cpuFigures {
	show := func(q *resource.Quantity) string {
		if q == nil {
			return "-"
		}
		return q.String()
	}
	for _, fu := range flavors {
		if fu.Name != "f" {
			continue
		}
		for _, ru := range fu.Resources {
			if ru.Name == corev1.ResourceCPU {
				return cpuFigures{ru.Total.String(), show(ru.Borrowed), show(ru.Lent)}
			}
		}
	}
	return cpuFigures{"-", "-", "-"}
}

func (f *fixture) queueFigures(name string) cpuFigures {
	cqs, _ := f.s.Statuses()
	return figuresOf(cqs[name].Flavors)
}

func (f *fixture) cohortFigures(name string) cpuFigures {
	return figuresOf(f.s.CohortStatuses()[name].Flavors)
}

// cohortStep adds workloads, runs a cycle (and the ones it asks for) and
// says what it must reserve, in order, and what the others are told.
type cohortStep struct {
	add      []stepWorkload
	reserved []reservedAs
	waiting  map[string]string
}

type stepWorkload struct {
	name, queue, cpu string
	age              int
	priority         int32
}

const insufficientCPU = "couldn't assign flavors to pod set main: insufficient quota for cpu in flavor f, "

func TestCohortAdmission(t *testing.T) {
	tests := []struct {
		name    string
		queues  []queueDef
		cohorts []cohortDef
		steps   []cohortStep
	}{{
		name:   "a queue borrows the idle quota of another",
		queues: []queueDef{{name: "a", cohort: "org", cpu: "4"}, {name: "b", cohort: "org", cpu: "4"}},
		steps: []cohortStep{{
			add:      []stepWorkload{{name: "within", queue: "a", cpu: "3"}, {name: "beyond", queue: "a", cpu: "3", age: 1}},
			reserved: []reservedAs{{"within", ""}, {"beyond", "2"}},
		}, {
			add:      []stepWorkload{{name: "rest", queue: "b", cpu: "2", age: 2}, {name: "one-more", queue: "b", cpu: "1", age: 3}},
			reserved: []reservedAs{{"rest", ""}},
			waiting: map[string]string{"one-more": insufficientCPU + "1 more needed: 0 available with borrowing, as Cohort org's pool has 8 of its 8 in use; " +
				"it fits once 1 more of Cohort org's quota is given back (others hold 2 of the queue's nominal quota, lent while it was unused)"},
		}},
	}, {
		name:   "a queue without cohort does not borrow",
		queues: []queueDef{{name: "a", cpu: "4"}, {name: "b", cohort: "org", cpu: "4"}},
		steps: []cohortStep{{
			add:      []stepWorkload{{name: "big", queue: "a", cpu: "5"}, {name: "fits", queue: "a", cpu: "4", age: 1}},
			reserved: []reservedAs{{"fits", ""}},
			waiting:  map[string]string{"big": insufficientCPU + "1 more needed"},
		}},
	}, {
		name:   "borrowingLimit caps what a queue borrows",
		queues: []queueDef{{name: "a", cohort: "org", cpu: "4", borrowing: "1"}, {name: "b", cohort: "org", cpu: "10"}},
		steps: []cohortStep{{
			add: []stepWorkload{{name: "too-big", queue: "a", cpu: "6"}, {name: "five", queue: "a", cpu: "5", age: 1},
				{name: "one-more", queue: "a", cpu: "1", age: 2}},
			reserved: []reservedAs{{"five", "1"}},
			waiting: map[string]string{
				"too-big": insufficientCPU + "1 more needed: ClusterQueue a could take at most 5 even with nothing else in use, as ClusterQueue a may borrow at most 1 (borrowingLimit)",
				"one-more": insufficientCPU + "1 more needed: 0 available with borrowing, as ClusterQueue a may borrow at most 1 (borrowingLimit); " +
					"it fits once ClusterQueue a holds 1 less",
			},
		}, {
			// b still has all of its own quota but what a borrowed.
			add:      []stepWorkload{{name: "b-all", queue: "b", cpu: "9", age: 3}, {name: "b-more", queue: "b", cpu: "1", age: 4}},
			reserved: []reservedAs{{"b-all", ""}},
			waiting: map[string]string{"b-more": insufficientCPU + "1 more needed: 0 available with borrowing, as Cohort org's pool has 14 of its 14 in use; " +
				"it fits once 1 more of Cohort org's quota is given back (others hold 1 of the queue's nominal quota, lent while it was unused)"},
		}},
	}, {
		name:   "lendingLimit keeps quota for its queue",
		queues: []queueDef{{name: "a", cohort: "org", cpu: "4", lending: "1"}, {name: "b", cohort: "org", cpu: "4"}},
		steps: []cohortStep{{
			add:      []stepWorkload{{name: "b-six", queue: "b", cpu: "6"}, {name: "b-five", queue: "b", cpu: "5", age: 1}},
			reserved: []reservedAs{{"b-five", "1"}},
			waiting: map[string]string{"b-six": insufficientCPU + "1 more needed: ClusterQueue b could take at most 5 even with nothing else in use, " +
				"as Cohort org's pool holds 5 in all"},
		}, {
			// The 3 a does not lend are a's, whatever b holds.
			add:      []stepWorkload{{name: "a-three", queue: "a", cpu: "3", age: 2}},
			reserved: []reservedAs{{"a-three", ""}},
		}, {
			add: []stepWorkload{{name: "a-one", queue: "a", cpu: "1", age: 3}},
			waiting: map[string]string{"a-one": insufficientCPU + "1 more needed: 0 available with borrowing, as Cohort org's pool has 5 of its 5 in use; " +
				"it fits once 1 more of Cohort org's quota is given back (others hold 1 of the queue's nominal quota, lent while it was unused)"},
		}},
	}, {
		name:    "a Cohort's own pool lends to a queue of a child cohort",
		queues:  []queueDef{{name: "a", cohort: "dept", cpu: "2"}},
		cohorts: []cohortDef{{name: "org", cpu: "10"}, {name: "dept", parent: "org"}},
		steps: []cohortStep{{
			add:      []stepWorkload{{name: "eight", queue: "a", cpu: "8"}, {name: "five", queue: "a", cpu: "5", age: 1}},
			reserved: []reservedAs{{"eight", "6"}},
			waiting: map[string]string{"five": insufficientCPU + "1 more needed: 4 available with borrowing, as Cohort org's pool has 8 of its 12 in use; " +
				"it fits once 1 more of Cohort org's quota is given back"},
		}},
	}, {
		name:    "a child cohort's borrowingLimit caps what its queues take from the pool above",
		queues:  []queueDef{{name: "a", cohort: "dept", cpu: "2"}, {name: "b", cohort: "org", cpu: "2"}},
		cohorts: []cohortDef{{name: "org", cpu: "10"}, {name: "dept", parent: "org", borrowing: "3"}},
		steps: []cohortStep{{
			add: []stepWorkload{{name: "six", queue: "a", cpu: "6"}, {name: "five", queue: "a", cpu: "5", age: 1},
				{name: "b-seven", queue: "b", cpu: "7", age: 2}},
			// b-seven fits in the first round, while a's head (six) does
			// not; five is a's head in the second.
			reserved: []reservedAs{{"b-seven", "5"}, {"five", "3"}},
			waiting: map[string]string{"six": insufficientCPU + "1 more needed: ClusterQueue a could take at most 5 even with nothing else in use, " +
				"as Cohort dept may borrow at most 3 (borrowingLimit)"},
		}},
	}, {
		name: "in a round, the head that fits without borrowing goes first, even if younger",
		queues: []queueDef{{name: "a", cohort: "org", cpu: "4"}, {name: "b", cohort: "org", cpu: "4"},
			{name: "c", cohort: "org", cpu: "4"}},
		steps: []cohortStep{{
			add:      []stepWorkload{{name: "old-borrowing", queue: "a", cpu: "6"}, {name: "young-own", queue: "b", cpu: "4", age: 5}},
			reserved: []reservedAs{{"young-own", ""}, {"old-borrowing", "2"}},
		}},
	}, {
		name:   "a head that no longer fits after another took the quota waits",
		queues: []queueDef{{name: "a", cohort: "org", cpu: "4"}, {name: "b", cohort: "org", cpu: "4"}},
		steps: []cohortStep{{
			add:      []stepWorkload{{name: "old-borrowing", queue: "a", cpu: "6"}, {name: "young-own", queue: "b", cpu: "4", age: 5}},
			reserved: []reservedAs{{"young-own", ""}},
			waiting: map[string]string{"old-borrowing": insufficientCPU + "2 more needed: 4 available with borrowing, as Cohort org's pool has 4 of its 8 in use; " +
				"it fits once 2 more of Cohort org's quota is given back"},
		}},
	}, {
		name:   "priority goes before not borrowing",
		queues: []queueDef{{name: "a", cohort: "org", cpu: "4"}, {name: "b", cohort: "org", cpu: "4"}},
		steps: []cohortStep{{
			add: []stepWorkload{{name: "low-own", queue: "b", cpu: "4"},
				{name: "high-borrowing", queue: "a", cpu: "6", age: 5, priority: 5}},
			reserved: []reservedAs{{"high-borrowing", "2"}},
			waiting: map[string]string{"low-own": insufficientCPU + "2 more needed: 2 available with borrowing, as Cohort org's pool has 6 of its 8 in use; " +
				"it fits once 2 more of Cohort org's quota is given back (others hold 2 of the queue's nominal quota, lent while it was unused)"},
		}},
	}, {
		name: "heads of different cohort trees do not wait for each other",
		queues: []queueDef{{name: "a", cohort: "one", cpu: "4"}, {name: "b", cohort: "one", cpu: "4"},
			{name: "c", cohort: "two", cpu: "4"}, {name: "d", cohort: "two", cpu: "4"}},
		steps: []cohortStep{{
			add: []stepWorkload{{name: "a-eight", queue: "a", cpu: "8"}, {name: "c-eight", queue: "c", cpu: "8", age: 1},
				{name: "b-one", queue: "b", cpu: "1", age: 2}, {name: "d-one", queue: "d", cpu: "1", age: 3}},
			reserved: []reservedAs{{"b-one", ""}, {"d-one", ""}},
			waiting: map[string]string{
				"a-eight": insufficientCPU + "1 more needed: 7 available with borrowing, as Cohort one's pool has 1 of its 8 in use; it fits once 1 more of Cohort one's quota is given back",
				"c-eight": insufficientCPU + "1 more needed: 7 available with borrowing, as Cohort two's pool has 1 of its 8 in use; it fits once 1 more of Cohort two's quota is given back",
			},
		}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			f.cohortQueues(tt.queues, tt.cohorts)
			for i, step := range tt.steps {
				for _, w := range step.add {
					f.s.Observe(f.workload(w.name, "lq-"+w.queue, w.cpu, w.age, w.priority))
				}
				reserved, waiting, _ := f.runCycle()
				if got := reservations(reserved); !slices.Equal(got, step.reserved) {
					t.Fatalf("step %d: reserved %v, want %v", i, got, step.reserved)
				}
				for name, want := range step.waiting {
					if got := waiting[name]; got != want {
						t.Errorf("step %d: %s is told\n  %q\nwant\n  %q", i, name, got, want)
					}
				}
				for name := range waiting {
					if _, ok := step.waiting[name]; !ok {
						t.Errorf("step %d: %s is told %q, want no message", i, name, waiting[name])
					}
				}
			}
		})
	}
}

// TestCohortFinishWakesParkedWorkloadsOfTheTree: quota given back in one
// queue is tried by the parked workloads of every queue of its cohort
// tree, in the very next cycle.
func TestCohortFinishWakesParkedWorkloadsOfTheTree(t *testing.T) {
	tests := []struct {
		name    string
		queues  []queueDef
		cohorts []cohortDef
	}{
		{"same cohort", []queueDef{{name: "a", cohort: "org", cpu: "2"}, {name: "b", cohort: "org", cpu: "2"}}, nil},
		{"a's cohort is a child of b's", []queueDef{{name: "a", cohort: "dept", cpu: "2"}, {name: "b", cohort: "org", cpu: "2"}},
			[]cohortDef{{name: "dept", parent: "org"}}},
		{"b's cohort is a child of a's", []queueDef{{name: "a", cohort: "org", cpu: "2"}, {name: "b", cohort: "dept", cpu: "2"}},
			[]cohortDef{{name: "dept", parent: "org"}}},
		{"sibling cohorts", []queueDef{{name: "a", cohort: "left", cpu: "2"}, {name: "b", cohort: "right", cpu: "2"}},
			[]cohortDef{{name: "org"}, {name: "left", parent: "org"}, {name: "right", parent: "org"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			f.cohortQueues(tt.queues, tt.cohorts)
			f.s.Observe(f.workload("a-run", "lq-a", "2", 0, 0))
			f.s.Observe(f.workload("b-run", "lq-b", "2", 1, 0))
			reserved, _, written := f.runCycle()
			if got := reservations(reserved); !slices.Equal(got, []reservedAs{{"a-run", ""}, {"b-run", ""}}) {
				t.Fatalf("reserved %v, want a-run and b-run", got)
			}
			f.s.Observe(f.workload("b-parked", "lq-b", "2", 2, 0))
			if reserved, waiting, _ := f.runCycle(); len(reserved) != 0 || waiting["b-parked"] == "" {
				t.Fatalf("with the cohort full: reserved %v, waiting %v; want b-parked parked", reservations(reserved), waiting)
			}
			if plan := f.cycle(); plan.Tried != 0 {
				t.Fatalf("an idle cycle tried %d heads", plan.Tried)
			}

			f.s.Observe(f.next(written["a-run"], finished))
			plan := f.cycle()
			if got := reservations(plan.Reservations); !slices.Equal(got, []reservedAs{{"b-parked", "2"}}) {
				t.Fatalf("the cycle after a-run finished reserved %v, want b-parked borrowing 2", got)
			}
		})
	}
}

// TestCohortJoinAndLeave: a queue's usage stays with it when it joins or
// leaves a cohort; what the cohort reports, and what the others may
// borrow, follow.
func TestCohortJoinAndLeave(t *testing.T) {
	f := newFixture(t)
	f.s.SetCohort(cohortDef{name: "org"}.object())
	f.clusterQueue("a", "4")
	f.clusterQueue("b", "2", inCohort("org"))
	f.s.Observe(f.workload("a-three", "lq-a", "3", 0, 0))
	f.s.Observe(f.workload("b-two", "lq-b", "2", 1, 0))
	f.s.Observe(f.workload("b-one", "lq-b", "1", 2, 0))
	reserved, waiting, _ := f.runCycle()
	if got := names(reserved); !slices.Equal(got, []string{"a-three", "b-two"}) {
		t.Fatalf("reserved %v, want a-three and b-two", got)
	}
	if want := insufficientCPU + "1 more needed: 0 available with borrowing, as Cohort org's pool has 2 of its 2 in use; " +
		"it fits once 1 more of Cohort org's quota is given back"; waiting["b-one"] != want {
		t.Fatalf("b-one is told\n  %q\nwant\n  %q", waiting["b-one"], want)
	}
	if got, want := f.cohortFigures("org"), (cpuFigures{"2", "0", "0"}); got != want {
		t.Fatalf("org before a joins: %+v, want %+v", got, want)
	}
	if got, want := f.queueFigures("a"), (cpuFigures{"3", "-", "-"}); got != want {
		t.Fatalf("a outside the cohort: %+v, want %+v", got, want)
	}

	// a joins: its 1 idle cpu is b's to borrow, at once.
	f.clusterQueue("a", "4", inCohort("org"), atGeneration(2))
	reserved, _, _ = f.runCycle()
	if got := reservations(reserved); !slices.Equal(got, []reservedAs{{"b-one", "1"}}) {
		t.Fatalf("after a joined: reserved %v, want b-one borrowing 1", got)
	}
	if got, want := f.cohortFigures("org"), (cpuFigures{"6", "0", "0"}); got != want {
		t.Fatalf("org after a joined: %+v, want %+v", got, want)
	}
	if got, want := f.queueFigures("a"), (cpuFigures{"3", "0", "1"}); got != want {
		t.Fatalf("a in the cohort: %+v, want %+v", got, want)
	}
	if got, want := f.queueFigures("b"), (cpuFigures{"3", "1", "0"}); got != want {
		t.Fatalf("b in the cohort: %+v, want %+v", got, want)
	}

	// a leaves: it keeps its 3, and its idle 1 though b holds it; b keeps
	// what it borrowed (nothing is evicted) but borrows nothing more.
	f.clusterQueue("a", "4", inCohort(""), atGeneration(3))
	if got, want := f.cohortFigures("org"), (cpuFigures{"3", "0", "0"}); got != want {
		t.Fatalf("org after a left: %+v, want %+v", got, want)
	}
	if got, want := f.queueFigures("a"), (cpuFigures{"3", "-", "-"}); got != want {
		t.Fatalf("a after it left: %+v, want %+v", got, want)
	}
	if got, want := f.queueFigures("b"), (cpuFigures{"3", "1", "0"}); got != want {
		t.Fatalf("b after a left: %+v, want %+v", got, want)
	}
	f.s.Observe(f.workload("a-one", "lq-a", "1", 3, 0))
	f.s.Observe(f.workload("a-two", "lq-a", "2", 4, 0))
	f.s.Observe(f.workload("b-small", "lq-b", "100m", 5, 0))
	reserved, waiting, _ = f.runCycle()
	if got := reservations(reserved); !slices.Equal(got, []reservedAs{{"a-one", ""}}) {
		t.Fatalf("after a left: reserved %v, want a-one", got)
	}
	if want := insufficientCPU + "2 more needed"; waiting["a-two"] != want {
		t.Errorf("a-two is told\n  %q\nwant\n  %q", waiting["a-two"], want)
	}
	// org's pool of 2 holds 3: 1100m must be given back for 100m more
	// to fit.
	if want := insufficientCPU + "100m more needed: 0 available with borrowing, as Cohort org's pool has 3 of its 2 in use; " +
		"it fits once 1100m more of Cohort org's quota is given back"; waiting["b-small"] != want {
		t.Errorf("b-small is told\n  %q\nwant\n  %q", waiting["b-small"], want)
	}
}

// TestCohortLimitsChangedWhileRunning: shrinking limits evicts nothing;
// later admissions respect the new limits.
func TestCohortLimitsChangedWhileRunning(t *testing.T) {
	f := newFixture(t)
	f.cohortQueues([]queueDef{{name: "a", cohort: "org", cpu: "4"}, {name: "b", cohort: "org", cpu: "4"}}, nil)
	f.s.Observe(f.workload("a-seven", "lq-a", "7", 0, 0))
	reserved, _, _ := f.runCycle()
	if got := reservations(reserved); !slices.Equal(got, []reservedAs{{"a-seven", "3"}}) {
		t.Fatalf("reserved %v, want a-seven borrowing 3", got)
	}

	// a may now borrow only 1: it keeps its 7, and takes no more.
	f.clusterQueue("a", "4", inCohort("org"), cpuLimits("1", ""), atGeneration(2))
	f.s.Observe(f.workload("a-one", "lq-a", "1", 1, 0))
	reserved, waiting, _ := f.runCycle()
	if len(reserved) != 0 {
		t.Fatalf("reserved %v beyond a's new borrowingLimit", reservations(reserved))
	}
	// a holds 7 and may hold 5: it must give back 3 for 1 more to fit.
	if want := insufficientCPU + "1 more needed: 0 available with borrowing, as ClusterQueue a may borrow at most 1 (borrowingLimit); " +
		"it fits once ClusterQueue a holds 3 less"; waiting["a-one"] != want {
		t.Errorf("a-one is told\n  %q\nwant\n  %q", waiting["a-one"], want)
	}
	if got, want := f.queueFigures("a"), (cpuFigures{"7", "3", "0"}); got != want {
		t.Fatalf("a after its limit shrank: %+v, want %+v", got, want)
	}

	// b lends only 1 from now on: the 3 it keeps are its own although a
	// holds them (nothing is evicted); b takes them, and the cohort's pool
	// is over-used until a gives back.
	f.clusterQueue("b", "4", inCohort("org"), cpuLimits("", "1"), atGeneration(2))
	f.s.Observe(f.workload("b-three", "lq-b", "3", 2, 0))
	f.s.Observe(f.workload("b-one", "lq-b", "1", 3, 0))
	reserved, waiting, _ = f.runCycle()
	if got := reservations(reserved); !slices.Equal(got, []reservedAs{{"b-three", ""}}) {
		t.Fatalf("after b's lendingLimit: reserved %v, want b-three", got)
	}
	if !strings.HasPrefix(waiting["b-one"], insufficientCPU+"1 more needed: 0 available with borrowing") {
		t.Fatalf("b-one is told %q", waiting["b-one"])
	}
	if got, want := f.queueFigures("b"), (cpuFigures{"3", "0", "1"}); got != want {
		t.Fatalf("b: %+v, want %+v", got, want)
	}

	// The limits are lifted: the parked workloads are tried again, but
	// the pool of 8 (a's 4 and b's 4) holds 10 and nothing is admitted.
	f.clusterQueue("a", "4", inCohort("org"), atGeneration(3))
	f.clusterQueue("b", "4", inCohort("org"), atGeneration(3))
	reserved, _, _ = f.runCycle()
	if len(reserved) != 0 {
		t.Fatalf("reserved %v with the cohort over-used (a 7 + b 3 of 8)", reservations(reserved))
	}
	if got, want := f.queueFigures("a"), (cpuFigures{"7", "3", "0"}); got != want {
		t.Fatalf("a: %+v, want %+v", got, want)
	}
	if got, want := f.queueFigures("b"), (cpuFigures{"3", "0", "1"}); got != want {
		t.Fatalf("b: %+v, want %+v", got, want)
	}
}

// TestCohortLoop: a loop of Cohorts makes the queues below it inactive,
// and they admit again once the loop is broken.
func TestCohortLoop(t *testing.T) {
	f := newFixture(t)
	f.cohortQueues([]queueDef{{name: "a", cohort: "x", cpu: "4"}, {name: "free", cpu: "4"}},
		[]cohortDef{{name: "x", parent: "y"}, {name: "y", parent: "z"}, {name: "z", parent: "y"}})
	f.s.Observe(f.workload("w", "lq-a", "1", 0, 0))
	f.s.Observe(f.workload("other", "lq-free", "1", 1, 0))
	reserved, waiting, _ := f.runCycle()
	loop := "the parents of Cohorts y, z form a loop: their quota cannot be shared until the loop is broken"
	if got := names(reserved); !slices.Equal(got, []string{"other"}) {
		t.Fatalf("reserved %v, want only other (outside the loop)", got)
	}
	if want := "ClusterQueue a is inactive: " + loop; waiting["w"] != want {
		t.Fatalf("w is told\n  %q\nwant\n  %q", waiting["w"], want)
	}
	cqs, lqs := f.s.Statuses()
	if st := cqs["a"]; st.Active || st.Reason != v1alpha1.ReasonCohortCycle || st.Message != loop {
		t.Fatalf("a's status %v %q %q, want inactive for the loop", st.Active, st.Reason, st.Message)
	}
	if st := lqs[types.NamespacedName{Namespace: "ns", Name: "lq-a"}]; st.Active || st.Reason != "ClusterQueueInactive" {
		t.Fatalf("lq-a's status %v %q, want inactive", st.Active, st.Reason)
	}
	cohorts := f.s.CohortStatuses()
	for _, name := range []string{"x", "y", "z"} {
		if st := cohorts[name]; st.Active || st.Reason != v1alpha1.ReasonCohortCycle || st.Message != loop {
			t.Fatalf("Cohort %s's status %v %q %q, want inactive for the loop", name, st.Active, st.Reason, st.Message)
		}
	}

	// z gets another parent: the loop is broken, and w is admitted in the
	// next cycle.
	f.s.SetCohort(cohortDef{name: "z", generation: 2}.object())
	reserved, waiting, _ = f.runCycle()
	if got := names(reserved); !slices.Equal(got, []string{"w"}) || len(waiting) != 0 {
		t.Fatalf("after the loop was broken: reserved %v, waiting %v; want w", got, waiting)
	}
	cqs, _ = f.s.Statuses()
	if st := cqs["a"]; !st.Active || st.Reason != "Ready" {
		t.Fatalf("a's status %v %q %q, want active", st.Active, st.Reason, st.Message)
	}
	for name, st := range f.s.CohortStatuses() {
		if !st.Active || st.Reason != "Ready" {
			t.Fatalf("Cohort %s's status %v %q %q, want active", name, st.Active, st.Reason, st.Message)
		}
	}

	// A loop through a ClusterQueue's own cohort, formed while it holds
	// quota: the usage stays, nothing more is admitted.
	f.s.SetCohort(cohortDef{name: "y", parent: "x", generation: 2}.object())
	f.s.Observe(f.workload("w2", "lq-a", "1", 2, 0))
	reserved, waiting, _ = f.runCycle()
	loop = "the parents of Cohorts x, y form a loop: their quota cannot be shared until the loop is broken"
	if len(reserved) != 0 || waiting["w2"] != "ClusterQueue a is inactive: "+loop {
		t.Fatalf("below the loop: reserved %v, waiting %v", names(reserved), waiting)
	}
	if got, want := f.queueFigures("a"), (cpuFigures{"1", "0", "0"}); got != want {
		t.Fatalf("a below the loop: %+v, want %+v", got, want)
	}
	f.s.DeleteCohort("y")
	reserved, _, _ = f.runCycle()
	if got := names(reserved); !slices.Equal(got, []string{"w2"}) {
		t.Fatalf("after y was deleted: reserved %v, want w2", got)
	}
}

// TestCohortStatusFigures: what ClusterQueues and Cohorts report as held,
// borrowed and lent, in a nested tree.
//
//	org (own 2) ── dept ── a (4), b (2, lendingLimit 1)
//	            └─ c (4)
func TestCohortStatusFigures(t *testing.T) {
	f := newFixture(t)
	f.cohortQueues([]queueDef{
		{name: "a", cohort: "dept", cpu: "4"},
		{name: "b", cohort: "dept", cpu: "2", lending: "1"},
		{name: "c", cohort: "org", cpu: "4"},
		{name: "alone", cpu: "4"},
	}, []cohortDef{{name: "org", cpu: "2"}, {name: "dept", parent: "org"}})

	type figures struct{ a, b, c, alone, org, dept cpuFigures }
	check := func(when string, want figures) {
		t.Helper()
		got := figures{f.queueFigures("a"), f.queueFigures("b"), f.queueFigures("c"), f.queueFigures("alone"),
			f.cohortFigures("org"), f.cohortFigures("dept")}
		if got != want {
			t.Fatalf("%s:\n got %+v\nwant %+v", when, got, want)
		}
	}
	for _, name := range []string{"org", "dept"} {
		if st := f.s.CohortStatuses()[name]; !st.Active || st.Reason != "Ready" || st.Message != "Shares quota among its ClusterQueues" {
			t.Fatalf("Cohort %s: %v %q %q, want active", name, st.Active, st.Reason, st.Message)
		}
	}
	zero := cpuFigures{"0", "0", "0"}
	// An empty subtree reports what it has quota for, at 0.
	check("empty", figures{zero, zero, zero, cpuFigures{"0", "-", "-"}, zero, zero})

	// a takes 10: its 4, b's 1 lendable, and 5 of org (2 own + c's 4).
	// dept (subtree 5) borrows 5 of org, whose free 1 leaves c 3 lent.
	// b's lendable 1 is all held, with dept's pool full: lent 1.
	f.s.Observe(f.workload("a-ten", "lq-a", "10", 0, 0))
	f.s.Observe(f.workload("alone-two", "lq-alone", "2", 1, 0))
	reserved, _, _ := f.runCycle()
	if got := reservations(reserved); !slices.Equal(got, []reservedAs{{"alone-two", ""}, {"a-ten", "6"}}) {
		t.Fatalf("reserved %v", got)
	}
	check("a holds 10", figures{
		a:     cpuFigures{"10", "6", "0"},
		b:     cpuFigures{"0", "0", "1"},
		c:     cpuFigures{"0", "0", "3"},
		alone: cpuFigures{"2", "-", "-"},
		org:   cpuFigures{"10", "0", "0"},
		dept:  cpuFigures{"10", "5", "0"},
	})

	// b takes its 1 local cpu: nothing of the pool changes.
	f.s.Observe(f.workload("b-one", "lq-b", "1", 2, 0))
	f.s.Observe(f.workload("c-one", "lq-c", "1", 3, 0))
	reserved, _, _ = f.runCycle()
	if got := reservations(reserved); !slices.Equal(got, []reservedAs{{"b-one", ""}, {"c-one", ""}}) {
		t.Fatalf("reserved %v", got)
	}
	check("b and c hold 1 each", figures{
		a:     cpuFigures{"10", "6", "0"},
		b:     cpuFigures{"1", "0", "1"},
		c:     cpuFigures{"1", "0", "3"},
		alone: cpuFigures{"2", "-", "-"},
		org:   cpuFigures{"12", "0", "0"},
		dept:  cpuFigures{"11", "5", "0"},
	})
}

// TestCohortDeletedQueueKeepsItsUsageUntilItsWorkloadsStop: a ClusterQueue
// deleted while its workloads run on borrowed quota stays in its cohort,
// without quota, until they give it back, so that the cohort does not lend
// the same quota twice.
func TestCohortDeletedQueueKeepsItsUsageUntilItsWorkloadsStop(t *testing.T) {
	f := newFixture(t)
	f.cohortQueues([]queueDef{{name: "a", cohort: "org", cpu: "2"}, {name: "b", cohort: "org", cpu: "2"}}, nil)
	f.s.Observe(f.workload("a-run", "lq-a", "3", 0, 0))
	reserved, _, written := f.runCycle()
	if got := reservations(reserved); !slices.Equal(got, []reservedAs{{"a-run", "1"}}) {
		t.Fatalf("reserved %v, want a-run borrowing 1", got)
	}

	f.s.DeleteClusterQueue("a")
	f.s.Observe(f.workload("b-own", "lq-b", "2", 1, 0))
	reserved, waiting, _ := f.runCycle()
	if len(reserved) != 0 {
		t.Fatalf("with a-run still holding 3 of the cohort's quota, reserved %v", reservations(reserved))
	}
	if want := insufficientCPU + "2 more needed: 0 available with borrowing, as Cohort org's pool has 3 of its 2 in use; " +
		"it fits once 3 more of Cohort org's quota is given back (others hold 2 of the queue's nominal quota, lent while it was unused)"; waiting["b-own"] != want {
		t.Fatalf("b-own waits with\n %q\nwant\n %q", waiting["b-own"], want)
	}

	f.s.Observe(f.next(written["a-run"], finished))
	plan := f.cycle()
	if got := reservations(plan.Reservations); !slices.Equal(got, []reservedAs{{"b-own", ""}}) {
		t.Fatalf("the cycle after a-run finished reserved %v, want b-own", got)
	}
	if f.s.tree.HasClusterQueue("a") {
		t.Fatal("the deleted queue is still in the tree after its last workload stopped")
	}
}
