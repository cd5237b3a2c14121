// Package preemption chooses which admitted workloads to evict so that a
// pending one fits: lower-priority workloads of its own ClusterQueue, and
// workloads of other ClusterQueues of its cohort tree that hold quota
// beyond their nominal quota (quota lent to them, which the pending
// workload's queue reclaims, or, by policy, quota it may borrow itself).
//
// In nested cohorts, the other queues are looked for from the pending
// workload's queue upwards: in the subtree of its cohort, then of that
// cohort's parent, and so on to the root, each time leaving out the
// subtree already searched. A sub-cohort is searched only while its
// subtree uses more than its own quota of what the pending workload
// lacks, so what a cohort borrows within itself is its own business: only
// what it took from outside can be reclaimed.
//
// It only decides. The victims it names are evicted by the admitter's
// usual eviction, which keeps their quota until their pods stop; while
// they stop they still count in the quota tree and are offered again as
// candidates (marked Evicting, and taken first), so deciding again before
// they stop names the same victims and no more.
//
// The choice follows Kueue's classical preemption: candidates are sorted
// (workloads already being evicted first, then those of other queues that
// hold quota the pending workload's queue has the better claim to, then
// the other queues' other workloads, then those of its own queue; within
// each, lowest priority, then the most recently reserved), taken in that
// order until the pending workload fits, and then every one but the last
// is put back, from the last but one to the first, if the workload fits
// without it. A workload that would not fit even with every candidate
// gone gets no victims; Blocked says why, when a policy is the reason.
//
// Under fair sharing, FairTargets and FairBlocked take their place: the
// weighted shares of the queues and Cohorts decide whose workloads go
// (see FairTargets).
package preemption

import (
	"cmp"
	"fmt"
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
	// InCohortReclamation: a workload of another queue held quota that the
	// pending workload's queue, or a cohort above it, has the better claim
	// to: the queue lent it, and the pending workload fits within the
	// queue's nominal quota, or within the quota of the cohort, without it.
	InCohortReclamation Reason = "InCohortReclamation"
	// InCohortReclaimWhileBorrowing: a workload of lower priority in
	// another queue borrowed quota the pending workload borrows in its
	// place (borrowWithinCohort).
	InCohortReclaimWhileBorrowing Reason = "InCohortReclaimWhileBorrowing"
	// InCohortFairSharing: under fair sharing, a workload of another queue
	// whose side of the cohort had a weighted share the preemption
	// strategy found too high next to the pending workload's side.
	InCohortFairSharing Reason = "InCohortFairSharing"
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
	// reclaim: of another queue, found where the pending workload's queue
	// has the better claim to the quota (see reclaimable); allowed in
	// every pass.
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
	// lca is, for a workload of another queue, the Cohort where the
	// search found its queue: the lowest ancestor that queue shares with
	// the pending workload's.
	lca string
}

// Targets returns the victims that make pending fit in its ClusterQueue
// of tree, under policy, among admitted (every workload holding quota in
// tree, each with its usage), or nil when there are none: pending already
// fits, nothing may be preempted, or it would still not fit. tree is
// changed while victims are tried and left as it was.
//
// admitted is best given in Compare order: the candidates then take time
// linear in their number to put in the order they are tried in, rather
// than a sort.
func Targets(tree *quota.Tree, pending *Workload, policy Policy, admitted []*Workload) []Target {
	needed := frsToFree(tree, pending)
	if len(needed) == 0 {
		return nil
	}
	targets, _ := search(tree, pending, policy, candidatesFor(tree, pending, policy, admitted, needed), needed)
	return targets
}

// Compare orders admitted workloads as preemption tries them, whatever
// the pending workload: those being evicted already (they are going
// anyway), then the lowest priority, then the most recently reserved (it
// lost the least work), then by key. Targets and Blocked try candidates
// in this order within groups that depend on the pending workload, and
// take admitted best sorted by it.
func Compare(a, b *Workload) int {
	if a.Evicting != b.Evicting {
		if a.Evicting {
			return -1
		}
		return 1
	}
	return compareWithinEviction(a, b)
}

// compareWithinEviction is Compare for workloads alike in Evicting.
func compareWithinEviction(a, b *Workload) int {
	if c := cmp.Compare(a.Priority, b.Priority); c != 0 {
		return c
	}
	if c := b.ReservedAt.Compare(a.ReservedAt); c != 0 {
		return c
	}
	return cmp.Compare(a.Key, b.Key)
}

// search puts candidates in the order to try them and tries the passes
// policy calls for; it returns the victims of the first pass that makes
// pending fit, and whether that pass let pending borrow.
func search(tree *quota.Tree, pending *Workload, policy Policy, candidates []candidate, needed []quota.FR) ([]Target, bool) {
	if len(candidates) == 0 {
		return nil, false
	}
	candidates = inTryOrder(candidates)
	for _, allowBorrowing := range passes(tree, pending, policy, candidates, needed) {
		if targets := choose(tree, pending, candidates, needed, allowBorrowing); targets != nil {
			return targets, allowBorrowing
		}
	}
	return nil, false
}

// inTryOrder is candidates in compareCandidates order. Candidates whose
// workloads come in Compare order, as Targets' callers best give them,
// need only a stable partition into the ranks compareCandidates puts
// before the rest of Compare's order (tryRank): linear, not a sort, and
// nothing at all when they come in rank order too (one group, none
// evicting: often so). Its result is the sort's, as compareCandidates is
// a total order (ending on the key). Others are sorted; candidates may be
// reordered in place.
func inTryOrder(candidates []candidate) []candidate {
	switch {
	case !slices.IsSortedFunc(candidates, compareWorkloads):
		slices.SortFunc(candidates, compareCandidates)
		return candidates
	case slices.IsSortedFunc(candidates, compareTryRanks):
		return candidates
	default:
		return partitionByTryRank(candidates)
	}
}

func compareWorkloads(a, b candidate) int { return Compare(a.w, b.w) }

func compareTryRanks(a, b candidate) int { return cmp.Compare(tryRank(a), tryRank(b)) }

// tryRanks is how many values tryRank takes.
const tryRanks = 2 * groups

// tryRank is what compareCandidates weighs before the rest of Compare's
// order: whether c is being evicted (first if so), then its group.
func tryRank(c candidate) int {
	if c.w.Evicting {
		return groupOf(c.variant)
	}
	return groups + groupOf(c.variant)
}

// partitionByTryRank is candidates stably partitioned by tryRank, in a
// new slice (a counting sort).
func partitionByTryRank(candidates []candidate) []candidate {
	var starts [tryRanks]int
	for _, c := range candidates {
		starts[tryRank(c)]++
	}
	next := 0
	for r, n := range starts {
		starts[r] = next
		next += n
	}
	out := make([]candidate, len(candidates))
	for _, c := range candidates {
		r := tryRank(c)
		out[starts[r]] = c
		starts[r]++
	}
	return out
}

// frsToFree are the flavor-resources pending asks more of than its queue
// can take now, sorted: a short slice, cheaper to walk than a map for
// every candidate.
func frsToFree(tree *quota.Tree, pending *Workload) []quota.FR {
	var needed []quota.FR
	for fr, amount := range pending.Usage {
		if amount > tree.Available(pending.ClusterQueue, fr) {
			needed = append(needed, fr)
		}
	}
	slices.SortFunc(needed, quota.CompareFR)
	return needed
}

// candidatesFor are the admitted workloads policy lets pending preempt and
// whose removal could help: they hold some of an FR it needs freed, in its
// own queue or where reclaimable finds them.
func candidatesFor(tree *quota.Tree, pending *Workload, policy Policy, admitted []*Workload, needed []quota.FR) []candidate {
	reach := reachable(tree, pending, admitted, needed)
	out := reach[:0] // filtered in place: there may be thousands
	for _, c := range reach {
		if c, ok := underPolicy(policy, pending, c); ok {
			out = append(out, c)
		}
	}
	return out
}

// reachable are the workloads holding some of an FR of needed that
// preemption could ever take for pending, whatever its queue's policy:
// those of its own queue, and those of the queues reclaimable finds. Each
// comes with the most lenient variant it could have.
func reachable(tree *quota.Tree, pending *Workload, admitted []*Workload, needed []quota.FR) []candidate {
	found := reclaimable(tree, pending, needed)
	var out []candidate
	for _, w := range admitted {
		if !holdsAny(w, needed) {
			continue
		}
		if w.ClusterQueue == pending.ClusterQueue {
			out = append(out, candidate{w: w, variant: sameQueue})
			continue
		}
		if at, ok := found[w.ClusterQueue]; ok {
			v := reclaimWhileBorrowing
			if at.advantage {
				v = reclaim
			}
			out = append(out, candidate{w: w, variant: v, lca: at.lca})
		}
	}
	return out
}

// underPolicy is c as policy lets pending preempt it, if it does: the
// queue's own workloads by withinClusterQueue, the others' by
// reclaimWithinCohort and, when found without advantage, borrowWithinCohort.
func underPolicy(policy Policy, pending *Workload, c candidate) (candidate, bool) {
	if c.variant == sameQueue {
		return c, mayPreemptInQueue(policy.WithinClusterQueue, pending, c.w)
	}
	if !mayReclaim(policy.ReclaimWithinCohort, pending, c.w) {
		return c, false
	}
	if c.variant != reclaim {
		c.variant = cohortVariant(policy.BorrowWithinCohort, pending, c.w)
	}
	return c, true
}

// place is where reclaimable found a ClusterQueue.
type place struct {
	// lca is the ancestor of pending's queue whose subtree was searched.
	lca string
	// advantage: pending's queue has the better claim to the quota the
	// queue found there holds.
	advantage bool
}

// reclaimable finds the other ClusterQueues whose workloads pending may
// reclaim quota from, and where. It walks pending's ancestors from its
// queue's cohort to the root; at each it searches the ancestor's subtree
// but for the child it came from (searched already), entering a sub-cohort
// only if it uses more than its subtree quota of some FR of needed and
// keeping a ClusterQueue only if it holds more than its nominal quota of
// one: quota a subtree holds within its own is never reclaimed from
// outside it.
//
// The advantage starts as "pending fits within its queue's nominal
// quota". Otherwise it is gained above the first ancestor whose subtree
// would hold what is left of the request: remaining starts as the request
// less what pending's queue keeps free for itself by its lendingLimit
// (quota.Tree.LocalFree), and each ancestor passed takes off what it keeps
// free the same way (CohortLocalFree), as usage fills local quota before
// it reaches the pool above. An ancestor holds the remaining request when,
// on every FR of the request, its pool's usage plus remaining is at most
// its subtree quota. The queues found in that ancestor's own subtree have
// as good a claim to it as pending's, so the advantage counts only for
// those found higher up, whose usage in the ancestor's quota is borrowed.
func reclaimable(tree *quota.Tree, pending *Workload, needed []quota.FR) map[string]place {
	found := map[string]place{}
	advantage := fitsNominal(tree, pending)
	remaining := lessLocalFree(pending.Usage, func(fr quota.FR) int64 { return tree.LocalFree(pending.ClusterQueue, fr) })
	searched := ""
	for ancestor := tree.ClusterQueueCohort(pending.ClusterQueue); ancestor != ""; ancestor = tree.CohortParent(ancestor) {
		s := subtreeSearch{tree: tree, needed: needed, self: pending.ClusterQueue, skip: searched,
			at: place{lca: ancestor, advantage: advantage}, found: found}
		s.visit(ancestor)
		advantage = advantage || holds(tree, ancestor, remaining)
		remaining = lessLocalFree(remaining, func(fr quota.FR) int64 { return tree.CohortLocalFree(ancestor, fr) })
		searched = ancestor
	}
	return found
}

// subtreeSearch is one ancestor's search in reclaimable.
type subtreeSearch struct {
	tree   *quota.Tree
	needed []quota.FR
	// self is pending's queue; skip the child Cohort searched already.
	self, skip string
	at         place
	found      map[string]place
}

func (s *subtreeSearch) visit(cohort string) {
	cohorts, queues := s.tree.CohortChildren(cohort)
	for _, c := range cohorts {
		if c != s.skip && cohortOverAny(s.tree, c, s.needed) {
			s.visit(c)
		}
	}
	for _, q := range queues {
		if q != s.self && borrowsAny(s.tree, q, s.needed) {
			s.found[q] = s.at
		}
	}
}

// lessLocalFree is amounts less free(fr) on each FR, not below 0.
func lessLocalFree(amounts map[quota.FR]int64, free func(quota.FR) int64) map[quota.FR]int64 {
	out := make(map[quota.FR]int64, len(amounts))
	for fr, v := range amounts {
		out[fr] = max(0, v-free(fr))
	}
	return out
}

// holds reports whether the Cohort cohort's pool has room for amounts on
// top of its usage, on every FR.
func holds(tree *quota.Tree, cohort string, amounts map[quota.FR]int64) bool {
	for fr, v := range amounts {
		if v > tree.CohortSubtreeQuota(cohort, fr)-tree.CohortUsage(cohort, fr) {
			return false
		}
	}
	return true
}

// cohortVariant classifies a candidate of another queue of the cohort
// found without advantage.
func cohortVariant(b BorrowWithinCohort, pending, w *Workload) variant {
	if borrowBlocker(b, pending, w) != "" {
		return reclaimWithoutBorrowing
	}
	return reclaimWhileBorrowing
}

// borrowBlocker says why borrowWithinCohort b does not let pending preempt
// w while pending borrows, or "" when it does.
func borrowBlocker(b BorrowWithinCohort, pending, w *Workload) string {
	switch {
	case !b.LowerPriority && w.Priority >= pending.Priority:
		// Naming only the policy would send the reader to a setting that
		// would not help either.
		return "have equal or higher priority, and the workload would borrow in their place (borrowWithinCohort Never; LowerPriority would not allow it either)"
	case !b.LowerPriority:
		return "the workload would borrow in their place and borrowWithinCohort is Never"
	case w.Priority >= pending.Priority:
		return "have equal or higher priority, and the workload would borrow in their place (borrowWithinCohort LowerPriority)"
	case b.MaxPriorityThreshold != nil && w.Priority > *b.MaxPriorityThreshold:
		return fmt.Sprintf("have priority above borrowWithinCohort's maxPriorityThreshold %d", *b.MaxPriorityThreshold)
	default:
		return ""
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

// compareCandidates orders the candidates to try: Compare's order, but
// for the group (groupOf), weighed right after whether they are being
// evicted.
func compareCandidates(a, b candidate) int {
	if c := compareTryRanks(a, b); c != 0 {
		return c
	}
	return compareWithinEviction(a.w, b.w)
}

// groups is how many values groupOf takes.
const groups = 3

// groupOf ranks a candidate's variant: workloads of other queues holding
// quota pending's queue has the better claim to first, then the other
// queues' other workloads (they hold what is not theirs), then those of
// pending's own queue.
func groupOf(v variant) int {
	switch v {
	case reclaim:
		return 0
	case sameQueue:
		return 2
	default:
		return 1
	}
}

// passes are the borrowing modes to try, in order: whether the pending
// workload may end up borrowing. A queue with no candidates elsewhere, or
// that may not borrow to preempt and is not below its nominal quota, tries
// borrowing only; one that may not borrow to preempt and has no candidate
// it may always take first tries to fit within its nominal quota; the
// others try borrowing first.
func passes(tree *quota.Tree, pending *Workload, policy Policy, candidates []candidate, needed []quota.FR) []bool {
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
func choose(tree *quota.Tree, pending *Workload, candidates []candidate, needed []quota.FR, allowBorrowing bool) []Target {
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

// valid reports whether candidate c may still be taken: one that may not
// be taken while the pending workload borrows only in a pass that does
// not borrow, and one of another queue only while it still holds quota
// that is not its own (stillOver).
func valid(tree *quota.Tree, c candidate, needed []quota.FR, allowBorrowing bool) bool {
	switch c.variant {
	case sameQueue:
		return true
	case reclaimWithoutBorrowing:
		if allowBorrowing {
			return false
		}
	}
	return stillOver(tree, c, needed)
}

// stillOver reports whether the queue of c, a candidate of another queue,
// and every Cohort between it and c.lca still hold more than their quota
// of some FR of needed. Earlier victims may have brought one of them back
// within it: what it holds then is its own, and its subtree's to share.
func stillOver(tree *quota.Tree, c candidate, needed []quota.FR) bool {
	if !borrowsAny(tree, c.w.ClusterQueue, needed) {
		return false
	}
	for cohort := tree.ClusterQueueCohort(c.w.ClusterQueue); cohort != "" && cohort != c.lca; cohort = tree.CohortParent(cohort) {
		if !cohortOverAny(tree, cohort, needed) {
			return false
		}
	}
	return true
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
func belowNominal(tree *quota.Tree, cq string, frs []quota.FR) bool {
	for _, fr := range frs {
		if tree.Usage(cq, fr) >= tree.Nominal(cq, fr) {
			return false
		}
	}
	return true
}

// borrowsAny reports whether cq holds more than its nominal quota of some
// FR in frs.
func borrowsAny(tree *quota.Tree, cq string, frs []quota.FR) bool {
	for _, fr := range frs {
		if tree.Borrowed(cq, fr) > 0 {
			return true
		}
	}
	return false
}

// cohortOverAny reports whether the Cohort cohort's subtree uses more
// than its subtree quota of some FR in frs: it holds quota of its parent's
// pool beyond what it puts in.
func cohortOverAny(tree *quota.Tree, cohort string, frs []quota.FR) bool {
	for _, fr := range frs {
		if tree.CohortUsage(cohort, fr) > tree.CohortSubtreeQuota(cohort, fr) {
			return true
		}
	}
	return false
}

// holdsAny reports whether w holds some of an FR in frs.
func holdsAny(w *Workload, frs []quota.FR) bool {
	for _, fr := range frs {
		if w.Usage[fr] > 0 {
			return true
		}
	}
	return false
}
