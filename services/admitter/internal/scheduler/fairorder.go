package scheduler

import (
	"slices"

	"github.com/sluice-dev/sluice/services/admitter/internal/queue"
	"github.com/sluice-dev/sluice/services/admitter/internal/quota"
)

// fairOrder is the order in which, with fair sharing on, a round of a
// cycle reserves the heads of each cohort tree: by share rather than in
// compareCandidates order, so that the queues of a tree get its quota in
// proportion to their weights.
//
// The heads of a tree meet in a contest, picked one at a time. Each pick
// is a tournament from the tree's root: at every Cohort, the winners of
// its child Cohorts and the heads of its child ClusterQueues meet, each
// standing for its node just below the Cohort (the child on its path)
// with the head's usage added. The one whose node
//
//  1. does not borrow on the FRs the head requests wins over one that
//     does: a queue within its own quota is served before any borrower;
//  2. has the lower share (quota.CompareShares) wins;
//
// and then the head of higher priority, queued earlier, by name
// (queue.Compare). Comparing the child nodes rather than the queues is
// what lets a sub-cohort's weight count: its queues share, among
// themselves, what it gets beside its siblings.
//
// The winner is reserved, unless an earlier pick of the round took what
// it needed: then, as without fair sharing, it waits for the next round.
// A reserved winner's queue offers its next head at once, and that head
// joins the contest: a queue keeps winning while its share stays the
// lowest, so what a tree has left is split by the weights within one
// cycle. (Were each queue to offer one head per round, as without fair
// sharing, every round would admit one workload per queue whatever its
// weight, and the shares would decide only the last workloads that fit.)
// The contest ends when no head is left in it: reserved with nothing
// more to offer, waiting for the next round, or not fitting.
//
// Trees share no quota, so the order between them changes no outcome
// (but for MaxTriesPerCycle, which an earlier tree's contest may use up):
// a tree's contest runs where its first head comes in compareCandidates
// order, and the heads of queues without cohort keep their places.
//
// Cost: a pick runs the tournament over the tree's k contenders and the
// Cohorts above them, comparing the shares each contender keeps: nothing
// is computed or allocated per comparison. A reservation changes the
// shares on the winner's path alone, so only the contenders below the
// same child Cohort of the root compute theirs again, one share per level
// of their path. A round of p picks costs O(p·k) comparisons and at most
// O(p·k·depth) share computations (O(k²·depth) when each queue's head is
// picked once); in a cohort without sub-cohorts, O(p·depth).
type fairOrder struct {
	tree *quota.Tree
	// contests are the trees' contests, by root Cohort.
	contests map[string]*contest
}

// contest is what is left to pick from in one tree: its members, in the
// brackets of the Cohorts above them.
type contest struct {
	tree *quota.Tree
	root *bracket
	// brackets are by Cohort name, the root's included.
	brackets map[string]*bracket
	members  []*contender
}

// bracket is a Cohort of a tournament, at depth (the root's is 0).
type bracket struct {
	depth   int
	cohorts []*bracket
	// heads are those of its child ClusterQueues.
	heads []*contender
}

// contender is a head in a contest, with what its queue's path would
// look like with its usage added.
type contender struct {
	candidate
	// path is its queue's, then each Cohort's above it up to the child of
	// the root.
	path []quota.PathShare
	// stale: a reservation changed a node on path since it was computed.
	stale bool
}

// newFairOrder puts the heads of a round that are in a cohort tree in
// their trees' contests.
func newFairOrder(tree *quota.Tree, heads []candidate) *fairOrder {
	fo := &fairOrder{tree: tree, contests: map[string]*contest{}}
	for _, c := range heads {
		if root := tree.Root(c.cq.name); root != "" {
			fo.push(root, c)
		}
	}
	return fo
}

// push adds c, a head in the tree rooted at root, to that tree's contest.
func (fo *fairOrder) push(root string, c candidate) {
	ct := fo.contests[root]
	if ct == nil {
		b := &bracket{}
		ct = &contest{tree: fo.tree, root: b, brackets: map[string]*bracket{root: b}}
		fo.contests[root] = ct
	}
	ct.add(c)
}

// pop takes the next head of the tree rooted at root out of its contest:
// the tournament's winner. It is false when none is left.
func (fo *fairOrder) pop(root string) (candidate, bool) {
	ct := fo.contests[root]
	if ct == nil {
		return candidate{}, false
	}
	ct.refresh()
	w, in := ct.root.winner()
	if w == nil {
		delete(fo.contests, root)
		return candidate{}, false
	}
	ct.remove(w, in)
	return w.candidate, true
}

func (ct *contest) add(c candidate) {
	m := &contender{candidate: c}
	m.path = ct.tree.PathShares(c.cq.name, m.usageAmounts(), nil)
	if len(m.path) == 0 {
		// Below a loop of Cohorts, where nothing fits, so never a head;
		// should one come, it stands at the root, share 0.
		m.path = []quota.PathShare{{Node: c.cq.name}}
	}
	b := ct.root
	for i := len(m.path) - 1; i > 0; i-- {
		b = ct.bracketOf(b, m.path[i].Node)
	}
	b.heads = append(b.heads, m)
	ct.members = append(ct.members, m)
}

// bracketOf is the bracket of the Cohort cohort, a child of parent's.
func (ct *contest) bracketOf(parent *bracket, cohort string) *bracket {
	b := ct.brackets[cohort]
	if b == nil {
		b = &bracket{depth: parent.depth + 1}
		ct.brackets[cohort] = b
		parent.cohorts = append(parent.cohorts, b)
	}
	return b
}

// remove takes w, a member held by the bracket in, out of the contest and
// marks stale the members whose shares w's reservation changes: those
// below the same child Cohort of the root. (Should w not be reserved
// after all, they are computed again for nothing.)
func (ct *contest) remove(w *contender, in *bracket) {
	i := slices.Index(in.heads, w)
	in.heads = slices.Delete(in.heads, i, i+1)
	i = slices.Index(ct.members, w)
	ct.members = slices.Delete(ct.members, i, i+1)
	if len(w.path) == 1 {
		return // its queue is a child of the root: no other path has it
	}
	top := w.path[len(w.path)-1].Node
	for _, m := range ct.members {
		if len(m.path) > 1 && m.path[len(m.path)-1].Node == top {
			m.stale = true
		}
	}
}

// refresh computes the stale members' shares again.
func (ct *contest) refresh() {
	for _, m := range ct.members {
		if m.stale {
			m.path = ct.tree.PathShares(m.cq.name, m.usageAmounts(), m.path[:0])
			m.stale = false
		}
	}
}

// winner is the tournament's winner among the members below b, and the
// bracket that holds it; nil when none is left.
func (b *bracket) winner() (best *contender, in *bracket) {
	for _, sub := range b.cohorts {
		if w, wIn := sub.winner(); w != nil && (best == nil || w.beats(best, b.depth)) {
			best, in = w, wIn
		}
	}
	for _, h := range b.heads {
		if best == nil || h.beats(best, b.depth) {
			best, in = h, b
		}
	}
	return best, in
}

// beats reports whether m wins over o at a Cohort at depth, where each
// stands for its node just below the Cohort (see fairOrder).
func (m *contender) beats(o *contender, depth int) bool {
	a, b := m.below(depth), o.below(depth)
	if a.Borrows != b.Borrows {
		return !a.Borrows
	}
	if c := quota.CompareShares(a.Share, b.Share); c != 0 {
		return c < 0
	}
	return queue.Compare(m.e.wl, o.e.wl) < 0
}

// below is the node of m's path just below the Cohort at depth.
func (m *contender) below(depth int) *quota.PathShare {
	return &m.path[len(m.path)-1-depth]
}

// reserveFairly reserves the heads of the tree rooted at root in fair
// order (see fairOrder) and returns next with the ClusterQueues to try
// again in the next round added: those whose pick no longer fit, whose
// next head did not fit, or whose next head the cycle has no tries left
// for. taken is as admit has it.
func (s *Scheduler) reserveFairly(plan *Plan, fo *fairOrder, root string, taken map[string]bool, next []*clusterQueue) []*clusterQueue {
	for c, ok := fo.pop(root); ok; c, ok = fo.pop(root) {
		if !s.admit(plan, c, taken) || plan.Tried >= MaxTriesPerCycle {
			next = append(next, c.cq)
			continue
		}
		switch head, fits, again := s.offer(plan, c.cq); {
		case fits:
			fo.push(root, head)
		case again:
			next = append(next, c.cq)
		}
	}
	return next
}
