package scheduler

import (
	"maps"
	"slices"

	"github.com/sluice-dev/sluice/services/admitter/internal/queue"
	"github.com/sluice-dev/sluice/services/admitter/internal/quota"
)

// A workload that preempted waits for its victims to stop, and counts on
// the quota that is free now as well as theirs. Were that free quota open
// to the other workloads in the meantime, one that takes it (a small,
// low-priority one behind a large preemptor, typically) would be the
// preemptor's next victim once the first ones stopped: a pod started only
// to be deleted. Kueue avoids it by trying one head per queue and cycle,
// the preemptor staying first; sluice, which tries every head of a queue
// in a cycle, holds that free quota for the preemptor instead, for the
// length of each cycle: every other workload's fit, and the stop of a
// pass over parked workloads, see it taken. Preemption does not: the
// choice of victims sees the quota as it is.

// quotaHold is free quota counted as used by the preemptor it is held
// for, in that preemptor's ClusterQueue, for one cycle. applied says
// whether the quota tree counts it now: holds are lifted and put back
// around some decisions, and one lifted twice would drive a usage below
// zero, where the tree stops counting, and be put back more than it was
// taken off.
type quotaHold struct {
	p       *entry
	cq      string
	amounts map[quota.FR]int64
	applied bool
}

// apply counts h in the quota tree, unless it is counted already.
func (s *Scheduler) apply(h *quotaHold) {
	if !h.applied {
		s.tree.AddUsage(h.cq, h.amounts)
		h.applied = true
	}
}

// lift takes h off the quota tree and reports whether it was counted.
func (s *Scheduler) lift(h *quotaHold) bool {
	if !h.applied {
		return false
	}
	s.tree.RemoveUsage(h.cq, h.amounts)
	h.applied = false
	return true
}

// holdForPreemptors holds, for every workload that waits in its queue for
// victims it claimed, the quota it awaits beyond what those victims hold.
// Call it at the start of a cycle, after the stale claims were dropped;
// releaseHolds undoes it at the end.
func (s *Scheduler) holdForPreemptors() {
	victims := map[*entry][]*entry{}
	for victim, by := range s.claims {
		p := s.workloads[by]
		if p == nil || p.cq == nil || p.awaits == nil || !inLine(p) {
			continue
		}
		victims[p] = append(victims[p], s.workloads[victim])
	}
	// The first in queue order are held for first: two preemptors may
	// count on the same free quota, and it is held for one of them.
	preemptors := slices.SortedFunc(maps.Keys(victims), func(a, b *entry) int { return queue.Compare(a.wl, b.wl) })
	for _, p := range preemptors {
		s.hold(p, victims[p])
	}
	// A hold that ended may leave quota free that the workloads parked
	// behind it were kept from: its preemptor was deleted or moved, its
	// claims lapsed, or it was admitted in another flavor than it awaited.
	// They are tried again.
	for p, cq := range s.lastHeld {
		delete(s.lastHeld, p)
		if _, ok := s.holds[p]; !ok {
			if q := s.clusterQueues[cq]; q != nil {
				s.quotaFreed(q)
			}
		}
	}
	for p, h := range s.holds {
		s.lastHeld[p] = h.cq
	}
}

// victimsOf are the workloads p claimed as victims.
func (s *Scheduler) victimsOf(p *entry) []*entry {
	var vs []*entry
	for victim, by := range s.claims {
		if by == p.key {
			vs = append(vs, s.workloads[victim])
		}
	}
	return vs
}

// inLine reports whether e waits in its ClusterQueue's line: queued,
// parked, or tried again in the current pass.
func inLine(e *entry) bool {
	return e.where == queued || e.where == parked || e.where == retrying
}

// hold counts, in p's ClusterQueue, the part of p's awaited usage that
// its victims vs do not hold: the quota free now that p counts on, as
// far as it is free and not held for another already.
func (s *Scheduler) hold(p *entry, vs []*entry) {
	s.unhold(p)
	free := make(map[quota.FR]int64, len(p.awaits))
	for fr, v := range p.awaits {
		free[fr] = v
	}
	for _, v := range vs {
		if v == nil {
			continue
		}
		for fr, amount := range v.amounts {
			if _, ok := free[fr]; ok {
				free[fr] -= amount
			}
		}
	}
	for fr, v := range free {
		if v = min(v, s.tree.Available(p.cq.name, fr)); v > 0 {
			free[fr] = v
		} else {
			delete(free, fr)
		}
	}
	if len(free) == 0 {
		return
	}
	h := &quotaHold{p: p, cq: p.cq.name, amounts: free}
	s.apply(h)
	s.holds[p] = h
}

// unhold gives the quota held for p back, before p itself is tried: it
// must see the quota as it is.
func (s *Scheduler) unhold(p *entry) {
	h, ok := s.holds[p]
	if !ok {
		return
	}
	delete(s.holds, p)
	s.lift(h)
}

// liftHolds takes every hold off the quota tree until the returned
// function puts back those it took off and that still stand.
func (s *Scheduler) liftHolds() (restore func()) {
	return s.liftWhere(func(*entry) bool { return true })
}

// liftHoldsBehind takes the holds of the preemptors that come after e in
// queue order off the quota tree, until the returned function puts them
// back: a hold keeps quota from the workloads behind its preemptor, not
// from those ahead of it.
func (s *Scheduler) liftHoldsBehind(e *entry) (restore func()) {
	return s.liftWhere(func(p *entry) bool { return queue.Compare(e.wl, p.wl) < 0 })
}

func (s *Scheduler) liftWhere(match func(p *entry) bool) (restore func()) {
	var lifted []*quotaHold
	for p, h := range s.holds {
		if match(p) && s.lift(h) {
			lifted = append(lifted, h)
		}
	}
	return func() {
		for _, h := range lifted {
			if s.holds[h.p] == h {
				s.apply(h)
			}
		}
	}
}

// releaseHolds gives every hold of the cycle back, remembering whom they
// were for (with those held at its start: see holdForPreemptors).
func (s *Scheduler) releaseHolds() {
	for p, h := range s.holds {
		s.lastHeld[p] = h.cq
		s.unhold(p)
	}
}
