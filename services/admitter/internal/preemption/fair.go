package preemption

import (
	"fmt"
	"slices"

	"github.com/sluice-dev/sluice/services/admitter/internal/quota"
)

// FairTargets is Targets under fair sharing: victims are chosen by the
// weighted shares of the ClusterQueues and Cohorts of pending's tree
// (quota.Share) rather than by whose quota it is. strategies are the rules
// tried in turn (ParseStrategies).
//
// The candidates are the workloads of pending's own queue that
// withinClusterQueue lets it preempt, and those of every other queue of
// the tree that uses more than its nominal quota of something pending
// lacks, if reclaimWithinCohort lets it preempt them; borrowWithinCohort
// plays no part. They are taken one at a time, each from a target queue
// found from the root down: at each Cohort, the eligible child queue of
// the highest share is compared with the child Cohort of the highest
// share among those that borrow or lead to pending's queue, and the
// search descends into the Cohort when its share is at least the queue's.
//
// A candidate of pending's own queue is taken at once, and so is one of
// another queue while pending's queue, with pending, stays within its
// nominal quota of what it lacks (InCohortReclamation). Otherwise the
// shares of the two sides of the lowest Cohort the two queues share are
// compared, pending's side with pending admitted: the first strategy
// decides; a queue it refuses is left for the second strategy, which then
// tries each such queue once. Once pending fits, every victim but the
// last it fits without is put back, last but one first, as in Targets.
func FairTargets(tree *quota.Tree, pending *Workload, policy Policy, strategies []Strategy, admitted []*Workload) []Target {
	needed := frsToFree(tree, pending)
	if len(needed) == 0 || tree.Cycle(pending.ClusterQueue) != nil {
		return nil
	}
	queues := fairCandidates(tree, pending, needed, admitted, policy.allowsUnderFairSharing)
	return newFairSearch(tree, pending, needed, strategies, queues).run()
}

// FairBlocked is Blocked under fair sharing: why FairTargets, given the
// same arguments, finds no victims, when a rule is the reason: the share
// test, when the victims policy allows would make room without it; else
// the rules of policy that protect the victims that would.
func FairBlocked(tree *quota.Tree, pending *Workload, policy Policy, strategies []Strategy, admitted []*Workload) string {
	needed := frsToFree(tree, pending)
	if len(needed) == 0 || tree.Cycle(pending.ClusterQueue) != nil {
		return ""
	}
	allowed := fairCandidates(tree, pending, needed, admitted, policy.allowsUnderFairSharing)
	if newFairSearch(tree, pending, needed, strategies, allowed).run() != nil {
		return ""
	}
	if newFairSearch(tree, pending, needed, nil, allowed).run() != nil {
		return fmt.Sprintf("no ClusterQueue holding what it lacks has a weighted share high enough to give it up under fair sharing (preemption strategies %s)",
			joinStrategies(strategies))
	}
	every := fairCandidates(tree, pending, needed, admitted, func(*Workload, *Workload) bool { return true })
	if targets := newFairSearch(tree, pending, needed, strategies, every).run(); targets != nil {
		return heldBack(policy, pending, targets, false)
	}
	n := 0
	for _, q := range allowed {
		n += len(q.list)
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("it would still not fit with every candidate gone (%d workload(s) it may preempt)", n)
}

// allowsUnderFairSharing reports whether policy lets pending preempt w
// under fair sharing: withinClusterQueue in its own queue,
// reclaimWithinCohort in the others.
func (p Policy) allowsUnderFairSharing(pending, w *Workload) bool {
	if w.ClusterQueue == pending.ClusterQueue {
		return mayPreemptInQueue(p.WithinClusterQueue, pending, w)
	}
	return mayReclaim(p.ReclaimWithinCohort, pending, w)
}

// queueCandidates are the candidates of one ClusterQueue, in Compare
// order, and how far the search has taken them.
type queueCandidates struct {
	name string
	// own: pending's queue.
	own  bool
	list []*Workload
	// next is the first candidate not taken.
	next int
	// deferred: the first strategy refused this queue; tried once
	// (tried) by the second.
	deferred, tried bool
}

func (q *queueCandidates) left() bool { return q.next < len(q.list) }

// fairCandidates are the workloads, by ClusterQueue, that hold some of
// needed and that allow lets pending preempt: in pending's queue, and in
// the other queues of its tree that use more than their nominal quota of
// an FR of needed.
func fairCandidates(tree *quota.Tree, pending *Workload, needed []quota.FR, admitted []*Workload, allow func(pending, w *Workload) bool) map[string]*queueCandidates {
	root := tree.Root(pending.ClusterQueue)
	over := map[string]bool{} // by queue, asked once
	out := map[string]*queueCandidates{}
	for _, w := range admitted {
		own := w.ClusterQueue == pending.ClusterQueue
		if !own {
			b, ok := over[w.ClusterQueue]
			if !ok {
				b = root != "" && tree.Root(w.ClusterQueue) == root && borrowsAny(tree, w.ClusterQueue, needed)
				over[w.ClusterQueue] = b
			}
			if !b {
				continue
			}
		}
		if !holdsAny(w, needed) || !allow(pending, w) {
			continue
		}
		q := out[w.ClusterQueue]
		if q == nil {
			q = &queueCandidates{name: w.ClusterQueue, own: own}
			out[w.ClusterQueue] = q
		}
		q.list = append(q.list, w)
	}
	for _, q := range out {
		if !slices.IsSortedFunc(q.list, Compare) {
			slices.SortFunc(q.list, Compare)
		}
	}
	return out
}

// fairSearch is one run of FairTargets' choice.
type fairSearch struct {
	tree    *quota.Tree
	pending *Workload
	needed  []quota.FR
	// strategies nil takes candidates without comparing shares: whether
	// any victims would do, for FairBlocked.
	strategies []Strategy
	queues     map[string]*queueCandidates
	// path is pending's Cohorts from its queue's up to the root, each
	// with its place in shares.
	path []string
	// onPath gives a Cohort's index in shares.
	onPath map[string]int
	// shares are pending's queue's and its Cohorts' (the root left out)
	// with pending admitted, as quota.Tree.PathShares gives them:
	// shares[0] is the queue's, shares[i] that of path[i-1].
	shares  []quota.PathShare
	targets []Target
}

func newFairSearch(tree *quota.Tree, pending *Workload, needed []quota.FR, strategies []Strategy, queues map[string]*queueCandidates) *fairSearch {
	f := &fairSearch{tree: tree, pending: pending, needed: needed, strategies: strategies, queues: queues, onPath: map[string]int{}}
	for _, q := range queues { // a search starts afresh on candidates another searched
		q.next, q.deferred, q.tried = 0, false, false
	}
	for c := tree.ClusterQueueCohort(pending.ClusterQueue); c != ""; c = tree.CohortParent(c) {
		f.path = append(f.path, c)
		f.onPath[c] = len(f.path)
	}
	f.refreshShares()
	return f
}

// run chooses the victims, or returns nil when pending would not fit. The
// tree is left as it was.
func (f *fairSearch) run() []Target {
	defer func() {
		for _, t := range f.targets {
			f.tree.AddUsage(t.Workload.ClusterQueue, t.Workload.Usage)
		}
	}()
	fits := f.firstStrategy()
	if !fits && len(f.strategies) == 2 {
		fits = f.secondStrategy()
	}
	if !fits {
		return nil
	}
	f.putBackUnneeded()
	return slices.Clone(f.targets)
}

// firstStrategy takes candidates until pending fits, by the first
// strategy where shares decide; it reports whether pending fits.
func (f *fairSearch) firstStrategy() bool {
	eligible := func(q *queueCandidates) bool {
		return q.left() && !q.deferred && (q.own || borrowsAny(f.tree, q.name, f.needed))
	}
	for {
		q := f.nextTarget(eligible)
		if q == nil {
			return false
		}
		switch {
		case q.own:
			f.take(q, InClusterQueue)
		case f.withinNominal():
			f.take(q, InCohortReclamation)
		case f.strategies == nil:
			f.take(q, InCohortFairSharing)
		default:
			w := q.list[q.next]
			preemptorNew, targetOld := f.sides(q.name)
			f.tree.RemoveUsage(w.ClusterQueue, w.Usage)
			_, targetNew := f.sides(q.name)
			f.tree.AddUsage(w.ClusterQueue, w.Usage)
			if !f.strategies[0].allows(preemptorNew, targetOld, targetNew) {
				q.deferred = true
				continue
			}
			f.take(q, InCohortFairSharing)
		}
		if f.tree.Fits(f.pending.ClusterQueue, f.pending.Usage) {
			return true
		}
	}
}

// secondStrategy tries, once each, the queues the first strategy refused,
// by the second; it reports whether pending fits.
func (f *fairSearch) secondStrategy() bool {
	eligible := func(q *queueCandidates) bool {
		return q.deferred && !q.tried && q.left() && borrowsAny(f.tree, q.name, f.needed)
	}
	for {
		q := f.nextTarget(eligible)
		if q == nil {
			return false
		}
		q.tried = true
		preemptorNew, targetOld := f.sides(q.name)
		if !f.strategies[1].allows(preemptorNew, targetOld, targetOld) {
			continue
		}
		f.take(q, InCohortFairSharing)
		if f.tree.Fits(f.pending.ClusterQueue, f.pending.Usage) {
			return true
		}
	}
}

// take makes q's next candidate a victim.
func (f *fairSearch) take(q *queueCandidates, reason Reason) {
	w := q.list[q.next]
	q.next++
	f.tree.RemoveUsage(w.ClusterQueue, w.Usage)
	f.targets = append(f.targets, Target{Workload: w, Reason: reason})
	f.refreshShares()
}

// putBackUnneeded puts back every victim but the last that pending fits
// without, last but one first.
func (f *fairSearch) putBackUnneeded() {
	for i := len(f.targets) - 2; i >= 0; i-- {
		w := f.targets[i].Workload
		f.tree.AddUsage(w.ClusterQueue, w.Usage)
		if f.tree.Fits(f.pending.ClusterQueue, f.pending.Usage) {
			f.targets = slices.Delete(f.targets, i, i+1)
			continue
		}
		f.tree.RemoveUsage(w.ClusterQueue, w.Usage)
	}
}

func (f *fairSearch) refreshShares() {
	f.shares = f.tree.PathShares(f.pending.ClusterQueue, f.pending.Usage, f.shares[:0])
}

// withinNominal reports whether pending's queue, with pending, stays
// within its nominal quota of every FR pending lacks.
func (f *fairSearch) withinNominal() bool {
	for _, fr := range f.needed {
		if f.tree.Usage(f.pending.ClusterQueue, fr)+f.pending.Usage[fr] > f.tree.Nominal(f.pending.ClusterQueue, fr) {
			return false
		}
	}
	return true
}

// nextTarget is the queue to take the next candidate from, among those
// eligible, found from the root down; nil when none is.
func (f *fairSearch) nextTarget(eligible func(*queueCandidates) bool) *queueCandidates {
	if len(f.path) == 0 {
		if own := f.queues[f.pending.ClusterQueue]; own != nil && eligible(own) {
			return own
		}
		return nil
	}
	cohort := f.path[len(f.path)-1]
	for {
		cohorts, queues := f.tree.CohortChildren(cohort)
		var best *queueCandidates
		var bestShare quota.Share
		for _, name := range queues {
			q := f.queues[name]
			if q == nil || !eligible(q) {
				continue
			}
			if share := f.queueShare(name); best == nil || f.ranksAbove(q, share, best, bestShare) {
				best, bestShare = q, share
			}
		}
		bestCohort, cohortShare := "", quota.Share{}
		for _, c := range cohorts {
			if !f.mayDescend(c, eligible) {
				continue
			}
			if share := f.cohortShare(c); bestCohort == "" || quota.CompareShares(share, cohortShare) > 0 {
				bestCohort, cohortShare = c, share
			}
		}
		if bestCohort == "" || best != nil && quota.CompareShares(cohortShare, bestShare) < 0 {
			return best
		}
		cohort = bestCohort
	}
}

// mayDescend reports whether the search may look for a target below the
// Cohort c: it borrows some of what pending lacks, or leads to pending's
// queue, and some queue below it is eligible. What a Cohort borrows within
// itself is its own business.
func (f *fairSearch) mayDescend(c string, eligible func(*queueCandidates) bool) bool {
	if _, on := f.onPath[c]; !on && !cohortOverAny(f.tree, c, f.needed) {
		return false
	}
	cohorts, queues := f.tree.CohortChildren(c)
	for _, name := range queues {
		if q := f.queues[name]; q != nil && eligible(q) {
			return true
		}
	}
	for _, sub := range cohorts {
		if f.mayDescend(sub, eligible) {
			return true
		}
	}
	return false
}

// ranksAbove reports whether queue a, of share sa, is a better target
// than b, of share sb: the higher share, then the next candidate that
// Compare puts first, then the name.
func (f *fairSearch) ranksAbove(a *queueCandidates, sa quota.Share, b *queueCandidates, sb quota.Share) bool {
	if c := quota.CompareShares(sa, sb); c != 0 {
		return c > 0
	}
	if c := Compare(a.list[a.next], b.list[b.next]); c != 0 {
		return c < 0
	}
	return a.name < b.name
}

// queueShare is the share of the ClusterQueue cq, with pending admitted
// if it is pending's.
func (f *fairSearch) queueShare(cq string) quota.Share {
	if cq == f.pending.ClusterQueue {
		return f.shares[0].Share
	}
	return f.tree.ClusterQueueShare(cq, nil)
}

// cohortShare is the share of the Cohort c, with pending admitted if it
// leads to pending's queue.
func (f *fairSearch) cohortShare(c string) quota.Share {
	if i, on := f.onPath[c]; on && i < len(f.shares) {
		return f.shares[i].Share
	}
	return f.tree.CohortShare(c)
}

// sides are the shares compared when a workload of the ClusterQueue
// target is weighed as a victim: of the children of the lowest Cohort
// target shares with pending's queue, pending's side with pending
// admitted and target's side as the tree stands.
func (f *fairSearch) sides(target string) (preemptor, victim quota.Share) {
	victim = f.tree.ClusterQueueShare(target, nil)
	below := "" // the Cohort on target's side just below the one at hand
	for c := f.tree.ClusterQueueCohort(target); c != ""; c = f.tree.CohortParent(c) {
		if i, on := f.onPath[c]; on {
			if below != "" {
				victim = f.tree.CohortShare(below)
			}
			return f.shares[i-1].Share, victim
		}
		below = c
	}
	return f.shares[0].Share, victim // not in pending's tree: fairCandidates leaves none such
}
