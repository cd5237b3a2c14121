package quota

import (
	"cmp"
	"math"

	corev1 "k8s.io/api/core/v1"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

// DefaultWeight is the fair-sharing weight of a ClusterQueue or Cohort
// that sets none.
const DefaultWeight = 1.0

// WeightOf is the weight fs sets, DefaultWeight when it sets none.
func WeightOf(fs *v1alpha1.FairSharing) float64 {
	if fs == nil || fs.Weight == nil {
		return DefaultWeight
	}
	// AsFloat64Slow, because a weight such as 0.1 must come out as the
	// float nearest to it, and it mutates its receiver, which here
	// belongs to an object an informer shares.
	w := fs.Weight.DeepCopy()
	return w.AsFloat64Slow()
}

// SetClusterQueueWeight sets the fair-sharing weight of the ClusterQueue
// cq; unknown queues are ignored. A negative or NaN weight, which the API
// refuses, is taken as DefaultWeight.
//
// Weights are set apart from quotas, not with SetClusterQueue and
// SetCohort: they change no figure of the quota arithmetic, so setting
// one needs no rebuild of the tree, and callers that do not share fairly
// need not know weights exist.
func (t *Tree) SetClusterQueueWeight(cq string, weight float64) {
	if n := t.clusterQueues[cq]; n != nil {
		n.weight = sanitizedWeight(weight)
	}
}

// SetCohortWeight sets the fair-sharing weight of the explicit Cohort
// cohort, kept until DeleteCohort; an implicit Cohort has DefaultWeight.
// A negative or NaN weight is taken as DefaultWeight.
func (t *Tree) SetCohortWeight(cohort string, weight float64) {
	weight = sanitizedWeight(weight)
	if weight == DefaultWeight {
		delete(t.cohortWeights, cohort)
	} else {
		t.cohortWeights[cohort] = weight
	}
	if n := t.cohorts[cohort]; n != nil {
		n.weight = weight
	}
}

func sanitizedWeight(w float64) float64 {
	if math.IsNaN(w) || w < 0 {
		return DefaultWeight
	}
	return w
}

// Share is the weighted dominant resource share of a ClusterQueue or
// Cohort: for each resource, what the node uses beyond its subtree quota
// (summed over flavors) per 1000 of what its parent could lend it if
// nothing were in use (summed over the tree's flavors of that resource);
// the largest of these, divided by the node's weight. A node that borrows
// nothing has share 0; so does a root, which has no one to borrow from.
//
// A node of weight 0 that borrows has an infinite share: it ranks above
// every finite share, and among infinite ones by Ratio (see
// CompareShares).
type Share struct {
	// Ratio is the unweighted share, the largest per-resource ratio; 0
	// when the node borrows nothing, or only resources its parent can
	// lend none of.
	Ratio float64
	// Resource is the resource Ratio was found for ("" when Ratio is 0);
	// of equal ratios, the first by name.
	Resource corev1.ResourceName
	// Weight is the node's weight.
	Weight float64
	// Borrowing is whether the node uses more than its subtree quota of
	// some flavor and resource.
	Borrowing bool
}

// Infinite reports whether the share is infinite: weight 0 and borrowing.
func (s Share) Infinite() bool { return s.Weight == 0 && s.Borrowing }

// Value is the share, +Inf when Infinite.
func (s Share) Value() float64 {
	switch {
	case s.Infinite():
		return math.Inf(1)
	case s.Ratio == 0:
		return 0 // also for weight 0 without borrowing, where 0/0 is NaN
	}
	return s.Ratio / s.Weight
}

// Weighted is the share as status reports it: Value rounded up, so that
// any borrowing at all shows, and math.MaxInt64 for an infinite share or
// one too large for an int64 (a tiny weight).
func (s Share) Weighted() int64 {
	// float64(math.MaxInt64) is 2^63, one above the largest int64, and
	// converting a float at or above it to int64 is undefined in Go.
	c := math.Ceil(s.Value())
	if c >= float64(math.MaxInt64) {
		return math.MaxInt64
	}
	return int64(c)
}

// CompareShares orders shares from the node with the best claim to more
// quota (lowest share) to the one that should give back first: infinite
// shares above all finite ones, and among themselves by Ratio.
func CompareShares(a, b Share) int {
	switch {
	case a.Infinite() && b.Infinite():
		return cmp.Compare(a.Ratio, b.Ratio)
	case a.Infinite():
		return 1
	case b.Infinite():
		return -1
	}
	return cmp.Compare(a.Value(), b.Value())
}

// ClusterQueueShare is the share of the ClusterQueue cq with extra (a
// pending workload's usage) added to what it holds; extra may be nil. An
// unknown queue, a queue without cohort and a queue below a loop of
// Cohorts have share 0.
func (t *Tree) ClusterQueueShare(cq string, extra map[FR]int64) Share {
	n := t.clusterQueues[cq]
	if n == nil {
		return Share{Weight: DefaultWeight}
	}
	return n.share(extra)
}

// CohortShare is the share of the Cohort cohort in its parent; 0 for a
// root, an unknown Cohort and a Cohort at or below a loop of Cohorts.
func (t *Tree) CohortShare(cohort string) Share {
	n := t.cohorts[cohort]
	if n == nil {
		return Share{Weight: DefaultWeight}
	}
	return n.share(nil)
}

// share is n's share with extra added to its usage.
func (n *node) share(extra map[FR]int64) Share {
	s := Share{Weight: n.weight}
	if n.parent == nil || n.cycle != nil {
		return s
	}
	// A tree has a handful of resources: a slice on the stack sums what
	// the node uses beyond its quota per resource without the map it
	// would otherwise allocate for every share (preemption under fair
	// sharing asks for one per candidate).
	var buf [8]resourceOver
	over := buf[:0]
	for fr, q := range n.subtreeQuota {
		// usage − quota cannot overflow (both are in [0, MaxInt64]);
		// adding extra saturates.
		if o := satAdd(n.usage[fr]-q, max(0, extra[fr])); o > 0 {
			over = addOver(over, fr.Resource, o)
		}
	}
	s.Borrowing = len(over) > 0
	for _, o := range over {
		lendable := n.parent.childLendable[o.resource]
		if lendable <= 0 {
			continue
		}
		// In float64: o × 1000 may not fit an int64, and the ratio is
		// a fraction that the weight divides further.
		ratio := float64(o.amount) * 1000 / float64(lendable)
		if ratio > s.Ratio || ratio == s.Ratio && o.resource < s.Resource {
			s.Ratio, s.Resource = ratio, o.resource
		}
	}
	return s
}

// resourceOver is how much of a resource a node uses beyond its quota.
type resourceOver struct {
	resource corev1.ResourceName
	amount   int64
}

// addOver adds amount to resource's entry of over, or appends one.
func addOver(over []resourceOver, resource corev1.ResourceName, amount int64) []resourceOver {
	for i := range over {
		if over[i].resource == resource {
			over[i].amount = satAdd(over[i].amount, amount)
			return over
		}
	}
	return append(over, resourceOver{resource: resource, amount: amount})
}

// setChildLendable computes, for the Cohort n, what its children's shares
// are measured against: per resource, the sum over the FRs of its root's
// pool of how much n could hand a child with nothing in use anywhere.
// It depends on quotas and limits alone, not on usage, so rebuild
// computes it once for every usage change and query that follows.
func (n *node) setChildLendable(root *node) {
	n.childLendable = map[corev1.ResourceName]int64{}
	for fr := range root.subtreeQuota {
		n.childLendable[fr.Resource] = satAdd(n.childLendable[fr.Resource], max(0, n.potentialAvailable(fr)))
	}
}
