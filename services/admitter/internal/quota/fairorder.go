package quota

// PathShare is where one node on the path from a ClusterQueue up to its
// root Cohort stands for fair sharing once a pending workload's usage is
// added to what the ClusterQueue holds: what the admission order under
// fair sharing compares at the node's parent.
type PathShare struct {
	// Node is the name of the ClusterQueue or Cohort.
	Node string
	// Share is the node's share with the workload's usage added.
	Share Share
	// Borrows reports whether, with the workload's usage added, the node
	// uses more than its subtree quota of one of the FRs the workload
	// requests. Share.Borrowing counts every FR; a node that borrows only
	// what the workload does not ask for still has quota of its own for
	// the workload.
	Borrows bool
}

// PathShares appends to dst the PathShare of the ClusterQueue cq and then
// of each Cohort above it, the root left out (a root has no parent to
// borrow from, so its share is always 0), with extra (a pending workload's
// usage) added to what cq holds. The usage reaches each Cohort as AddUsage
// would carry it: what a node's lendingLimit keeps local stays below it.
// The tree is not changed. dst comes back unchanged for an unknown queue,
// one without cohort, and one below a loop of Cohorts.
//
// It costs one share computation per level of the path.
func (t *Tree) PathShares(cq string, extra map[FR]int64, dst []PathShare) []PathShare {
	n := t.clusterQueues[cq]
	if n == nil || n.parent == nil || n.cycle != nil {
		return dst
	}
	// delta is what the workload adds to the usage of the node at hand.
	delta := make(map[FR]int64, len(extra))
	for fr, v := range extra {
		if v > 0 {
			delta[fr] = v
		}
	}
	for ; n.parent != nil; n = n.parent {
		dst = append(dst, PathShare{Node: n.name, Share: n.share(delta), Borrows: n.borrowsWith(delta, extra)})
		n.carryUp(delta)
	}
	return dst
}

// borrowsWith reports whether n, holding delta more, would use more than
// its subtree quota of one of the FRs requested asks for.
func (n *node) borrowsWith(delta, requested map[FR]int64) bool {
	for fr, v := range requested {
		if v > 0 && satAdd(n.usage[fr], delta[fr]) > n.subtreeQuota[fr] {
			return true
		}
	}
	return false
}

// carryUp turns delta, what n would hold more, into what n's parent would
// hold more: only the part beyond n's local quota reaches the parent's
// pool (see addUsage).
func (n *node) carryUp(delta map[FR]int64) {
	for fr, d := range delta {
		after := max(0, satAdd(n.usage[fr], d)-n.localQuota(fr))
		delta[fr] = after - n.usageInParent(fr)
	}
}
