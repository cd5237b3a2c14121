package scheduler

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/services/admitter/internal/quota"
)

// fixture builds a Scheduler's world: one flavor "f" and ClusterQueues
// with a LocalQueue "lq-<cq>" each in namespace "ns".
type fixture struct {
	t   testing.TB
	s   *Scheduler
	rv  int
	now time.Time
}

func newFixture(t testing.TB) *fixture {
	f := &fixture{t: t, s: New(), now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	f.s.SetFlavor(&v1alpha1.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: "f", UID: "f", Generation: 1}})
	f.s.SetNamespace("ns", nil)
	return f
}

func (f *fixture) clusterQueue(name, cpu string, mutate ...func(*v1alpha1.ClusterQueue)) {
	cq := &v1alpha1.ClusterQueue{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name), Generation: 1},
		Spec: v1alpha1.ClusterQueueSpec{ResourceGroups: []v1alpha1.ResourceGroup{{
			CoveredResources: []corev1.ResourceName{corev1.ResourceCPU},
			Flavors: []v1alpha1.FlavorQuotas{{Name: "f", Resources: []v1alpha1.ResourceQuota{{
				Name: corev1.ResourceCPU, NominalQuota: resource.MustParse(cpu),
			}}}},
		}}},
	}
	for _, m := range mutate {
		m(cq)
	}
	f.s.SetClusterQueue(cq)
	f.s.SetLocalQueue(&v1alpha1.LocalQueue{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "lq-" + name, UID: types.UID("lq-" + name), Generation: 1},
		Spec:       v1alpha1.LocalQueueSpec{ClusterQueue: name},
	})
}

// workload is a pending workload of one pod asking for cpu, created age
// seconds after the fixture's epoch.
func (f *fixture) workload(name, queue, cpu string, age int, priority int32) *v1alpha1.Workload {
	f.rv++
	return &v1alpha1.Workload{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: name, UID: types.UID("uid-" + name), Generation: 1,
			ResourceVersion:   fmt.Sprint(f.rv),
			CreationTimestamp: metav1.NewTime(f.now.Add(time.Duration(age) * time.Second)),
		},
		Spec: v1alpha1.WorkloadSpec{
			QueueName: queue,
			Priority:  ptr.To(priority),
			PodSets: []v1alpha1.PodSet{{Name: "main", Count: 1, Template: v1alpha1.PodSetTemplate{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)},
			}}},
		},
	}
}

// next returns a newer version of wl changed by mutate.
func (f *fixture) next(wl *v1alpha1.Workload, mutate func(*v1alpha1.Workload)) *v1alpha1.Workload {
	out := wl.DeepCopy()
	f.rv++
	out.ResourceVersion = fmt.Sprint(f.rv)
	mutate(out)
	return out
}

// written is the version of r's workload its reservation write returns.
func (f *fixture) written(r Reservation, admitted bool) *v1alpha1.Workload {
	return f.next(r.Workload, func(wl *v1alpha1.Workload) {
		wl.Status.Admission = &v1alpha1.Admission{ClusterQueue: r.ClusterQueue.Name, ReservationID: "r-" + wl.Name, PodSetAssignments: r.Assignment.PodSets}
		wl.Status.Conditions = append(wl.Status.Conditions, metav1.Condition{Type: v1alpha1.WorkloadQuotaReserved, Status: metav1.ConditionTrue})
		if admitted {
			wl.Status.Conditions = append(wl.Status.Conditions, metav1.Condition{Type: v1alpha1.WorkloadAdmitted, Status: metav1.ConditionTrue})
		}
	})
}

func finished(wl *v1alpha1.Workload) {
	wl.Status.Conditions = append(wl.Status.Conditions, metav1.Condition{Type: v1alpha1.WorkloadFinished, Status: metav1.ConditionTrue})
}

func (f *fixture) cycle() Plan { return f.s.Cycle(f.now.Add(time.Hour)) }

func names(rs []Reservation) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Workload.Name)
	}
	return out
}

func messages(ws []Waiting) map[string]string {
	out := map[string]string{}
	for _, w := range ws {
		out[w.Workload.Name] = w.Message
	}
	return out
}

func TestCycleAdmitsWhatFitsAndParksTheRest(t *testing.T) {
	f := newFixture(t)
	f.clusterQueue("cq", "2")
	a, b, c := f.workload("a", "lq-cq", "1", 0, 0), f.workload("b", "lq-cq", "1", 1, 0), f.workload("c", "lq-cq", "1", 2, 0)
	for _, wl := range []*v1alpha1.Workload{c, b, a} {
		f.s.Observe(wl)
	}
	plan := f.cycle()
	if got := names(plan.Reservations); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("reserved %v, want [a b]", got)
	}
	want := "couldn't assign flavors to pod set main: insufficient quota for cpu in flavor f, 1 more needed"
	if got := messages(plan.Waiting); len(got) != 1 || got["c"] != want {
		t.Fatalf("waiting = %v, want c: %q", got, want)
	}

	// Nothing changed: the next cycle tries nothing, even when the
	// reservations' writes and a message write come back.
	f.s.Observe(f.written(plan.Reservations[0], true))
	f.s.Observe(f.written(plan.Reservations[1], true))
	f.s.Observe(f.next(c, func(wl *v1alpha1.Workload) {
		wl.Status.Conditions = []metav1.Condition{{Type: v1alpha1.WorkloadQuotaReserved, Status: metav1.ConditionFalse, Message: want}}
	}))
	if plan := f.cycle(); plan.Tried != 0 || len(plan.Reservations) != 0 || len(plan.Waiting) != 0 {
		t.Fatalf("idle cycle = %+v, want nothing tried", plan)
	}

	// a finishes: its quota is freed, and c fits.
	f.s.Observe(f.next(f.written(plan.Reservations[0], true), finished))
	if got := names(f.cycle().Reservations); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("after a finished: reserved %v, want [c]", got)
	}
}

func TestCycleOrdersHeadsByPriorityThenAge(t *testing.T) {
	f := newFixture(t)
	for _, name := range []string{"alpha", "bravo", "charlie"} {
		f.clusterQueue(name, "1")
	}
	f.s.Observe(f.workload("old-low", "lq-alpha", "1", 0, 1))
	f.s.Observe(f.workload("young-high", "lq-bravo", "1", 5, 9))
	f.s.Observe(f.workload("mid-low", "lq-charlie", "1", 3, 1))
	got := names(f.cycle().Reservations)
	if want := []string{"young-high", "old-low", "mid-low"}; !slices.Equal(got, want) {
		t.Fatalf("admission order %v, want %v (priority, then age; not queue name)", got, want)
	}
}

// TestCycleStopsAtMaxReservations: however deep the queue, a cycle hands
// out at most MaxReservationsPerCycle reservations and asks for the next;
// a workload of higher priority that comes meanwhile goes first in it.
func TestCycleStopsAtMaxReservations(t *testing.T) {
	const pending = MaxReservationsPerCycle + 10
	f := newFixture(t)
	f.clusterQueue("cq", fmt.Sprint(pending+1))
	for i := range pending {
		f.s.Observe(f.workload(fmt.Sprintf("w%05d", i), "lq-cq", "1", i, 0))
	}
	plan := f.cycle()
	if len(plan.Reservations) != MaxReservationsPerCycle || !plan.More {
		t.Fatalf("reserved %d (more: %v), want %d and more", len(plan.Reservations), plan.More, MaxReservationsPerCycle)
	}
	if got := names(plan.Reservations); got[0] != "w00000" || got[len(got)-1] != fmt.Sprintf("w%05d", MaxReservationsPerCycle-1) {
		t.Fatalf("reserved %s to %s, want the oldest first", got[0], got[len(got)-1])
	}

	f.s.Observe(f.workload("urgent", "lq-cq", "1", pending, 9))
	plan = f.cycle()
	got := names(plan.Reservations)
	if len(got) != 11 || got[0] != "urgent" || plan.More {
		t.Fatalf("the next cycle reserved %v (more: %v), want urgent first, then the 10 left", got, plan.More)
	}
}

// TestCycleStopsAtMaxTries: heads that do not fit are tried at most
// MaxTriesPerCycle times in a cycle, which asks for the next to try the
// rest.
func TestCycleStopsAtMaxTries(t *testing.T) {
	const pending = MaxTriesPerCycle + 10
	f := newFixture(t)
	f.clusterQueue("cq", "1")
	for i := range pending {
		f.s.Observe(f.workload(fmt.Sprintf("w%05d", i), "lq-cq", "2", i, 0))
	}
	plan := f.cycle()
	if plan.Tried != MaxTriesPerCycle || len(plan.Reservations) != 0 || !plan.More {
		t.Fatalf("tried %d, reserved %d (more: %v); want %d tried, none reserved, and more", plan.Tried, len(plan.Reservations), plan.More, MaxTriesPerCycle)
	}
	if plan = f.cycle(); plan.Tried != 10 || plan.More {
		t.Fatalf("the next cycle tried %d (more: %v), want the 10 left", plan.Tried, plan.More)
	}
}

func TestCompareCandidates(t *testing.T) {
	f := newFixture(t)
	cand := func(name string, age int, priority int32, borrowing bool) candidate {
		return candidate{e: &entry{wl: f.workload(name, "lq", "1", age, priority)}, asg: quota.Assignment{Borrowing: borrowing}}
	}
	tests := []struct {
		name string
		a, b candidate
	}{
		{"higher priority first", cand("a", 9, 5, true), cand("b", 0, 1, false)},
		{"without borrowing first", cand("a", 9, 1, false), cand("b", 0, 1, true)},
		{"older first", cand("a", 0, 1, false), cand("b", 1, 1, false)},
		{"name breaks ties", cand("a", 0, 1, false), cand("b", 0, 1, false)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if compareCandidates(tt.a, tt.b) >= 0 || compareCandidates(tt.b, tt.a) <= 0 {
				t.Fatalf("want %s before %s", tt.a.e.wl.Name, tt.b.e.wl.Name)
			}
		})
	}
}

func TestQueueingStrategies(t *testing.T) {
	tests := []struct {
		strategy     v1alpha1.QueueingStrategy
		wantReserved []string
		wantWaiting  map[string]string
	}{
		{v1alpha1.BestEffortFIFO, []string{"small"}, map[string]string{"big": "insufficient quota"}},
		{v1alpha1.StrictFIFO, nil, map[string]string{"big": "insufficient quota", "small": "waiting behind ns/big in StrictFIFO ClusterQueue cq"}},
	}
	for _, tt := range tests {
		t.Run(string(tt.strategy), func(t *testing.T) {
			f := newFixture(t)
			f.clusterQueue("cq", "1", func(cq *v1alpha1.ClusterQueue) { cq.Spec.QueueingStrategy = tt.strategy })
			f.s.Observe(f.workload("big", "lq-cq", "2", 0, 0))
			f.s.Observe(f.workload("small", "lq-cq", "1", 1, 0))
			plan := f.cycle()
			if plan.More {
				plan2 := f.cycle()
				plan.Reservations = append(plan.Reservations, plan2.Reservations...)
				plan.Waiting = append(plan.Waiting, plan2.Waiting...)
			}
			if got := names(plan.Reservations); !slices.Equal(got, tt.wantReserved) {
				t.Fatalf("reserved %v, want %v", got, tt.wantReserved)
			}
			got := messages(plan.Waiting)
			for name, want := range tt.wantWaiting {
				if !strings.Contains(got[name], want) {
					t.Fatalf("%s waits with %q, want it to say %q", name, got[name], want)
				}
			}
		})
	}
}

func TestArrivalsBehindABlockedStrictFIFOHeadSayWhy(t *testing.T) {
	f := newFixture(t)
	f.clusterQueue("cq", "1", func(cq *v1alpha1.ClusterQueue) { cq.Spec.QueueingStrategy = v1alpha1.StrictFIFO })
	f.s.Observe(f.workload("big", "lq-cq", "2", 0, 5))
	if plan := f.cycle(); len(plan.Reservations) != 0 {
		t.Fatalf("reserved %v while nothing fits", names(plan.Reservations))
	}
	f.s.Observe(f.workload("late", "lq-cq", "1", 1, 5))
	plan := f.cycle()
	if len(plan.Reservations) != 0 || messages(plan.Waiting)["late"] != "waiting behind ns/big in StrictFIFO ClusterQueue cq" {
		t.Fatalf("plan = %+v, want late to wait behind big", plan)
	}
	// A workload of higher priority is the new head: it is tried, and fits.
	f.s.Observe(f.workload("urgent", "lq-cq", "1", 2, 9))
	if got := names(f.cycle().Reservations); !slices.Equal(got, []string{"urgent"}) {
		t.Fatalf("reserved %v, want [urgent]", got)
	}
}

func TestWorkloadsThatCannotQueueSayWhy(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(f *fixture)
		queue   string
		message string
	}{
		{"no LocalQueue", func(f *fixture) {}, "nowhere", "LocalQueue nowhere doesn't exist"},
		{"no ClusterQueue", func(f *fixture) {
			f.s.SetLocalQueue(&v1alpha1.LocalQueue{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "lq", Generation: 1}, Spec: v1alpha1.LocalQueueSpec{ClusterQueue: "gone"}})
		}, "lq", "ClusterQueue gone doesn't exist"},
		{"stopped LocalQueue", func(f *fixture) {
			f.clusterQueue("cq", "4")
			f.s.SetLocalQueue(&v1alpha1.LocalQueue{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "lq", Generation: 1},
				Spec: v1alpha1.LocalQueueSpec{ClusterQueue: "cq", StopPolicy: ptr.To(v1alpha1.Hold)}})
		}, "lq", "LocalQueue lq is stopped (stopPolicy Hold)"},
		{"namespace not selected", func(f *fixture) {
			f.clusterQueue("cq", "4", func(cq *v1alpha1.ClusterQueue) {
				cq.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"team": "ml"}}
			})
		}, "lq-cq", "namespace ns doesn't match the namespaceSelector of ClusterQueue cq"},
		{"inactive ClusterQueue", func(f *fixture) {
			f.clusterQueue("cq", "4", func(cq *v1alpha1.ClusterQueue) { cq.Spec.StopPolicy = ptr.To(v1alpha1.HoldAndDrain) })
		}, "lq-cq", "ClusterQueue cq is inactive: the ClusterQueue is stopped (stopPolicy HoldAndDrain)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			tt.setup(f)
			f.s.Observe(f.workload("w", tt.queue, "1", 0, 0))
			plan := f.cycle()
			if len(plan.Reservations) != 0 || messages(plan.Waiting)["w"] != tt.message {
				t.Fatalf("plan = %+v, want w to wait with %q", plan, tt.message)
			}
			if again := f.cycle(); len(again.Waiting) != 0 {
				t.Fatalf("the message was handed out twice: %+v", again.Waiting)
			}
		})
	}
}

func TestQueueChangesReplaceWorkloads(t *testing.T) {
	f := newFixture(t)
	f.s.Observe(f.workload("w", "lq-cq", "1", 0, 0))
	if plan := f.cycle(); messages(plan.Waiting)["w"] != "LocalQueue lq-cq doesn't exist" {
		t.Fatalf("before the queues exist: %+v", plan)
	}
	f.clusterQueue("cq", "1")
	if got := names(f.cycle().Reservations); !slices.Equal(got, []string{"w"}) {
		t.Fatalf("after the queues were created: reserved %v, want [w]", got)
	}
}

func TestStatusesCount(t *testing.T) {
	f := newFixture(t)
	f.clusterQueue("cq", "2")
	admitted, reserving, pending := f.workload("admitted", "lq-cq", "1", 0, 0), f.workload("reserving", "lq-cq", "1", 1, 0), f.workload("pending", "lq-cq", "1", 2, 0)
	for _, wl := range []*v1alpha1.Workload{admitted, reserving, pending} {
		f.s.Observe(wl)
	}
	plan := f.cycle()
	f.s.Observe(f.written(plan.Reservations[0], true))
	f.s.Observe(f.written(plan.Reservations[1], false))
	f.s.Observe(f.next(f.workload("inactive", "lq-cq", "1", 3, 0), func(wl *v1alpha1.Workload) { wl.Spec.Active = ptr.To(false) }))
	cqs, lqs := f.s.Statuses()
	want := Counts{Pending: 1, Reserving: 2, Admitted: 1}
	if cqs["cq"].Counts != want || lqs[types.NamespacedName{Namespace: "ns", Name: "lq-cq"}].Counts != want {
		t.Fatalf("counts cq=%+v lq=%+v, want %+v", cqs["cq"].Counts, lqs[types.NamespacedName{Namespace: "ns", Name: "lq-cq"}].Counts, want)
	}
	if got := cqs["cq"].Flavors[0].Resources[0].Total; got.String() != "2" {
		t.Fatalf("cpu reserved = %s, want 2", got.String())
	}
}

func TestUnassumeReturnsTheQuota(t *testing.T) {
	f := newFixture(t)
	f.clusterQueue("cq", "1")
	a, b := f.workload("a", "lq-cq", "1", 0, 0), f.workload("b", "lq-cq", "1", 1, 0)
	f.s.Observe(a)
	f.s.Observe(b)
	plan := f.cycle()
	if got := names(plan.Reservations); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("reserved %v, want [a]", got)
	}
	f.s.Unassume(a) // the write was lost
	if got := names(f.cycle().Reservations); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("after the lost write: reserved %v, want a again", got)
	}
}

// A reservation assumed by a cycle keeps its quota through queue events
// until its write is answered: the write may land at any moment.
func TestAssumedReservationSurvivesQueueChanges(t *testing.T) {
	f := newFixture(t)
	f.clusterQueue("cq", "1")
	a, b := f.workload("a", "lq-cq", "1", 0, 0), f.workload("b", "lq-cq", "1", 1, 0)
	f.s.Observe(a)
	f.s.Observe(b)
	if got := names(f.cycle().Reservations); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("reserved %v, want [a]", got)
	}
	// The ClusterQueue and the LocalQueue change while a's write is out.
	f.clusterQueue("cq", "1", func(cq *v1alpha1.ClusterQueue) { cq.Generation = 2 })
	f.s.SetLocalQueue(&v1alpha1.LocalQueue{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "lq-cq", UID: "lq-cq", Generation: 3, Labels: map[string]string{"changed": "yes"}},
		Spec:       v1alpha1.LocalQueueSpec{ClusterQueue: "cq"},
	})
	if got := names(f.cycle().Reservations); len(got) != 0 {
		t.Fatalf("reserved %v while a's reservation was assumed: its quota was given twice", got)
	}
	cqs, _ := f.s.Statuses()
	if got := cqs["cq"].Flavors[0].Resources[0].Total; got.String() != "1" {
		t.Fatalf("cpu reserved = %s, want a's 1", got.String())
	}
	f.s.Unassume(a) // the write did not land after all
	if got := names(f.cycle().Reservations); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("after the lost write: reserved %v, want a again", got)
	}
}

func TestGroupWaitingForItsPodsIsNotQueued(t *testing.T) {
	f := newFixture(t)
	f.clusterQueue("cq", "1")
	waiting := f.next(f.workload("g", "lq-cq", "1", 0, 0), func(wl *v1alpha1.Workload) {
		meta.SetStatusCondition(&wl.Status.Conditions, metav1.Condition{
			Type: v1alpha1.WorkloadWaitingForReplacementPods, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonNoPods})
	})
	f.s.Observe(waiting)
	if got := names(f.cycle().Reservations); len(got) != 0 {
		t.Fatalf("reserved %v while the group's pods are missing", got)
	}
	f.s.Observe(f.next(waiting, func(wl *v1alpha1.Workload) {
		meta.SetStatusCondition(&wl.Status.Conditions, metav1.Condition{
			Type: v1alpha1.WorkloadWaitingForReplacementPods, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonAllPodsPresent})
	}))
	if got := names(f.cycle().Reservations); !slices.Equal(got, []string{"g"}) {
		t.Fatalf("once its pods are back: reserved %v, want [g]", got)
	}
}

func TestHeldUntilRequeueTime(t *testing.T) {
	f := newFixture(t)
	f.clusterQueue("cq", "1")
	at := time.Now().Add(time.Hour)
	f.s.Observe(f.next(f.workload("w", "lq-cq", "1", 0, 0), func(wl *v1alpha1.Workload) {
		wl.Status.RequeueState = &v1alpha1.RequeueState{RequeueAt: ptr.To(metav1.NewTime(at))}
	}))
	plan := f.s.Cycle(at.Add(-time.Minute))
	if len(plan.Reservations) != 0 || !plan.Wake.Equal(metav1.NewTime(at).Time) {
		t.Fatalf("before the requeue time: %+v, want nothing reserved and a wake at %s", plan, at)
	}
	if got := names(f.s.Cycle(at).Reservations); !slices.Equal(got, []string{"w"}) {
		t.Fatalf("at the requeue time: reserved %v, want [w]", got)
	}
}

func TestFinishedWorkloadsAreRetired(t *testing.T) {
	f := newFixture(t)
	f.clusterQueue("cq", "1")
	w := f.workload("w", "lq-cq", "1", 0, 0)
	f.s.Observe(w)
	plan := f.cycle()
	reserved := f.written(plan.Reservations[0], true)
	done := f.next(reserved, finished)
	f.s.Observe(reserved)
	f.s.Observe(done)
	if n := len(f.s.workloads); n != 0 {
		t.Fatalf("%d workloads held after the finish, want 0", n)
	}
	f.s.Observe(reserved) // a late, older version
	if n := len(f.s.workloads); n != 0 {
		t.Fatalf("an older version brought the finished workload back")
	}
	cqs, _ := f.s.Statuses()
	if c := cqs["cq"].Counts; c != (Counts{}) {
		t.Fatalf("counts after the finish = %+v, want zero", c)
	}
	f.s.Forget(types.NamespacedName{Namespace: w.Namespace, Name: w.Name}, w.UID)
	if len(f.s.retired) != 0 {
		t.Fatalf("the retired mark outlived the Workload")
	}
}

func TestFreedQuotaTriesParkedOnlyWhileSomethingCanFit(t *testing.T) {
	f := newFixture(t)
	f.clusterQueue("cq", "1")
	first := f.workload("first", "lq-cq", "1", 0, 0)
	f.s.Observe(first)
	for i := range 20 {
		f.s.Observe(f.workload(fmt.Sprintf("w%02d", i), "lq-cq", "1", i+1, 0))
	}
	plan := f.cycle()
	for plan.More {
		plan = f.cycle()
	}
	f.s.Observe(f.next(f.written(Reservation{Workload: first, ClusterQueue: f.s.clusterQueues["cq"].spec,
		Assignment: quota.Assignment{PodSets: []v1alpha1.PodSetAssignment{{Name: "main", Flavors: map[corev1.ResourceName]string{"cpu": "f"}}}}}, true), finished))
	plan = f.cycle()
	if got := names(plan.Reservations); !slices.Equal(got, []string{"w00"}) {
		t.Fatalf("after the finish: reserved %v, want [w00]", got)
	}
	if plan.Tried != 1 {
		t.Fatalf("tried %d heads, want 1: once the quota is used up no parked workload can fit", plan.Tried)
	}
}
