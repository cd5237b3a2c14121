package quota

import (
	"maps"
	"math"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// FR is a flavor-resource pair, the unit in which a cohort tree counts
// quota and usage. Every FR is accounted for independently of the others.
type FR struct {
	Flavor   string
	Resource corev1.ResourceName
}

// Quota is what one node of a cohort tree (a ClusterQueue or a Cohort)
// declares for one FR. Amounts are in the canonical units of AmountOf.
// A nil limit means no limit; negative amounts are taken as 0.
type Quota struct {
	// Nominal is the node's own quota.
	Nominal int64
	// BorrowingLimit caps how much the node may take from its parent
	// beyond what it puts into the parent's pool.
	BorrowingLimit *int64
	// LendingLimit caps how much of the node's subtree quota is put into
	// the parent's pool; the rest stays visible only inside the node.
	LendingLimit *int64
}

// AmountOf converts q to the int64 a Tree counts res in: millicores for
// cpu, whole units (bytes, counts) for every other resource, rounded up
// like Quantity.MilliValue and Quantity.Value. A quantity too large for an
// int64 saturates at math.MaxInt64 (and a too negative one at
// math.MinInt64) instead of wrapping around, so an absurd quota can never
// turn into a negative one.
func AmountOf(res corev1.ResourceName, q resource.Quantity) int64 {
	scale := resource.Scale(0)
	if res == corev1.ResourceCPU {
		scale = resource.Milli
	}
	if q.Cmp(*resource.NewScaledQuantity(math.MaxInt64, scale)) >= 0 {
		return math.MaxInt64
	}
	if q.Cmp(*resource.NewScaledQuantity(math.MinInt64, scale)) <= 0 {
		return math.MinInt64
	}
	return q.ScaledValue(scale)
}

// Tree is the quota arithmetic of ClusterQueues sharing quota through a
// tree of Cohorts. Each FR is counted on its own:
//
//   - A ClusterQueue's subtree quota is its nominal quota; a Cohort's is its
//     own nominal quota plus what each child puts into its pool.
//   - A node with a lending limit keeps max(0, subtree quota − lending
//     limit) local: only usage inside the node can take it. What is not
//     local is lendable and sits in the parent's pool.
//   - A ClusterQueue's usage is what its admitted workloads hold. Usage
//     beyond a node's local quota is held in its parent's pool, so a
//     Cohort's usage is the sum of what its children hold in it.
//   - What a ClusterQueue can still take is its free local quota plus what
//     its parent can still give, the latter capped by its borrowing limit;
//     recursively up to the root, where it is subtree quota − usage.
//
// A ClusterQueue without a cohort neither borrows nor lends: it has its
// nominal quota minus its usage, whatever limits it carries.
//
// A Cohort named as a ClusterQueue's cohort or as a Cohort's parent but
// never set with SetCohort exists implicitly, without quota, limits or
// parent, for as long as something names it.
//
// Cohorts whose parents loop form a cycle. The loop's members count as
// roots (their parents are unusable), and every ClusterQueue at or below
// the loop has nothing available and fits nothing until the loop is broken.
//
// Usage stays with its ClusterQueue across every structural change (quota
// edits, joins, moves), which may leave a subtree using more than its quota
// allows; nothing of its pool is then available until usage drops, while
// what a node keeps local stays available to it.
//
// Every node also has a fair-sharing weight, and a share of what its
// parent could lend it that it borrows (see Share).
//
// Unknown names read as zero (or false, or nil), and changing the usage of
// an unknown ClusterQueue does nothing.
//
// Sums saturate at math.MaxInt64 instead of wrapping around; the figures
// are exact as long as the totals of a tree fit in an int64.
//
// Usage changes and queries cost time proportional to the depth of the
// tree; structural changes (SetClusterQueue, SetCohort, Delete*) recompute
// the whole tree; setting a weight does not.
//
// A Tree is not safe for concurrent use.
type Tree struct {
	clusterQueues map[string]*node
	// cohortSpecs are the explicit Cohorts, as last set.
	cohortSpecs map[string]cohortSpec
	// cohorts are the explicit and implicit Cohorts, derived from the
	// ClusterQueues and cohortSpecs by rebuild.
	cohorts map[string]*node
	// cohortWeights are the fair-sharing weights of explicit Cohorts
	// other than DefaultWeight, kept apart from cohortSpecs because a
	// weight changes no quota figure (see SetCohortWeight).
	cohortWeights map[string]float64
}

type cohortSpec struct {
	parent string
	quotas map[FR]Quota
}

// node is a ClusterQueue or a Cohort.
type node struct {
	name       string
	isCohort   bool
	parentName string
	quotas     map[FR]Quota
	// parent is the usable parent: nil for a ClusterQueue without cohort,
	// a Cohort without parent, or a Cohort that is a member of a loop.
	parent   *node
	children []*node
	// cycle is the sorted loop the parent chain runs into, or nil.
	cycle  []string
	inLoop bool
	// subtreeQuota is the nominal quota for a ClusterQueue; derived for a
	// Cohort.
	subtreeQuota map[FR]int64
	// usage is held by admitted workloads for a ClusterQueue; derived (and
	// kept up to date incrementally) for a Cohort.
	usage map[FR]int64
	// weight is the node's fair-sharing weight.
	weight float64
	// childLendable is, for a Cohort, what its children's shares are
	// measured against (see setChildLendable); derived by rebuild.
	childLendable map[corev1.ResourceName]int64
}

// NewTree returns an empty Tree.
func NewTree() *Tree {
	return &Tree{
		clusterQueues: map[string]*node{},
		cohortSpecs:   map[string]cohortSpec{},
		cohorts:       map[string]*node{},
		cohortWeights: map[string]float64{},
	}
}

// SetClusterQueue adds the ClusterQueue name or replaces its cohort and
// quotas; usage it already holds stays with it. cohort "" means none.
func (t *Tree) SetClusterQueue(name, cohort string, quotas map[FR]Quota) {
	cq := t.clusterQueues[name]
	if cq == nil {
		cq = &node{name: name, usage: map[FR]int64{}, weight: DefaultWeight}
		t.clusterQueues[name] = cq
	}
	cq.parentName = cohort
	cq.quotas = sanitized(quotas)
	t.rebuild()
}

// HasClusterQueue reports whether the ClusterQueue name is in the tree.
func (t *Tree) HasClusterQueue(name string) bool {
	_, ok := t.clusterQueues[name]
	return ok
}

// DeleteClusterQueue removes the ClusterQueue name and the usage it holds.
func (t *Tree) DeleteClusterQueue(name string) {
	if _, ok := t.clusterQueues[name]; !ok {
		return
	}
	delete(t.clusterQueues, name)
	t.rebuild()
}

// SetCohort adds the explicit Cohort name, or replaces its parent and
// quotas. parent "" means none.
func (t *Tree) SetCohort(name, parent string, quotas map[FR]Quota) {
	t.cohortSpecs[name] = cohortSpec{parent: parent, quotas: sanitized(quotas)}
	t.rebuild()
}

// DeleteCohort removes the explicit Cohort name. If ClusterQueues or
// Cohorts still name it, it lives on as an implicit Cohort: without its
// quotas, its limits, its parent and its weight.
func (t *Tree) DeleteCohort(name string) {
	t.SetCohortWeight(name, DefaultWeight)
	if _, ok := t.cohortSpecs[name]; !ok {
		return
	}
	delete(t.cohortSpecs, name)
	t.rebuild()
}

// AddUsage adds u to what the ClusterQueue cq holds. Negative amounts are
// ignored. It does not check that u fits; see Fits.
func (t *Tree) AddUsage(cq string, u map[FR]int64) {
	n := t.clusterQueues[cq]
	if n == nil {
		return
	}
	for fr, amount := range u {
		if amount > 0 {
			n.addUsage(fr, amount)
		}
	}
}

// RemoveUsage takes u off what the ClusterQueue cq holds; usage does not
// go below 0. Negative amounts are ignored.
func (t *Tree) RemoveUsage(cq string, u map[FR]int64) {
	n := t.clusterQueues[cq]
	if n == nil {
		return
	}
	for fr, amount := range u {
		if amount > 0 {
			n.addUsage(fr, -amount)
		}
	}
}

// Available is how much more of fr the ClusterQueue cq can take now,
// borrowing included; 0 when it is over its limits or in a cycle.
func (t *Tree) Available(cq string, fr FR) int64 {
	n := t.clusterQueues[cq]
	if n == nil || n.cycle != nil {
		return 0
	}
	return max(0, n.available(fr))
}

// PotentialAvailable is how much of fr the ClusterQueue cq could take if
// nothing were in use anywhere; 0 in a cycle.
func (t *Tree) PotentialAvailable(cq string, fr FR) int64 {
	n := t.clusterQueues[cq]
	if n == nil || n.cycle != nil {
		return 0
	}
	return max(0, n.potentialAvailable(fr))
}

// Fits reports whether the ClusterQueue cq can take request now: every
// FR's amount is at most Available. A ClusterQueue in a cycle, or an
// unknown one, fits nothing, not even an empty request.
func (t *Tree) Fits(cq string, request map[FR]int64) bool {
	n := t.clusterQueues[cq]
	if n == nil || n.cycle != nil {
		return false
	}
	for fr, amount := range request {
		if amount > max(0, n.available(fr)) {
			return false
		}
	}
	return true
}

// Borrowing reports whether taking request more of fr would bring the
// ClusterQueue cq above its nominal quota, which only a ClusterQueue in a
// cohort can do.
func (t *Tree) Borrowing(cq string, fr FR, request int64) bool {
	n := t.clusterQueues[cq]
	if n == nil || n.parentName == "" {
		return false
	}
	return satAdd(n.usage[fr], request) > n.quotas[fr].Nominal
}

// Usage is how much of fr the ClusterQueue cq holds.
func (t *Tree) Usage(cq string, fr FR) int64 {
	if n := t.clusterQueues[cq]; n != nil {
		return n.usage[fr]
	}
	return 0
}

// Nominal is the ClusterQueue cq's nominal quota of fr.
func (t *Tree) Nominal(cq string, fr FR) int64 {
	if n := t.clusterQueues[cq]; n != nil {
		return n.quotas[fr].Nominal
	}
	return 0
}

// Borrowed is how much of fr the ClusterQueue cq holds beyond its nominal
// quota; 0 for a ClusterQueue without cohort.
func (t *Tree) Borrowed(cq string, fr FR) int64 {
	n := t.clusterQueues[cq]
	if n == nil || n.parentName == "" {
		return 0
	}
	return max(0, n.usage[fr]-n.quotas[fr].Nominal)
}

// Lent is the part of the ClusterQueue cq's lendable quota of fr (its
// quota beyond its local quota) that must be in use by others, given the
// free capacity of its cohort's pool. The queue's own usage in the pool is
// counted against its own lendable quota first, and others' usage counts
// against it only once it could not fit in the free part of the pool:
//
//	max(0, lendable − own usage in the pool − max(0, pool size − pool usage))
//
// 0 for a ClusterQueue without cohort.
func (t *Tree) Lent(cq string, fr FR) int64 {
	if n := t.clusterQueues[cq]; n != nil {
		return n.lent(fr)
	}
	return 0
}

// CohortLent is Lent for the Cohort cohort, in its parent's pool; 0 for a
// Cohort without usable parent.
func (t *Tree) CohortLent(cohort string, fr FR) int64 {
	if n := t.cohorts[cohort]; n != nil {
		return n.lent(fr)
	}
	return 0
}

// CohortUsage is how much of fr the Cohort cohort's children hold in its
// pool: for each child, its usage beyond its local quota.
func (t *Tree) CohortUsage(cohort string, fr FR) int64 {
	if n := t.cohorts[cohort]; n != nil {
		return n.usage[fr]
	}
	return 0
}

// CohortSubtreeQuota is the size of the Cohort cohort's pool of fr: its
// own nominal quota plus what each child lends it.
func (t *Tree) CohortSubtreeQuota(cohort string, fr FR) int64 {
	if n := t.cohorts[cohort]; n != nil {
		return n.subtreeQuota[fr]
	}
	return 0
}

// Root is the name of the root Cohort of the tree the ClusterQueue cq is
// in; "" when cq has no cohort. Below a loop of Cohorts, it is the first
// of the loop's members by name.
func (t *Tree) Root(cq string) string {
	n := t.clusterQueues[cq]
	if n == nil || n.parentName == "" {
		return ""
	}
	return t.CohortRoot(n.parentName)
}

// CohortRoot is the name of the root Cohort of the tree the Cohort cohort
// is in (cohort itself for a root, or a Cohort not known). Below a loop,
// it is the first of the loop's members by name.
func (t *Tree) CohortRoot(cohort string) string {
	n := t.cohorts[cohort]
	if n == nil {
		return cohort
	}
	if n.cycle != nil {
		return n.cycle[0]
	}
	for n.parent != nil {
		n = n.parent
	}
	return n.name
}

// ClusterQueueCohort is the name of the ClusterQueue cq's cohort, its
// parent; "" when it has none or cq is not known.
func (t *Tree) ClusterQueueCohort(cq string) string {
	if n := t.clusterQueues[cq]; n != nil {
		return n.parentName
	}
	return ""
}

// CohortParent is the name of the Cohort cohort's usable parent: "" for a
// root, a member of a loop of Cohorts (its parent is unusable), or a
// Cohort not known. Following it up from any Cohort ends.
func (t *Tree) CohortParent(cohort string) string {
	if n := t.cohorts[cohort]; n != nil && n.parent != nil {
		return n.parent.name
	}
	return ""
}

// CohortChildren returns the names of the Cohort cohort's direct children,
// the Cohorts and the ClusterQueues apart, each sorted. A loop member
// whose parent is unusable is no child of it.
func (t *Tree) CohortChildren(cohort string) (cohorts, clusterQueues []string) {
	n := t.cohorts[cohort]
	if n == nil {
		return nil, nil
	}
	for _, ch := range n.children {
		if ch.isCohort {
			cohorts = append(cohorts, ch.name)
		} else {
			clusterQueues = append(clusterQueues, ch.name)
		}
	}
	slices.Sort(cohorts)
	slices.Sort(clusterQueues)
	return cohorts, clusterQueues
}

// LocalFree is how much of the quota of fr that the ClusterQueue cq's
// lendingLimit keeps out of its cohort's pool is still free: what only cq
// can take. 0 without a lendingLimit.
func (t *Tree) LocalFree(cq string, fr FR) int64 {
	if n := t.clusterQueues[cq]; n != nil {
		return n.localFree(fr)
	}
	return 0
}

// CohortLocalFree is LocalFree for the Cohort cohort: the part of its pool
// of fr that its lendingLimit keeps from its parent and that its subtree
// does not use.
func (t *Tree) CohortLocalFree(cohort string, fr FR) int64 {
	if n := t.cohorts[cohort]; n != nil {
		return n.localFree(fr)
	}
	return 0
}

// ClusterQueuesUnder returns the names of the ClusterQueues in the subtree
// of the Cohort cohort, sorted. Below a loop, ask for a loop member: the
// loop's subtrees are returned together.
func (t *Tree) ClusterQueuesUnder(cohort string) []string {
	c := t.cohorts[cohort]
	if c == nil {
		return nil
	}
	var out []string
	var walk func(n *node)
	walk = func(n *node) {
		for _, ch := range n.children {
			if ch.isCohort {
				walk(ch)
			} else {
				out = append(out, ch.name)
			}
		}
	}
	if c.inLoop {
		for _, m := range c.cycle {
			walk(t.cohorts[m])
		}
	} else {
		walk(c)
	}
	slices.Sort(out)
	return out
}

// CohortCycle returns the sorted names of the Cohorts forming the loop
// that the Cohort cohort's parent chain runs into, or nil.
func (t *Tree) CohortCycle(cohort string) []string {
	if n := t.cohorts[cohort]; n != nil {
		return slices.Clone(n.cycle)
	}
	return nil
}

// CohortFRs returns the FRs a Cohort's pool counts (its own quota, what
// its members lend it, what they hold in it), sorted by flavor then
// resource.
func (t *Tree) CohortFRs(cohort string) []FR {
	n := t.cohorts[cohort]
	if n == nil {
		return nil
	}
	set := map[FR]bool{}
	for fr := range n.subtreeQuota {
		set[fr] = true
	}
	for fr := range n.usage {
		set[fr] = true
	}
	return slices.SortedFunc(maps.Keys(set), CompareFR)
}

// CohortTotals is, per FR, how much the ClusterQueues in the subtree of the
// Cohort cohort hold (the loop's other members' subtrees not included).
func (t *Tree) CohortTotals(cohort string) map[FR]int64 {
	out := map[FR]int64{}
	var walk func(n *node)
	walk = func(n *node) {
		for _, ch := range n.children {
			if ch.isCohort {
				walk(ch)
				continue
			}
			for fr, v := range ch.usage {
				out[fr] = satAdd(out[fr], v)
			}
		}
	}
	if c := t.cohorts[cohort]; c != nil {
		walk(c)
	}
	return out
}

// CohortBorrowed is how much of fr the Cohort cohort's subtree takes from
// its parent beyond its own pool; 0 for a Cohort without usable parent.
func (t *Tree) CohortBorrowed(cohort string, fr FR) int64 {
	n := t.cohorts[cohort]
	if n == nil || n.parent == nil {
		return 0
	}
	return max(0, n.usage[fr]-n.subtreeQuota[fr])
}

// CompareFR orders flavor-resources by flavor, then resource.
func CompareFR(a, b FR) int {
	if a.Flavor != b.Flavor {
		return strings.Compare(a.Flavor, b.Flavor)
	}
	return strings.Compare(string(a.Resource), string(b.Resource))
}

// CapKind is what caps how much of an FR a ClusterQueue can take.
type CapKind int

const (
	// CapNominal: the queue has no cohort; its nominal quota is all.
	CapNominal CapKind = iota
	// CapPool: the pool of the root Cohort Node is all there is.
	CapPool
	// CapBorrowingLimit: the borrowingLimit of Node (a ClusterQueue or a
	// Cohort) stops the borrowing.
	CapBorrowingLimit
	// CapCycle: the queue is below a loop of Cohorts.
	CapCycle
)

// Cap says what caps how much of an FR a ClusterQueue can take.
type Cap struct {
	Kind CapKind
	// Node is the ClusterQueue or Cohort the cap belongs to; Cohort tells
	// which of the two it is.
	Node   string
	Cohort bool
	// Limit is the nominal quota (CapNominal), the pool's size (CapPool)
	// or the borrowingLimit (CapBorrowingLimit); InUse what is held of
	// the quota or pool.
	Limit, InUse int64
}

// Limits explain Available and PotentialAvailable: what caps each.
type Limits struct {
	Available, Potential int64
	// Headroom is Available before the parts that come from cohorts are
	// clamped at 0: negative by how far a pool or a borrowingLimit is
	// over-used (after quota or limits shrank), so that what must be given
	// back for a request to fit is request − Headroom.
	Headroom int64
	// Now caps Available; Ever caps Potential.
	Now, Ever Cap
	// Nominal and Usage are the ClusterQueue's own; Lent is Tree.Lent.
	Nominal, Usage, Lent int64
}

// Explain says how much of fr the ClusterQueue cq can take, now and at
// most, and what caps each. When two caps give the same figure, the one
// nearer the queue is named.
func (t *Tree) Explain(cq string, fr FR) Limits {
	n := t.clusterQueues[cq]
	if n == nil {
		return Limits{}
	}
	l := Limits{Nominal: n.quotas[fr].Nominal, Usage: n.usage[fr], Lent: n.lent(fr)}
	if n.cycle != nil {
		c := Cap{Kind: CapCycle, Node: n.cycle[0], Cohort: true}
		l.Now, l.Ever = c, c
		return l
	}
	var avail, potential int64
	avail, l.Headroom, l.Now = n.availableCap(fr)
	potential, l.Ever = n.potentialCap(fr)
	l.Available, l.Potential = max(0, avail), max(0, potential)
	return l
}

// availableCap is available; the same figure without clamping what comes
// from the parent at 0 (see Limits.Headroom); and what caps it, the cap
// whose unclamped figure is lowest.
func (n *node) availableCap(fr FR) (int64, int64, Cap) {
	if n.parent == nil {
		c := Cap{Kind: CapPool, Node: n.name, Cohort: n.isCohort, Limit: n.subtreeQuota[fr], InUse: n.usage[fr]}
		if !n.isCohort {
			c.Kind = CapNominal
		}
		v := n.subtreeQuota[fr] - n.usage[fr]
		return v, v, c
	}
	fromParent, rawFromParent, c := n.parent.availableCap(fr)
	if bl := n.quotas[fr].BorrowingLimit; bl != nil {
		capped := satAdd(n.lendable(fr)-n.usageInParent(fr), *bl)
		fromParent = min(fromParent, capped)
		if capped <= rawFromParent {
			rawFromParent = capped
			c = Cap{Kind: CapBorrowingLimit, Node: n.name, Cohort: n.isCohort, Limit: *bl, InUse: n.usage[fr]}
		}
	}
	localFree := max(0, n.localQuota(fr)-n.usage[fr])
	return satAdd(localFree, max(0, fromParent)), satAdd(localFree, rawFromParent), c
}

// potentialCap is potentialAvailable, with what caps it.
func (n *node) potentialCap(fr FR) (int64, Cap) {
	if n.parent == nil {
		c := Cap{Kind: CapPool, Node: n.name, Cohort: n.isCohort, Limit: n.subtreeQuota[fr]}
		if !n.isCohort {
			c.Kind = CapNominal
		}
		return n.subtreeQuota[fr], c
	}
	fromParent, c := n.parent.potentialCap(fr)
	p := satAdd(n.localQuota(fr), fromParent)
	if bl := n.quotas[fr].BorrowingLimit; bl != nil {
		if capped := satAdd(n.subtreeQuota[fr], *bl); capped <= p {
			p = capped
			c = Cap{Kind: CapBorrowingLimit, Node: n.name, Cohort: n.isCohort, Limit: *bl}
		}
	}
	return p, c
}

// Cycle returns the sorted names of the Cohorts forming the loop that the
// ClusterQueue cq's cohort chain runs into, or nil when there is none.
func (t *Tree) Cycle(cq string) []string {
	if n := t.clusterQueues[cq]; n != nil {
		return slices.Clone(n.cycle)
	}
	return nil
}

// rebuild derives the Cohorts, their links, loops, subtree quotas and
// usages from the ClusterQueues and the explicit Cohorts.
func (t *Tree) rebuild() {
	t.cohorts = map[string]*node{}
	for name, spec := range t.cohortSpecs {
		n := t.cohort(name)
		n.parentName = spec.parent
		n.quotas = spec.quotas
		if spec.parent != "" {
			t.cohort(spec.parent)
		}
	}
	for _, cq := range t.clusterQueues {
		if cq.parentName != "" {
			t.cohort(cq.parentName)
		}
	}
	t.markCycles()
	t.link()
	for _, c := range t.cohorts {
		if c.parent == nil {
			c.aggregate()
		}
	}
	for _, cq := range t.clusterQueues {
		if cq.parent == nil {
			cq.aggregate()
		}
	}
	for _, c := range t.cohorts {
		root := c
		for root.parent != nil {
			root = root.parent
		}
		c.setChildLendable(root)
	}
}

// cohort returns the Cohort name, creating it as an implicit one.
func (t *Tree) cohort(name string) *node {
	n := t.cohorts[name]
	if n == nil {
		n = &node{name: name, isCohort: true, weight: DefaultWeight}
		if w, ok := t.cohortWeights[name]; ok {
			n.weight = w
		}
		t.cohorts[name] = n
	}
	return n
}

// markCycles sets every Cohort's cycle, and inLoop for the loop members.
// Cohorts have at most one parent, so each parent chain either ends or
// runs into exactly one loop.
func (t *Tree) markCycles() {
	const (
		unseen = iota
		onPath
		done
	)
	state := make(map[string]int, len(t.cohorts))
	for _, start := range slices.Sorted(maps.Keys(t.cohorts)) {
		var path []string
		name := start
		for name != "" && state[name] == unseen {
			state[name] = onPath
			path = append(path, name)
			name = t.cohorts[name].parentName
		}
		var cycle []string
		switch {
		case name != "" && state[name] == onPath:
			loop := path[slices.Index(path, name):]
			for _, member := range loop {
				t.cohorts[member].inLoop = true
			}
			cycle = slices.Sorted(slices.Values(loop))
		case name != "":
			cycle = t.cohorts[name].cycle
		}
		for _, p := range path {
			state[p] = done
			t.cohorts[p].cycle = cycle
		}
	}
}

// link sets the usable parents and the children lists.
func (t *Tree) link() {
	for _, c := range t.cohorts {
		if c.parentName != "" && !c.inLoop {
			c.parent = t.cohorts[c.parentName]
			c.parent.children = append(c.parent.children, c)
		}
	}
	for _, cq := range t.clusterQueues {
		cq.parent, cq.cycle = nil, nil
		if cq.parentName != "" {
			cq.parent = t.cohorts[cq.parentName]
			cq.parent.children = append(cq.parent.children, cq)
			cq.cycle = cq.parent.cycle
		}
	}
}

// aggregate computes the subtree quotas of n's subtree and the usages of
// its Cohorts, bottom-up. A ClusterQueue's usage is its own and is left
// alone.
func (n *node) aggregate() {
	n.subtreeQuota = nominals(n.quotas)
	if !n.isCohort {
		return
	}
	n.usage = map[FR]int64{}
	for _, c := range n.children {
		c.aggregate()
		for fr := range c.subtreeQuota {
			n.subtreeQuota[fr] = satAdd(n.subtreeQuota[fr], c.lendable(fr))
		}
		for fr := range c.usage {
			if held := c.usageInParent(fr); held > 0 {
				n.usage[fr] = satAdd(n.usage[fr], held)
			}
		}
	}
}

// addUsage changes n's usage of fr by delta (not below 0) and carries the
// change of what n holds in its parent's pool up the parent chain.
func (n *node) addUsage(fr FR, delta int64) {
	for ; n != nil && delta != 0; n = n.parent {
		heldBefore := n.usageInParent(fr)
		n.setUsage(fr, max(0, satAdd(n.usage[fr], delta)))
		delta = n.usageInParent(fr) - heldBefore
	}
}

func (n *node) setUsage(fr FR, v int64) {
	if v == 0 {
		delete(n.usage, fr)
		return
	}
	n.usage[fr] = v
}

// localQuota is the part of n's subtree quota that its lending limit keeps
// out of the parent's pool.
func (n *node) localQuota(fr FR) int64 {
	ll := n.quotas[fr].LendingLimit
	if ll == nil {
		return 0
	}
	return max(0, n.subtreeQuota[fr]-*ll)
}

// localFree is the part of n's local quota of fr that its usage leaves.
func (n *node) localFree(fr FR) int64 {
	return max(0, n.localQuota(fr)-n.usage[fr])
}

// lendable is the part of n's subtree quota in the parent's pool.
func (n *node) lendable(fr FR) int64 {
	return n.subtreeQuota[fr] - n.localQuota(fr)
}

// usageInParent is the part of n's usage that its local quota does not
// cover, held in the parent's pool.
func (n *node) usageInParent(fr FR) int64 {
	return max(0, n.usage[fr]-n.localQuota(fr))
}

// available is how much more of fr n's subtree can take; negative when it
// already takes more than the tree allows.
func (n *node) available(fr FR) int64 {
	if n.parent == nil {
		return n.subtreeQuota[fr] - n.usage[fr]
	}
	fromParent := n.parent.available(fr)
	if bl := n.quotas[fr].BorrowingLimit; bl != nil {
		// n may hold at most lendable + BL in the parent's pool.
		fromParent = min(fromParent, satAdd(n.lendable(fr)-n.usageInParent(fr), *bl))
	}
	// What n does not lend stays n's even when the pool above is
	// over-used (its quota shrank under running workloads): only the
	// pool's share can be missing, never the local one.
	localFree := max(0, n.localQuota(fr)-n.usage[fr])
	return satAdd(localFree, max(0, fromParent))
}

// potentialAvailable is available with no usage anywhere.
func (n *node) potentialAvailable(fr FR) int64 {
	if n.parent == nil {
		return n.subtreeQuota[fr]
	}
	p := satAdd(n.localQuota(fr), n.parent.potentialAvailable(fr))
	if bl := n.quotas[fr].BorrowingLimit; bl != nil {
		p = min(p, satAdd(n.subtreeQuota[fr], *bl))
	}
	return p
}

// lent is the part of n's lendable quota of fr that must be in use by
// others, given the parent's free capacity (see Tree.Lent).
func (n *node) lent(fr FR) int64 {
	if n.parent == nil {
		return 0
	}
	parentFree := max(0, n.parent.subtreeQuota[fr]-n.parent.usage[fr])
	return max(0, satAdd(n.lendable(fr)-n.usageInParent(fr), -parentFree))
}

// sanitized copies quotas, taking negative amounts as 0, so that the
// caller's map and limit pointers can change without affecting the tree.
func sanitized(quotas map[FR]Quota) map[FR]Quota {
	out := make(map[FR]Quota, len(quotas))
	for fr, q := range quotas {
		out[fr] = Quota{
			Nominal:        max(0, q.Nominal),
			BorrowingLimit: nonNegativeCopy(q.BorrowingLimit),
			LendingLimit:   nonNegativeCopy(q.LendingLimit),
		}
	}
	return out
}

func nonNegativeCopy(p *int64) *int64 {
	if p == nil {
		return nil
	}
	v := max(0, *p)
	return &v
}

func nominals(quotas map[FR]Quota) map[FR]int64 {
	out := make(map[FR]int64, len(quotas))
	for fr, q := range quotas {
		out[fr] = q.Nominal
	}
	return out
}

// satAdd is a + b, saturating at the bounds of int64.
func satAdd(a, b int64) int64 {
	s := a + b
	switch {
	case a > 0 && b > 0 && s < 0:
		return math.MaxInt64
	case a < 0 && b < 0 && s >= 0:
		return math.MinInt64
	}
	return s
}
