package preemption

import (
	"fmt"
	"strings"

	"github.com/sluice-dev/sluice/services/admitter/internal/quota"
)

// Blocked says in plain words why preemption cannot make room for
// pending, for when Targets, given the same arguments, finds no victims:
//
//   - when victims would make room but policy protects some of them, it
//     names, per ClusterQueue and rule, how many would have to go and the
//     rule that keeps them ("1 workload(s) of ClusterQueue b hold the
//     quota but have priority above borrowWithinCohort's
//     maxPriorityThreshold 100"), joined by "; ";
//   - when even every workload preemption could reach, protected or not,
//     would not make room, though policy allows some, it says so ("it
//     would still not fit with every candidate gone (2 workload(s) it may
//     preempt)").
//
// It is "" when there is nothing to add to the quota shortfall: pending
// fits, Targets finds victims, its queue is below a loop of Cohorts, no
// workload that preemption could reach holds what it lacks, or no rule of
// policy explains the outcome. The text is a clause, meant to follow
// something like "preemption cannot help: ". tree is changed while
// victims are tried and left as it was.
//
// Which workloads preemption could reach does not depend on policy: the
// pending workload's own queue, and the queues Targets searches in the
// cohort tree (see the package comment). Policy only decides which of
// them may go. As for Targets, admitted is best given in Compare order.
func Blocked(tree *quota.Tree, pending *Workload, policy Policy, admitted []*Workload) string {
	needed := frsToFree(tree, pending)
	if len(needed) == 0 || tree.Cycle(pending.ClusterQueue) != nil {
		return ""
	}
	reach := reachable(tree, pending, admitted, needed)
	var allowed []candidate
	for _, c := range reach {
		if c, ok := underPolicy(policy, pending, c); ok {
			allowed = append(allowed, c)
		}
	}
	if targets, _ := search(tree, pending, policy, allowed, needed); targets != nil {
		return ""
	}
	// Every reachable workload, as the most lenient policy would take it
	// (passes reads only whether borrowWithinCohort is set).
	lenient := Policy{BorrowWithinCohort: BorrowWithinCohort{LowerPriority: true}}
	targets, borrowing := search(tree, pending, lenient, reach, needed)
	if targets == nil {
		if len(allowed) == 0 {
			return ""
		}
		return fmt.Sprintf("it would still not fit with every candidate gone (%d workload(s) it may preempt)", len(allowed))
	}
	return heldBack(policy, pending, targets, borrowing)
}

// heldBack says which of targets, chosen as the most lenient policy would
// (in a pass that let pending borrow, if borrowing), policy protects, and
// by which rule; "" when it protects none.
func heldBack(policy Policy, pending *Workload, targets []Target, borrowing bool) string {
	type group struct{ queue, why string }
	var order []group
	counts := map[group]int{}
	for _, t := range targets {
		why := protection(policy, pending, t, borrowing)
		if why == "" {
			continue
		}
		g := group{queue: t.Workload.ClusterQueue, why: why}
		if counts[g] == 0 {
			order = append(order, g)
		}
		counts[g]++
	}
	parts := make([]string, 0, len(order))
	for _, g := range order {
		of := "of ClusterQueue " + g.queue
		if g.queue == pending.ClusterQueue {
			of = "of the same ClusterQueue"
		}
		parts = append(parts, fmt.Sprintf("%d workload(s) %s hold the quota%s", counts[g], of, g.why))
	}
	return strings.Join(parts, "; ")
}

// protection is the rule of policy that keeps victim t from being
// preempted for pending, worded to follow "... hold the quota", or "". A
// victim of another queue found without advantage (the lenient choice
// gave it InCohortReclaimWhileBorrowing) falls under borrowWithinCohort
// when it was chosen for pending to borrow.
func protection(policy Policy, pending *Workload, t Target, borrowing bool) string {
	w := t.Workload
	if w.ClusterQueue == pending.ClusterQueue {
		if mayPreemptInQueue(policy.WithinClusterQueue, pending, w) {
			return ""
		}
		return withinRule(policy.WithinClusterQueue)
	}
	if !mayReclaim(policy.ReclaimWithinCohort, pending, w) {
		return reclaimRule(policy.ReclaimWithinCohort)
	}
	if borrowing && t.Reason == InCohortReclaimWhileBorrowing {
		if why := borrowBlocker(policy.BorrowWithinCohort, pending, w); why != "" {
			return " but " + why
		}
	}
	return ""
}

func withinRule(p WithinClusterQueue) string {
	switch p {
	case WithinLowerPriority:
		return " but have equal or higher priority (withinClusterQueue LowerPriority)"
	case WithinLowerOrNewerEqualPriority:
		return " but have higher priority, or equal priority and queued no later (withinClusterQueue LowerOrNewerEqualPriority)"
	default:
		return ", and withinClusterQueue is Never"
	}
}

func reclaimRule(p ReclaimWithinCohort) string {
	if p == ReclaimLowerPriority {
		return " but have equal or higher priority (reclaimWithinCohort LowerPriority)"
	}
	return ", and reclaimWithinCohort is Never"
}
