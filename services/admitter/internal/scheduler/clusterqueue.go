package scheduler

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/services/admitter/internal/queue"
	"github.com/sluice-dev/sluice/services/admitter/internal/quota"
	"github.com/sluice-dev/sluice/services/admitter/internal/shrink"
)

// clusterQueue is one ClusterQueue: whether it can admit, what it has
// handed out, and its pending workloads.
//
// Pending workloads are in one of three places. heap holds those never
// tried (or put back by a change of the queue): the next cycle must try
// them. parked holds, in the same order, those that were tried and did not
// fit; they are tried again only after quota was freed (awake), and that
// pass stops as soon as every parked workload asks for a resource the queue
// has none left of — so one finish in a full queue costs a cycle one try,
// not one per parked workload — and within it, once a workload does not
// fit, the parked ones that ask the quota the same and come after it are
// set aside (see parkedSet). retried holds those a pass already tried
// again; they return to parked when the pass ends.
type clusterQueue struct {
	name     string
	spec     *v1alpha1.ClusterQueue
	active   bool
	reason   string
	message  string
	selector labels.Selector
	usage    quota.Usage
	counts   Counts
	// tree is the Scheduler's quota tree, shared by every ClusterQueue:
	// what the queue can take depends on its cohort.
	tree *quota.Tree

	heap    entryHeap
	parked  parkedSet
	retried map[types.NamespacedName]*entry
	// awake: quota was freed since parked workloads were last tried.
	awake bool
	// shapes counts the parked workloads by the resources they request.
	shapes map[string]*shape
	// stuck cannot fit at all (a resource the queue does not cover); only
	// a change of the queue or its flavors tries them again.
	stuck map[types.NamespacedName]*entry
	// blockedBy is the head a StrictFIFO queue waits for: nothing behind
	// it is tried until quota frees or something overtakes it.
	blockedBy *entry
}

// shape is a set of requested resources, and how many parked workloads
// request exactly that set.
type shape struct {
	resources []corev1.ResourceName
	parked    int
}

func newClusterQueue(name string, tree *quota.Tree) *clusterQueue {
	return &clusterQueue{
		name:     name,
		tree:     tree,
		usage:    quota.Usage{},
		selector: labels.Everything(),
		heap:     newEntryHeap(byQueueOrder),
		parked:   newParkedSet(),
		retried:  map[types.NamespacedName]*entry{},
		shapes:   map[string]*shape{},
		stuck:    map[types.NamespacedName]*entry{},
	}
}

// wake starts a pass over the parked workloads: quota was freed.
func (cq *clusterQueue) wake() {
	cq.endPass()
	cq.awake = cq.parked.Len() > 0
	cq.unblock()
}

// wakeAll tries every parked and stuck workload again: the queue or its
// flavors changed.
func (cq *clusterQueue) wakeAll() {
	for k, e := range cq.stuck {
		shrink.Delete(&cq.stuck, k)
		cq.toParked(e)
	}
	cq.wake()
}

// endPass returns the workloads a pass tried again, and those it set
// aside, to parked.
func (cq *clusterQueue) endPass() {
	for k, e := range cq.retried {
		shrink.Delete(&cq.retried, k)
		cq.toParked(e)
	}
	cq.parked.restore()
	cq.awake = false
}

func (cq *clusterQueue) unblock() { cq.blockedBy = nil }

// runnable reports whether a cycle has anything to try in cq.
func (cq *clusterQueue) runnable() bool {
	return cq.blockedBy == nil && (cq.heap.Len() > 0 || (cq.awake && cq.parked.active()))
}

// next returns the workload to try: the first in line of the untried and,
// during a pass, the parked ones; nil when nothing is left to try.
func (cq *clusterQueue) next() *entry {
	if cq.awake && (!cq.parked.active() || cq.nothingFits()) {
		cq.endPass()
	}
	h := cq.heap.peek()
	if !cq.awake {
		return h
	}
	p := cq.parked.peek()
	if h == nil || queue.Compare(p.wl, h.wl) < 0 {
		return p
	}
	return h
}

// nothingFits reports whether every parked workload requests a resource
// of which no flavor of the queue has quota left.
func (cq *clusterQueue) nothingFits() bool {
	for _, sh := range cq.shapes {
		if sh.parked > 0 && !cq.exhaustedAny(sh.resources) {
			return false
		}
	}
	return true
}

// exhaustedAny reports whether one of resources has no quota left in any
// flavor of the queue, borrowing included.
func (cq *clusterQueue) exhaustedAny(resources []corev1.ResourceName) bool {
	for _, res := range resources {
		left := false
		for _, rg := range cq.spec.Spec.ResourceGroups {
			if !slices.Contains(rg.CoveredResources, res) {
				continue
			}
			for _, f := range rg.Flavors {
				if cq.tree.Available(cq.name, quota.FR{Flavor: f.Name, Resource: res}) > 0 {
					left = true
					break
				}
			}
		}
		if !left {
			return true
		}
	}
	return false
}

// miss records that e, just tried, did not fit: parked (or, during a
// pass, retried) until quota frees, or stuck for good. During a pass, the
// parked workloads that ask what e asked, all behind it in line, are set
// aside (see parkedSet) unless e claimed victims: it may wait for them
// rather than have failed, and the others may claim victims too.
func (cq *clusterQueue) miss(e *entry, message string, permanent bool) {
	cq.take(e)
	e.message = message
	switch {
	case permanent:
		e.where = stuck
		cq.stuck[e.key] = e
	case cq.awake:
		e.where = retrying
		cq.retried[e.key] = e
		if e.awaits == nil {
			cq.parked.setAside(fitKeyOf(e))
		}
	default:
		cq.toParked(e)
	}
}

// toParked puts e among the parked workloads.
func (cq *clusterQueue) toParked(e *entry) {
	e.where = parked
	e.fitKey = fitKeyOf(e)
	cq.parked.push(e)
	sh := cq.shapes[e.shape]
	if sh == nil {
		sh = &shape{resources: shapeResources(e.wl)}
		cq.shapes[e.shape] = sh
	}
	sh.parked++
}

// take removes e from wherever it waits in cq.
func (cq *clusterQueue) take(e *entry) {
	switch e.where {
	case queued:
		cq.heap.remove(e)
	case parked:
		cq.parked.remove(e)
		if sh := cq.shapes[e.shape]; sh != nil {
			if sh.parked--; sh.parked <= 0 {
				delete(cq.shapes, e.shape)
			}
		}
	case retrying:
		shrink.Delete(&cq.retried, e.key)
	case stuck:
		shrink.Delete(&cq.stuck, e.key)
	}
	if cq.blockedBy == e {
		cq.unblock()
	}
}

// shapeOf names the set of resources wl requests.
func shapeOf(wl *v1alpha1.Workload) string {
	var b strings.Builder
	for _, res := range shapeResources(wl) {
		b.WriteString(string(res))
		b.WriteByte(',')
	}
	return b.String()
}

func shapeResources(wl *v1alpha1.Workload) []corev1.ResourceName {
	set := map[corev1.ResourceName]bool{}
	for _, ps := range wl.Spec.PodSets {
		if ps.Count <= 0 {
			continue
		}
		for res, q := range ps.Template.Requests {
			if !q.IsZero() {
				set[res] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// setSpec records a new version of the ClusterQueue and what follows from
// it for admission.
func (cq *clusterQueue) setSpec(spec *v1alpha1.ClusterQueue, flavors map[string]*v1alpha1.ResourceFlavor, checks map[string]*v1alpha1.AdmissionCheck) {
	cq.spec = spec
	cq.tree.SetClusterQueue(cq.name, spec.Spec.CohortName, quota.QuotasOf(spec.Spec.ResourceGroups))
	cq.tree.SetClusterQueueWeight(cq.name, quota.WeightOf(spec.Spec.FairSharing))
	cq.refresh(flavors, checks)
	cq.selector = labels.Everything()
	if spec.Spec.NamespaceSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(spec.Spec.NamespaceSelector)
		if err != nil {
			cq.active, cq.reason = false, "InvalidNamespaceSelector"
			cq.message = fmt.Sprintf("spec.namespaceSelector: %v", err)
			return
		}
		cq.selector = sel
	}
}

// refresh recomputes whether cq can admit.
func (cq *clusterQueue) refresh(flavors map[string]*v1alpha1.ResourceFlavor, checks map[string]*v1alpha1.AdmissionCheck) {
	cq.active, cq.reason, cq.message = Activity(cq.spec, flavors, checks)
	if cycle := cq.tree.Cycle(cq.name); cycle != nil && cq.reason != "Stopped" {
		cq.active, cq.reason = false, v1alpha1.ReasonCohortCycle
		cq.message = CycleMessage(cycle)
	}
}

// CycleMessage says that the Cohorts of cycle form a loop.
func CycleMessage(cycle []string) string {
	return fmt.Sprintf("the parents of Cohorts %s form a loop: their quota cannot be shared until the loop is broken", strings.Join(cycle, ", "))
}

// Activity says whether cq can admit: it must not be stopped, its quotas
// must not be negative and its lending limits not above them (the schema
// cannot refuse those), and every flavor and admission check it names
// must exist (and the checks be active). A
// check with failurePolicy Ignore need not be active: the check phase
// counts a provider that cannot answer as Ready without updates, so its
// provider being down must not stop the queue either — unless the check is
// inactive for a TLS failure, which Ignore does not cover. It returns the
// Active condition's status, reason and message.
func Activity(cq *v1alpha1.ClusterQueue, flavors map[string]*v1alpha1.ResourceFlavor, checks map[string]*v1alpha1.AdmissionCheck) (bool, string, string) {
	if stopped(cq.Spec.StopPolicy) {
		return false, "Stopped", fmt.Sprintf("the ClusterQueue is stopped (stopPolicy %s)", *cq.Spec.StopPolicy)
	}
	var reason string
	var problems []string
	note := func(r, msg string) {
		if reason == "" {
			reason = r
		}
		problems = append(problems, msg)
	}
	seen := map[string]bool{}
	for i, rg := range cq.Spec.ResourceGroups {
		for j, f := range rg.Flavors {
			if flavors[f.Name] == nil && !seen[f.Name] {
				seen[f.Name] = true
				note("FlavorNotFound", fmt.Sprintf("resource flavor %s doesn't exist", f.Name))
			}
			for k, r := range f.Resources {
				if r.NominalQuota.Sign() < 0 {
					note("NegativeQuota", fmt.Sprintf("spec.resourceGroups[%d].flavors[%d].resources[%d].nominalQuota: %s must not be negative",
						i, j, k, r.NominalQuota.String()))
				}
				for _, limit := range []struct {
					field string
					q     *resource.Quantity
				}{{"borrowingLimit", r.BorrowingLimit}, {"lendingLimit", r.LendingLimit}} {
					if limit.q != nil && limit.q.Sign() < 0 {
						note("NegativeQuota", fmt.Sprintf("spec.resourceGroups[%d].flavors[%d].resources[%d].%s: %s must not be negative",
							i, j, k, limit.field, limit.q.String()))
					}
				}
				if r.LendingLimit != nil && r.LendingLimit.Cmp(r.NominalQuota) > 0 {
					note("LendingLimitAboveQuota", fmt.Sprintf("spec.resourceGroups[%d].flavors[%d].resources[%d].lendingLimit: %s must not exceed nominalQuota %s",
						i, j, k, r.LendingLimit.String(), r.NominalQuota.String()))
				}
			}
		}
	}
	if s := cq.Spec.AdmissionChecksStrategy; s != nil {
		for _, rule := range s.AdmissionChecks {
			ac := checks[rule.Name]
			switch {
			case ac == nil:
				note("AdmissionCheckNotFound", fmt.Sprintf("admission check %s doesn't exist", rule.Name))
			case !CheckActive(ac) && !ignoredWhileInactive(ac):
				note("AdmissionCheckInactive", inactiveCheckMessage(ac))
			}
		}
	}
	if len(problems) > 0 {
		return false, reason, strings.Join(problems, "; ")
	}
	return true, "Ready", "Can admit new workloads"
}

// ignoredWhileInactive reports whether ac's being inactive leaves its
// queues active: with failurePolicy Ignore it does, unless a TLS failure
// made it inactive.
func ignoredWhileInactive(ac *v1alpha1.AdmissionCheck) bool {
	if ac.Spec.FailurePolicy != v1alpha1.IgnoreFailure {
		return false
	}
	c := findCondition(ac.Status.Conditions, v1alpha1.AdmissionCheckActive)
	return c == nil || (c.Reason != v1alpha1.ReasonTLSConfigInvalid && c.Reason != v1alpha1.ReasonTLSHandshakeFailed)
}

// inactiveCheckMessage says why ac holds its queues back, with its Active
// condition's reason and message.
func inactiveCheckMessage(ac *v1alpha1.AdmissionCheck) string {
	c := findCondition(ac.Status.Conditions, v1alpha1.AdmissionCheckActive)
	switch {
	case c == nil || c.Message == "":
		return fmt.Sprintf("admission check %s is not active: no answer from its provider yet", ac.Name)
	case c.Reason == "":
		return fmt.Sprintf("admission check %s is not active: %s", ac.Name, c.Message)
	default:
		return fmt.Sprintf("admission check %s is not active (%s): %s", ac.Name, c.Reason, c.Message)
	}
}

// CheckActive reports whether ac's Active condition is True.
func CheckActive(ac *v1alpha1.AdmissionCheck) bool {
	c := findCondition(ac.Status.Conditions, v1alpha1.AdmissionCheckActive)
	return c != nil && c.Status == metav1.ConditionTrue
}

func findCondition(conds []metav1.Condition, t string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}

// freed reports whether cur is less than prev in some flavor and resource:
// quota was given back.
func freed(prev, cur quota.Usage) bool {
	for flavor, rl := range prev {
		for res, q := range rl {
			c := cur.Get(flavor, res)
			if c.Cmp(q) < 0 {
				return true
			}
		}
	}
	return false
}

// entryHeap holds entries ordered by less, first on top. An entry is in at
// most one heap at a time (its placement says which), so one index field
// serves every heap.
type entryHeap = indexedHeap[*entry]

func newEntryHeap(less func(a, b *entry) bool) entryHeap {
	return entryHeap{less: less, at: func(e *entry) *int { return &e.heapIndex }}
}

// byQueueOrder puts the first in line first; byRequeueTime the earliest
// requeue.
func byQueueOrder(a, b *entry) bool  { return queue.Compare(a.wl, b.wl) < 0 }
func byRequeueTime(a, b *entry) bool { return a.fp.requeueAt.Before(b.fp.requeueAt) }

// countKind is how a workload counts in its queues' status.
type countKind int

const (
	countNone countKind = iota
	countPending
	countReserving
	countAdmitted // admitted workloads also count as reserving
)

// Counts are a queue's workloads by state, as its status reports them.
type Counts struct {
	// Pending wait for quota; Reserving hold quota (admitted or waiting
	// for their checks); Admitted are admitted and not finished.
	Pending, Reserving, Admitted int32
}

func (c *Counts) add(k countKind)    { c.apply(k, 1) }
func (c *Counts) remove(k countKind) { c.apply(k, -1) }

func (c *Counts) apply(k countKind, d int32) {
	switch k {
	case countPending:
		c.Pending += d
	case countReserving:
		c.Reserving += d
	case countAdmitted:
		c.Reserving += d
		c.Admitted += d
	}
}
