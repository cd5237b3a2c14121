package lookup

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/sluice-dev/sluice/pkg/podgroup"
	"github.com/sluice-dev/sluice/pkg/podkeys"
)

const (
	driverSets = "- name: driver\n  count: 1\n- name: worker\n  count: 2\n  template:\n    spec:\n      containers:\n      - name: w\n"
	otherSets  = "- name: driver\n  count: 1\n- name: executor\n  count: 4\n  template:\n    spec:\n      containers:\n      - name: e\n"
)

var (
	spark = types.NamespacedName{Namespace: "team", Name: "spark"}
	epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
)

// member returns a pod of group spark in role, as the webhook leaves it:
// gated and holding sluice's finalizer.
func member(name, role string, changes ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Namespace: spark.Namespace, Name: name, CreationTimestamp: metav1.NewTime(epoch),
		Labels:     map[string]string{podkeys.PodGroupNameLabel: spark.Name, podkeys.PodGroupRoleLabel: role},
		Finalizers: []string{podkeys.ManagedFinalizer},
	}}
	p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: podkeys.AdmissionGate}}
	for _, c := range changes {
		c(p)
	}
	return p
}

func declares(text string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Annotations = map[string]string{podkeys.PodGroupSetsAnnotation: text} }
}
func createdAt(minutes int) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.CreationTimestamp = metav1.NewTime(epoch.Add(time.Duration(minutes) * time.Minute))
	}
}
func phase(ph corev1.PodPhase) func(*corev1.Pod) { return func(p *corev1.Pod) { p.Status.Phase = ph } }
func ungated(p *corev1.Pod)                      { p.Spec.SchedulingGates = nil }
func released(p *corev1.Pod)                     { p.Finalizers = nil }
func onNode(p *corev1.Pod)                       { p.Spec.NodeName = "node-1" }
func deleting(p *corev1.Pod)                     { now := metav1.NewTime(epoch); p.DeletionTimestamp = &now }
func inGroup(name string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Labels[podkeys.PodGroupNameLabel] = name }
}
func noGroup(p *corev1.Pod) { delete(p.Labels, podkeys.PodGroupNameLabel) }

// event is one informer notification.
type event func(toolscache.ResourceEventHandler)

func add(p *corev1.Pod) event {
	return func(h toolscache.ResourceEventHandler) { h.OnAdd(p, false) }
}
func update(old, p *corev1.Pod) event {
	return func(h toolscache.ResourceEventHandler) { h.OnUpdate(old, p) }
}
func del(p *corev1.Pod) event {
	return func(h toolscache.ResourceEventHandler) { h.OnDelete(p) }
}

// tombstone is a deletion the informer learned of only by relisting.
func tombstone(p *corev1.Pod) event {
	return func(h toolscache.ResourceEventHandler) {
		h.OnDelete(toolscache.DeletedFinalStateUnknown{Key: p.Namespace + "/" + p.Name, Obj: p})
	}
}

// TestGroups: the summary of a group follows its pods' events exactly,
// and a group left without pods leaves nothing behind.
func TestGroups(t *testing.T) {
	driver := member("driver", "driver", declares(driverSets))
	w1, w2 := member("w1", "worker"), member("w2", "worker")
	tests := []struct {
		name   string
		events []event
		// sets names the declared roles; nil: no declaration.
		sets []string
		// inRole names, per role, the pods that count in it.
		inRole map[string][]string
		runs   bool
		// groups and pods are how many summaries and pods are kept.
		groups, pods int
	}{
		{name: "nothing seen"},
		{name: "workers before their driver", events: []event{add(w1), add(w2)},
			inRole: map[string][]string{"worker": {"w1", "w2"}}, groups: 1, pods: 2},
		{name: "driver and a worker", events: []event{add(driver), add(w1)},
			sets: []string{"driver", "worker"}, inRole: map[string][]string{"driver": {"driver"}, "worker": {"w1"}}, groups: 1, pods: 2},
		{name: "an add of a pod seen already (a relist) replaces it", events: []event{add(w1), add(member("w1", "executor"))},
			inRole: map[string][]string{"executor": {"w1"}}, groups: 1, pods: 1},
		{name: "update changes the role", events: []event{add(w1), update(w1, member("w1", "executor"))},
			inRole: map[string][]string{"executor": {"w1"}}, groups: 1, pods: 1},
		{name: "update to failed frees the place", events: []event{add(w1), add(w2), update(w1, member("w1", "worker", phase(corev1.PodFailed)))},
			inRole: map[string][]string{"worker": {"w2"}}, groups: 1, pods: 2},
		{name: "succeeded holds its place", events: []event{add(w1), update(w1, member("w1", "worker", ungated, onNode, phase(corev1.PodSucceeded)))},
			inRole: map[string][]string{"worker": {"w1"}}, runs: true, groups: 1, pods: 1},
		{name: "succeeded and released frees the place and does not run",
			events: []event{add(w1), update(w1, member("w1", "worker", ungated, onNode, phase(corev1.PodSucceeded), released))},
			groups: 1, pods: 1},
		{name: "deleted before it reached a node frees the place", events: []event{add(w1), update(w1, member("w1", "worker", deleting))},
			groups: 1, pods: 1},
		{name: "deleted on its node holds its place but does not run",
			events: []event{add(w1), update(w1, member("w1", "worker", ungated, onNode, deleting))},
			inRole: map[string][]string{"worker": {"w1"}}, groups: 1, pods: 1},
		{name: "past the gate runs", events: []event{add(w1), update(w1, member("w1", "worker", ungated))},
			inRole: map[string][]string{"worker": {"w1"}}, runs: true, groups: 1, pods: 1},
		{name: "gated again no longer runs", events: []event{add(member("w1", "worker", ungated)), update(member("w1", "worker", ungated), w1)},
			inRole: map[string][]string{"worker": {"w1"}}, groups: 1, pods: 1},
		{name: "delete", events: []event{add(w1), add(w2), del(w1)},
			inRole: map[string][]string{"worker": {"w2"}}, groups: 1, pods: 1},
		{name: "the last delete drops the summary", events: []event{add(driver), add(w1), del(w1), del(driver)}},
		{name: "a tombstone deletes", events: []event{add(driver), add(w1), tombstone(driver), tombstone(w1)}},
		{name: "a tombstone of a pod never seen is ignored", events: []event{add(w1), tombstone(w2)},
			inRole: map[string][]string{"worker": {"w1"}}, groups: 1, pods: 1},
		{name: "a delete seen twice is ignored", events: []event{add(w1), add(w2), del(w1), tombstone(w1)},
			inRole: map[string][]string{"worker": {"w2"}}, groups: 1, pods: 1},
		{name: "losing the group label leaves the group", events: []event{add(w1), update(w1, member("w1", "worker", noGroup))}},
		{name: "moving to another group leaves this one", events: []event{add(w1), update(w1, member("w1", "worker", inGroup("other")))},
			groups: 1, pods: 1},
		{name: "other groups and namespaces are apart", events: []event{
			add(member("w1", "worker", inGroup("other"))),
			add(member("w2", "worker", func(p *corev1.Pod) { p.Namespace = "elsewhere" })),
		}, groups: 2, pods: 2},
		{name: "a failed driver declares nothing", events: []event{add(driver), update(driver, member("driver", "driver", declares(driverSets), phase(corev1.PodFailed)))},
			groups: 1, pods: 1},
		{name: "a driver that does not parse declares nothing", events: []event{add(member("driver", "driver", declares("- name: [")))},
			inRole: map[string][]string{"driver": {"driver"}}, groups: 1, pods: 1},
		{name: "the oldest declaration stands", events: []event{
			add(member("a-young", "driver", declares(otherSets), createdAt(2))),
			add(member("z-old", "driver", declares(driverSets), createdAt(1))),
		}, sets: []string{"driver", "worker"}, inRole: map[string][]string{"driver": {"a-young", "z-old"}}, groups: 1, pods: 2},
		{name: "the lowest name breaks a tie", events: []event{
			add(member("b", "driver", declares(otherSets))),
			add(member("a", "driver", declares(driverSets))),
		}, sets: []string{"driver", "worker"}, inRole: map[string][]string{"driver": {"a", "b"}}, groups: 1, pods: 2},
		{name: "the next declaration stands when the chosen one goes", events: []event{
			add(member("old", "driver", declares(driverSets), createdAt(1))),
			add(member("young", "driver", declares(otherSets), createdAt(2))),
			del(member("old", "driver", declares(driverSets), createdAt(1))),
		}, sets: []string{"driver", "executor"}, inRole: map[string][]string{"driver": {"young"}}, groups: 1, pods: 1},
		{name: "a declaration that does not parse is passed over", events: []event{
			add(member("a", "driver", declares("- name: ["))),
			add(member("b", "driver", declares(driverSets))),
		}, sets: []string{"driver", "worker"}, inRole: map[string][]string{"driver": {"a", "b"}}, groups: 1, pods: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := newGroups(logr.Discard())
			h := g.handler()
			for _, e := range tc.events {
				e(h)
			}
			for _, role := range []string{"driver", "worker", "executor"} {
				got := g.declared(spark, role)
				var sets []string
				if got.Sets != nil {
					sets = podgroup.SetNames(got.Sets)
				}
				if !slices.Equal(sets, tc.sets) {
					t.Errorf("declared roles = %q, want %q", sets, tc.sets)
				}
				want := tc.inRole[role]
				if got.InRole != len(want) {
					t.Errorf("pods in role %s = %d, want %d", role, got.InRole, len(want))
				}
				if names := got.NamesInRole(); !slices.Equal(names, want) {
					t.Errorf("names in role %s = %q, want %q", role, names, want)
				}
			}
			if got := g.runs(spark); got != tc.runs {
				t.Errorf("runs = %v, want %v", got, tc.runs)
			}
			if len(g.summaries) != tc.groups || len(g.shares) != tc.pods {
				t.Errorf("kept %d summaries and %d pods, want %d and %d", len(g.summaries), len(g.shares), tc.groups, tc.pods)
			}
		})
	}
}

// TestGroupsParseOnce: a declaration is parsed when its pod is first seen,
// not again on each update of the pod nor per question.
func TestGroupsParseOnce(t *testing.T) {
	g := newGroups(logr.Discard())
	h := g.handler()
	driver := member("driver", "driver", declares(driverSets))
	h.OnAdd(driver, false)
	first := g.shares["team/driver"].sets
	h.OnUpdate(driver, member("driver", "driver", declares(driverSets), ungated))
	if again := g.shares["team/driver"].sets; &again[0] != &first[0] {
		t.Error("an update that kept the declaration parsed it again")
	}
	// What is handed out is a copy: changing it changes nothing kept.
	g.declared(spark, "worker").Sets[0].Name = "changed"
	if got := g.declared(spark, "worker").Sets[0].Name; got != "driver" {
		t.Errorf("declared role 0 = %q after the caller changed its copy, want driver", got)
	}
}

// TestGroupsConcurrent: questions are answered while events arrive (run
// with -race).
func TestGroupsConcurrent(t *testing.T) {
	g := newGroups(logr.Discard())
	h := g.handler()
	h.OnAdd(member("driver", "driver", declares(driverSets)), false)
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 200 {
			p := member(fmt.Sprintf("w%d", i), "worker")
			h.OnAdd(p, false)
			h.OnUpdate(p, member(p.Name, "worker", ungated))
			h.OnDelete(p)
		}
	})
	for range 2 {
		wg.Go(func() {
			for range 200 {
				got := g.declared(spark, "worker")
				if len(got.Sets) != 2 || got.InRole > 1 || len(got.NamesInRole()) > 1 {
					t.Errorf("declared = %+v, want the driver's sets and at most one worker", got)
					return
				}
				g.runs(spark)
			}
		})
	}
	wg.Wait()
}

// TestCacheNotSynced: before the caches and the summaries have their
// initial contents the webhook cannot judge a group, and says so.
func TestCacheNotSynced(t *testing.T) {
	c := New(nil, Options{Log: logr.Discard()})
	if _, err := c.DeclaredGroup(t.Context(), "team", "spark", "worker"); !errors.Is(err, ErrNotSynced) {
		t.Errorf("DeclaredGroup before sync: error %v, want %v", err, ErrNotSynced)
	}
	if _, err := c.GroupRuns(t.Context(), "team", "spark"); !errors.Is(err, ErrNotSynced) {
		t.Errorf("GroupRuns before sync: error %v, want %v", err, ErrNotSynced)
	}
}
