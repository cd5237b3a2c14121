// Package preemption chooses which admitted workloads to evict so that a
// pending one fits: lower-priority workloads of its own ClusterQueue, and
// workloads of other ClusterQueues of its cohort that hold quota beyond
// their nominal quota (quota lent to them, which the pending workload's
// queue reclaims, or, by policy, quota it may borrow itself).
//
// It only decides. The victims it names are evicted by the admitter's
// usual eviction, which keeps their quota until their pods stop; while
// they stop they still count in the quota tree and are offered again as
// candidates (marked Evicting, and taken first), so deciding again before
// they stop names the same victims and no more.
//
// The choice follows Kueue's classical preemption: candidates are sorted
// (workloads already being evicted first, then those of other queues, then
// lowest priority, then the most recently reserved), taken in that order
// until the pending workload fits, and then every one but the last is put
// back, from the last but one to the first, if the workload fits without
// it. A workload that would not fit even with every candidate gone gets no
// victims.
package preemption

import (
	"cmp"
	"slices"
	"time"

	"github.com/sluice-dev/sluice/services/admitter/internal/quota"
)

// WithinClusterQueue says which workloads of its own ClusterQueue a
// pending workload may preempt.
type WithinClusterQueue string

const (
	// WithinNever preempts nothing in the queue.
	WithinNever WithinClusterQueue = "Never"
	// WithinLowerPriority preempts workloads of lower priority.
	WithinLowerPriority WithinClusterQueue = "LowerPriority"
	// WithinLowerOrNewerEqualPriority also preempts workloads of equal
	// priority that queued after the pending one.
	WithinLowerOrNewerEqualPriority WithinClusterQueue = "LowerOrNewerEqualPriority"
)

// ReclaimWithinCohort says which workloads of other ClusterQueues of its
// cohort, holding quota beyond their nominal quota, a pending workload may
// preempt.
type ReclaimWithinCohort string

const (
	// ReclaimNever preempts nothing in other queues.
	ReclaimNever ReclaimWithinCohort = "Never"
	// ReclaimLowerPriority preempts workloads of lower priority.
	ReclaimLowerPriority ReclaimWithinCohort = "LowerPriority"
	// ReclaimAny preempts any workload that borrows.
	ReclaimAny ReclaimWithinCohort = "Any"
)

// BorrowWithinCohort says whether a pending workload that would itself
// borrow may preempt workloads of other queues to do so.
type BorrowWithinCohort struct {
	// LowerPriority allows it, against workloads of lower priority.
	LowerPriority bool
	// MaxPriorityThreshold, when set, protects workloads of a higher
	// priority from such preemption.
	MaxPriorityThreshold *int32
}

// Policy is a ClusterQueue's preemption policy.
type Policy struct {
	WithinClusterQueue  WithinClusterQueue
	ReclaimWithinCohort ReclaimWithinCohort
	BorrowWithinCohort  BorrowWithinCohort
}

// Workload is an admitted workload, a candidate victim, or the pending
// workload that asks for victims.
type Workload struct {
	// Key names the workload ("namespace/name"); it breaks ties.
	Key string
	// ClusterQueue holds the workload's quota (or is the pending
	// workload's queue).
	ClusterQueue string
	// Priority of the workload.
	Priority int32
	// QueuedAt is when the workload took its place in its queue.
	QueuedAt time.Time
	// ReservedAt is when its quota was reserved (admitted workloads).
	ReservedAt time.Time
	// Usage is what it holds in the quota tree (or asks for, pending).
	Usage map[quota.FR]int64
	// Evicting: it is being evicted already and still holds its quota.
	Evicting bool
}

// Reason says why a victim was chosen.
type Reason string

const (
	// InClusterQueue: a workload of lower priority in the same queue.
	InClusterQueue Reason = "InClusterQueue"
	// InCohortReclamation: a workload of another queue held quota the
	// pending workload's queue lent, and the pending workload fits within
	// its queue's nominal quota without it.
	InCohortReclamation Reason = "InCohortReclamation"
	// InCohortReclaimWhileBorrowing: a workload of lower priority in
	// another queue borrowed quota the pending workload borrows in its
	// place (borrowWithinCohort).
	InCohortReclaimWhileBorrowing Reason = "InCohortReclaimWhileBorrowing"
)

// Target is a chosen victim.
type Target struct {
	Workload *Workload
	Reason   Reason
}

// variant is how a candidate may be preempted.
type variant int

const (
	// sameQueue: a candidate of the pending workload's own queue.
	sameQueue variant = iota
	// reclaim: of another queue, while the pending workload's queue
	// stays within its nominal quota; allowed in every pass.
	reclaim
	// reclaimWithoutBorrowing: of another queue, allowed only if the
	// pending workload then fits without borrowing.
	reclaimWithoutBorrowing
	// reclaimWhileBorrowing: of another queue, allowed although the
	// pending workload borrows (borrowWithinCohort).
	reclaimWhileBorrowing
)

type candidate struct {
	w       *Workload
	variant variant
}

// Targets returns the victims that make pending fit in its ClusterQueue
// of tree, under policy, among admitted (every workload holding quota in
// tree, each with its usage), or nil when there are none: pending already
// fits, nothing may be preempted, or it would still not fit. tree is
// changed while victims are tried and left as it was.
func Targets(tree *quota.Tree, pending *Workload, policy Policy, admitted []*Workload) []Target {
	needed := frsToFree(tree, pending)
	if len(needed) == 0 {
		return nil
	}
	candidates := candidatesFor(tree, pending, policy, admitted, needed)
	if len(candidates) == 0 {
		return nil
	}
	slices.SortFunc(candidates, func(a, b candidate) int { return compareCandidates(pending.ClusterQueue, a, b) })
	for _, allowBorrowing := range passes(tree, pending, policy, candidates, needed) {
		if targets := choose(tree, pending, candidates, needed, allowBorrowing); targets != nil {
			return targets
		}
	}
	return nil
}

// frsToFree are the flavor-resources pending asks more of than its queue
// can take now.
func frsToFree(tree *quota.Tree, pending *Workload) map[quota.FR]bool {
	needed := map[quota.FR]bool{}
	for fr, amount := range pending.Usage {
		if amount > tree.Available(pending.ClusterQueue, fr) {
			needed[fr] = true
		}
	}
	return needed
}

// candidatesFor are the admitted workloads policy lets pending preempt and
// whose removal could help: they hold some of an FR it needs freed.
func candidatesFor(tree *quota.Tree, pending *Workload, policy Policy, admitted []*Workload, needed map[quota.FR]bool) []candidate {
	cq := pending.ClusterQueue
	root := tree.Root(cq)
	withinNominal := fitsNominal(tree, pending)
	var out []candidate
	for _, w := range admitted {
		if !holdsAny(w, needed) {
			continue
		}
		switch {
		case w.ClusterQueue == cq:
			if mayPreemptInQueue(policy.WithinClusterQueue, pending, w) {
				out = append(out, candidate{w: w, variant: sameQueue})
			}
		case root != "" && tree.Root(w.ClusterQueue) == root:
			if !borrowsAny(tree, w.ClusterQueue, needed) || !mayReclaim(policy.ReclaimWithinCohort, pending, w) {
				continue
			}
			out = append(out, candidate{w: w, variant: cohortVariant(policy.BorrowWithinCohort, pending, w, withinNominal)})
		}
	}
	return out
}

// cohortVariant classifies a candidate of another queue of the cohort.
func cohortVariant(b BorrowWithinCohort, pending, w *Workload, withinNominal bool) variant {
	switch {
	case withinNominal:
		return reclaim
	case !b.LowerPriority || w.Priority >= pending.Priority ||
		(b.MaxPriorityThreshold != nil && w.Priority > *b.MaxPriorityThreshold):
		return reclaimWithoutBorrowing
	default:
		return reclaimWhileBorrowing
	}
}

func mayPreemptInQueue(p WithinClusterQueue, pending, w *Workload) bool {
	switch p {
	case WithinLowerPriority:
		return w.Priority < pending.Priority
	case WithinLowerOrNewerEqualPriority:
		return w.Priority < pending.Priority || (w.Priority == pending.Priority && pending.QueuedAt.Before(w.QueuedAt))
	default:
		return false
	}
}

func mayReclaim(p ReclaimWithinCohort, pending, w *Workload) bool {
	switch p {
	case ReclaimLowerPriority:
		return w.Priority < pending.Priority
	case ReclaimAny:
		return true
	default:
		return false
	}
}

// compareCandidates orders the candidates to try: those being evicted
// already (they are going anyway), then those of other queues (they hold
// what is not theirs), then the lowest priority, then the most recently
// reserved (it lost the least work), then by key.
func compareCandidates(cq string, a, b candidate) int {
	if a.w.Evicting != b.w.Evicting {
		if a.w.Evicting {
			return -1
		}
		return 1
	}
	aOther, bOther := a.w.ClusterQueue != cq, b.w.ClusterQueue != cq
	if aOther != bOther {
		if aOther {
			return -1
		}
		return 1
	}
	if c := cmp.Compare(a.w.Priority, b.w.Priority); c != 0 {
		return c
	}
	if c := b.w.ReservedAt.Compare(a.w.ReservedAt); c != 0 {
		return c
	}
	return cmp.Compare(a.w.Key, b.w.Key)
}

// passes are the borrowing modes to try, in order: whether the pending
// workload may end up borrowing. A queue with no candidates elsewhere, or
// that may not borrow to preempt and is not below its nominal quota, tries
// borrowing only; one that may not borrow to preempt and has no candidate
// it may always take first tries to fit within its nominal quota; the
// others try borrowing first.
func passes(tree *quota.Tree, pending *Workload, policy Policy, candidates []candidate, needed map[quota.FR]bool) []bool {
	var others, reclaims bool
	for _, c := range candidates {
		others = others || c.variant != sameQueue
		reclaims = reclaims || c.variant == reclaim
	}
	noBorrowPolicy := !policy.BorrowWithinCohort.LowerPriority
	switch {
	case !others, noBorrowPolicy && !belowNominal(tree, pending.ClusterQueue, needed):
		return []bool{true}
	case noBorrowPolicy && !reclaims:
		return []bool{false, true}
	default:
		return []bool{true, false}
	}
}

// choose takes candidates in order until pending fits (within its nominal
// quota unless allowBorrowing), then puts back every victim but the last
// that it fits without, last but one first. nil when it never fits. tree
// is left as it was.
func choose(tree *quota.Tree, pending *Workload, candidates []candidate, needed map[quota.FR]bool, allowBorrowing bool) []Target {
	var targets []Target
	defer func() {
		for _, t := range targets {
			tree.AddUsage(t.Workload.ClusterQueue, t.Workload.Usage)
		}
	}()
	fits := false
	for _, c := range candidates {
		if !valid(tree, c, needed, allowBorrowing) {
			continue
		}
		tree.RemoveUsage(c.w.ClusterQueue, c.w.Usage)
		targets = append(targets, Target{Workload: c.w, Reason: reasonOf(c.variant)})
		if fits = fitsAfter(tree, pending, allowBorrowing); fits {
			break
		}
	}
	if !fits {
		return nil
	}
	for i := len(targets) - 2; i >= 0; i-- {
		w := targets[i].Workload
		tree.AddUsage(w.ClusterQueue, w.Usage)
		if fitsAfter(tree, pending, allowBorrowing) {
			targets = slices.Delete(targets, i, i+1)
			continue
		}
		tree.RemoveUsage(w.ClusterQueue, w.Usage)
	}
	return slices.Clone(targets)
}

// valid reports whether candidate c may still be taken: a candidate of
// another queue only while its queue borrows some FR of needed (earlier
// victims may have brought it back within its nominal quota), and one that
// may not be taken while the pending workload borrows only in a pass that
// does not borrow.
func valid(tree *quota.Tree, c candidate, needed map[quota.FR]bool, allowBorrowing bool) bool {
	switch c.variant {
	case sameQueue:
		return true
	case reclaimWithoutBorrowing:
		if allowBorrowing {
			return false
		}
	}
	return borrowsAny(tree, c.w.ClusterQueue, needed)
}

func reasonOf(v variant) Reason {
	switch v {
	case sameQueue:
		return InClusterQueue
	case reclaimWhileBorrowing:
		return InCohortReclaimWhileBorrowing
	default:
		return InCohortReclamation
	}
}

// fitsAfter reports whether pending fits its queue as tree stands, and
// also within its nominal quota unless allowBorrowing.
func fitsAfter(tree *quota.Tree, pending *Workload, allowBorrowing bool) bool {
	if !tree.Fits(pending.ClusterQueue, pending.Usage) {
		return false
	}
	return allowBorrowing || fitsNominal(tree, pending)
}

// fitsNominal reports whether the usage of pending's queue plus pending
// stays within the queue's nominal quota on every FR.
func fitsNominal(tree *quota.Tree, pending *Workload) bool {
	for fr, amount := range pending.Usage {
		if tree.Usage(pending.ClusterQueue, fr)+amount > tree.Nominal(pending.ClusterQueue, fr) {
			return false
		}
	}
	return true
}

// belowNominal reports whether cq uses less than its nominal quota of
// every FR in frs.
func belowNominal(tree *quota.Tree, cq string, frs map[quota.FR]bool) bool {
	for fr := range frs {
		if tree.Usage(cq, fr) >= tree.Nominal(cq, fr) {
			return false
		}
	}
	return true
}

// borrowsAny reports whether cq holds more than its nominal quota of some
// FR in frs.
func borrowsAny(tree *quota.Tree, cq string, frs map[quota.FR]bool) bool {
	for fr := range frs {
		if tree.Borrowed(cq, fr) > 0 {
			return true
		}
	}
	return false
}

// holdsAny reports whether w holds some of an FR in frs.
func holdsAny(w *Workload, frs map[quota.FR]bool) bool {
	for fr := range frs {
		if w.Usage[fr] > 0 {
			return true
		}
	}
	return false
}
