package lookup

import (
	"slices"
	"sync"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/sluice-dev/sluice/pkg/podgroup"
	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/services/webhook/internal/mutate"
	"github.com/sluice-dev/sluice/services/webhook/internal/validate"
)

// groups keeps, per group, a summary of the cached pods of it that answers
// what judging a new pod of the group needs without going through its
// pods: admitting each of a thousand workers would otherwise read the
// whole group each time. The pod informer's event handler keeps it up to
// date while requests read it.
type groups struct {
	log logr.Logger

	mu sync.RWMutex
	// shares holds what each pod added to its group's summary, by the
	// informer's key: an update or a delete takes back exactly that.
	shares map[string]share
	// summaries has an entry only for groups that have pods.
	summaries map[types.NamespacedName]*summary
}

// share is what one pod adds to its group's summary, read from the pod
// once per event.
type share struct {
	group   types.NamespacedName
	name    string
	created metav1.Time
	// role is the pod's role label; hasRole is false without one.
	role    string
	hasRole bool
	// counts is validate.Counts, runs mutate.Runs.
	counts, runs bool
	// declares is true when the pod carries the pod-group-sets annotation,
	// text; sets is its parse, nil when it does not parse.
	declares bool
	text     string
	sets     []podgroup.Set
}

// declaration reports whether the pod's declaration may stand for its
// group's: it counts and its annotation parses.
func (s share) declaration() bool { return s.declares && s.counts && s.sets != nil }

// summary is what the pods of one group add up to.
type summary struct {
	pods, running int
	// inRole names, per role, the pods of it that count.
	inRole map[string]sets.Set[string]
	// declaring holds, by pod name, the pods whose declaration may stand
	// for the group's; declaration is the one chosen among them.
	declaring   map[string]share
	declaration []podgroup.Set
}

func newGroups(log logr.Logger) *groups {
	return &groups{log: log, shares: map[string]share{}, summaries: map[types.NamespacedName]*summary{}}
}

// handler keeps the summaries up to date from the pod informer's events.
func (g *groups) handler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    g.observe,
		UpdateFunc: func(_, obj any) { g.observe(obj) },
		DeleteFunc: g.forget,
	}
}

// observe records a pod added or updated.
func (g *groups) observe(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	key, err := toolscache.MetaNamespaceKeyFunc(pod)
	if err != nil {
		g.log.Error(err, "cannot key pod for its group's summary", "namespace", pod.Namespace, "name", pod.Name)
		return
	}
	name, inGroup := pod.Labels[podkeys.PodGroupNameLabel]
	if !inGroup {
		g.drop(key)
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	old, had := g.shares[key]
	s := shareOf(pod, types.NamespacedName{Namespace: pod.Namespace, Name: name}, old)
	if had {
		g.summaries[old.group].withdraw(old)
	}
	g.shares[key] = s
	sum := g.summaries[s.group]
	if sum == nil {
		sum = &summary{}
		g.summaries[s.group] = sum
	}
	sum.add(s)
	if had && old.group != s.group {
		g.dropIfEmpty(old.group)
	}
}

// forget records a pod deleted, or one whose deletion the informer missed
// (a tombstone, keyed alike).
func (g *groups) forget(obj any) {
	key, err := toolscache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		g.log.Error(err, "cannot key deleted pod for its group's summary")
		return
	}
	g.drop(key)
}

// drop takes back what the pod of key added, if anything.
func (g *groups) drop(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	old, had := g.shares[key]
	if !had {
		return
	}
	delete(g.shares, key)
	g.summaries[old.group].withdraw(old)
	g.dropIfEmpty(old.group)
}

// dropIfEmpty forgets the summary of a group left without pods. The
// caller holds mu.
func (g *groups) dropIfEmpty(group types.NamespacedName) {
	if g.summaries[group].pods == 0 {
		delete(g.summaries, group)
	}
}

// shareOf reads what pod adds to its group. old is what the pod added
// before, if anything: its declaration, which cannot change (see
// validate.Update), is parsed again only if its text changed.
func shareOf(pod *corev1.Pod, group types.NamespacedName, old share) share {
	s := share{
		group:   group,
		name:    pod.Name,
		created: pod.CreationTimestamp,
		counts:  validate.Counts(pod),
		runs:    mutate.Runs(pod),
	}
	s.role, s.hasRole = pod.Labels[podkeys.PodGroupRoleLabel]
	s.text, s.declares = pod.Annotations[podkeys.PodGroupSetsAnnotation]
	switch {
	case !s.declares:
	case old.declares && old.text == s.text:
		s.sets = old.sets
	default:
		if parsed, errs := podgroup.ParseSets(s.text); len(errs) == 0 {
			s.sets = parsed
		}
	}
	return s
}

func (sum *summary) add(s share) {
	sum.pods++
	if s.runs {
		sum.running++
	}
	if s.counts && s.hasRole {
		if sum.inRole == nil {
			sum.inRole = map[string]sets.Set[string]{}
		}
		if sum.inRole[s.role] == nil {
			sum.inRole[s.role] = sets.New[string]()
		}
		sum.inRole[s.role].Insert(s.name)
	}
	if s.declaration() {
		if sum.declaring == nil {
			sum.declaring = map[string]share{}
		}
		sum.declaring[s.name] = s
		sum.choose()
	}
}

func (sum *summary) withdraw(s share) {
	sum.pods--
	if s.runs {
		sum.running--
	}
	if s.counts && s.hasRole {
		names := sum.inRole[s.role]
		names.Delete(s.name)
		if names.Len() == 0 {
			delete(sum.inRole, s.role)
		}
	}
	if s.declaration() {
		delete(sum.declaring, s.name)
		sum.choose()
	}
}

// choose picks the group's declaration among the pods that may give it:
// the oldest one's, the lowest name breaking a tie, so the choice does
// not depend on the order the pods were seen in. The pods of a group
// normally carry one declaration (the grouper refuses a group whose
// declarations differ), so this rarely matters.
func (sum *summary) choose() {
	var chosen share
	found := false
	for _, s := range sum.declaring {
		if !found || older(s, chosen) {
			chosen, found = s, true
		}
	}
	sum.declaration = chosen.sets
}

// older orders pods by creation, then by name.
func older(a, b share) bool {
	if !a.created.Equal(&b.created) {
		return a.created.Before(&b.created)
	}
	return a.name < b.name
}

// declared tells what the summary of group knows for judging a new pod of
// role in it.
func (g *groups) declared(group types.NamespacedName, role string) validate.Group {
	g.mu.RLock()
	defer g.mu.RUnlock()
	out := validate.Group{NamesInRole: func() []string { return g.namesInRole(group, role) }}
	if sum := g.summaries[group]; sum != nil {
		out.Sets = slices.Clone(sum.declaration)
		out.InRole = sum.inRole[role].Len()
	}
	return out
}

// namesInRole names the pods of role in group that count, sorted.
func (g *groups) namesInRole(group types.NamespacedName, role string) []string {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if sum := g.summaries[group]; sum != nil {
		return sets.List(sum.inRole[role])
	}
	return nil
}

// runs reports whether a pod of group runs (see mutate.Runs).
func (g *groups) runs(group types.NamespacedName) bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	sum := g.summaries[group]
	return sum != nil && sum.running > 0
}
