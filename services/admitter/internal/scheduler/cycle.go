package scheduler

import (
	"cmp"
	"errors"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/services/admitter/internal/queue"
	"github.com/sluice-dev/sluice/services/admitter/internal/quota"
	"github.com/sluice-dev/sluice/services/admitter/internal/shrink"
	"github.com/sluice-dev/sluice/services/admitter/internal/workload"
)

// MaxTriesPerCycle bounds the heads one cycle tries, so a queue woken with
// thousands of parked workloads does not hold up the writes of the
// reservations found; Plan.More asks for the next cycle at once.
const MaxTriesPerCycle = 2048

// MaxReservationsPerCycle bounds the reservations one cycle hands out.
// The admitter writes a cycle's plan before it runs the next, so this
// bounds that wait: a workload that comes meanwhile, whatever its
// priority, waits behind at most this many writes, however deep the
// queues. The heads that fit beyond it stay first in their queues for the
// next cycle, which Plan.More asks for.
const MaxReservationsPerCycle = 256

// Plan is what a cycle decided.
type Plan struct {
	// Reservations are the workloads to reserve quota for, in the order
	// they were admitted. The scheduler counts them as assumed until their
	// write comes back (Observe) or is lost (Unassume).
	Reservations []Reservation
	// Waiting are the workloads whose waiting message changed.
	Waiting []Waiting
	// Wake is when the earliest held workload may be queued again; zero
	// when none is held.
	Wake time.Time
	// Evictions are the workloads holding quota to evict: those of a
	// queue that drains (stopPolicy HoldAndDrain) and the victims of
	// preemption. Each version of a workload is handed out once.
	Evictions []Eviction
	// More says heads remain untried: run the next cycle at once.
	More bool
	// Tried counts the heads this cycle tried.
	Tried int
}

// Reservation is a workload the cycle reserves quota for.
type Reservation struct {
	Workload     *v1alpha1.Workload
	ClusterQueue *v1alpha1.ClusterQueue
	Assignment   quota.Assignment
	// Checks are the admission checks the ClusterQueue asks of it.
	Checks []string
	// Flavors are the ResourceFlavors by name when the cycle ran.
	Flavors map[string]*v1alpha1.ResourceFlavor
}

// Eviction is a workload to evict, and why.
type Eviction struct {
	Workload        *v1alpha1.Workload
	Reason, Message string
}

// Waiting is a workload that waits, and why.
type Waiting struct {
	Workload *v1alpha1.Workload
	Message  string
}

// candidate is a ClusterQueue's head that fits, in a round of a cycle.
type candidate struct {
	e   *entry
	cq  *clusterQueue
	asg quota.Assignment
	// amounts is asg's usage as the quota tree counts it, once computed
	// (see usageAmounts).
	amounts map[quota.FR]int64
}

// usageAmounts is c's usage as the quota tree counts it, computed once:
// the fair order and the check that a head still fits both need it.
func (c *candidate) usageAmounts() map[quota.FR]int64 {
	if c.amounts == nil {
		c.amounts = quota.Amounts(c.asg.Usage)
	}
	return c.amounts
}

// compareCandidates orders the heads of a round: higher priority first,
// then the ones that fit without borrowing, then the longest waiting, then
// by name so the order is total.
func compareCandidates(a, b candidate) int {
	if c := cmp.Compare(workload.Priority(b.e.wl), workload.Priority(a.e.wl)); c != 0 {
		return c
	}
	if a.asg.Borrowing != b.asg.Borrowing {
		if !a.asg.Borrowing {
			return -1
		}
		return 1
	}
	if c := queue.QueuedSince(a.e.wl).Compare(queue.QueuedSince(b.e.wl)); c != 0 {
		return c
	}
	return queue.Compare(a.e.wl, b.e.wl)
}

// Cycle runs one scheduling pass at now. Round after round, it takes the
// head of every ClusterQueue that has one, finds where it fits, and admits
// the heads that fit in compareCandidates order (with fair sharing on, a
// cohort tree's heads by share: see fairOrder); a head that does not fit
// is parked with the reason (in a StrictFIFO queue it blocks the queue
// instead). Queues that cannot admit park their workloads with the reason.
func (s *Scheduler) Cycle(now time.Time) Plan {
	s.mu.Lock()
	defer s.mu.Unlock()
	var plan Plan
	s.victimPools, s.blockedNotes = nil, nil // gathered afresh by each cycle
	s.releaseHeld(now)
	if h := s.held.peek(); h != nil {
		plan.Wake = h.fp.requeueAt
	}
	s.dropGhosts()
	s.dropStaleClaims()
	s.holdForPreemptors()
	defer s.releaseHolds()
	for root := range s.freedRoots {
		delete(s.freedRoots, root)
		for _, name := range s.tree.ClusterQueuesUnder(root) {
			if cq := s.clusterQueues[name]; cq != nil {
				cq.wake()
			}
		}
	}

	var runnable []*clusterQueue
	for _, name := range slices.Sorted(maps.Keys(s.clusterQueues)) {
		cq := s.clusterQueues[name]
		if !cq.runnable() {
			continue
		}
		if !cq.active {
			s.parkAll(&plan, cq, "ClusterQueue "+cq.name+" is inactive: "+cq.message)
			continue
		}
		runnable = append(runnable, cq)
	}

	for len(runnable) > 0 && plan.Tried < MaxTriesPerCycle && len(plan.Reservations) < MaxReservationsPerCycle {
		var heads []candidate
		next := runnable[:0]
		for _, cq := range runnable {
			switch c, fits, again := s.offer(&plan, cq); {
			case fits:
				heads = append(heads, c)
			case again:
				next = append(next, cq)
			}
		}
		slices.SortFunc(heads, compareCandidates)
		var fair *fairOrder
		if s.fairSharing.Enabled {
			fair = newFairOrder(s.tree, heads)
		}
		taken := map[string]bool{}
		for _, c := range heads {
			if root := s.tree.Root(c.cq.name); fair != nil && root != "" {
				// Fair sharing admits the heads of a tree together,
				// where the first of them comes, by their queues'
				// shares (see fairOrder).
				next = s.reserveFairly(&plan, fair, root, taken, next)
				continue
			}
			s.admit(&plan, c, taken)
			next = append(next, c.cq)
		}
		runnable = next
	}
	for _, cq := range runnable {
		if cq.runnable() {
			plan.More = true
		}
	}
	s.drainMessages(&plan)
	s.drainQueues(&plan)
	return plan
}

// offer tries cq's next head against the quota as it is now. fits says
// the head, c, can be reserved; otherwise again says cq has more to try in
// the next round: its head did not fit and was parked with the reason,
// while a queue with nothing to try, or a StrictFIFO queue the head now
// blocks, has not.
func (s *Scheduler) offer(plan *Plan, cq *clusterQueue) (c candidate, fits, again bool) {
	if cq.blockedBy != nil {
		return c, false, false
	}
	e := cq.next()
	if e == nil {
		return c, false, false
	}
	s.unhold(e)
	defer s.liftHoldsBehind(e)()
	plan.Tried++
	var asg quota.Assignment
	var err error
	var wait string
	if policy, ok := policyOf(cq.spec); ok {
		asg, wait, err = s.tryPreemption(plan, cq, e, policy)
	} else {
		asg, err = quota.Assign(cq.spec, e.wl.Spec.PodSets, s.flavors, s.tree)
	}
	if err == nil && wait == "" {
		return candidate{e: e, cq: cq, asg: asg}, true, false
	}
	var unfit *quota.UnfitError
	permanent := errors.As(err, &unfit) && unfit.Permanent
	if err == nil { // it waits for the victims it claimed
		s.hold(e, s.victimsOf(e))
	}
	if wait == "" {
		wait = err.Error()
	}
	if cq.spec.Spec.QueueingStrategy == v1alpha1.StrictFIFO && !permanent {
		s.block(plan, cq, e, wait)
		return c, false, false
	}
	cq.miss(e, wait, permanent)
	s.tell(plan, e, wait)
	return c, false, true
}

// admit reserves c, found to fit when it was offered, and reports
// whether it did. A head whose tree of cohorts an earlier head of the
// round took quota in (taken holds the roots of those trees) may no
// longer fit, and a cycle that handed out MaxReservationsPerCycle takes no
// more: the head stays first in its queue and is tried again in the next
// round or cycle.
func (s *Scheduler) admit(plan *Plan, c candidate, taken map[string]bool) bool {
	if len(plan.Reservations) >= MaxReservationsPerCycle {
		return false
	}
	if root := s.tree.Root(c.cq.name); root != "" {
		if taken[root] && !s.tree.Fits(c.cq.name, c.usageAmounts()) {
			return false
		}
		taken[root] = true
	}
	// Every reservation of a cycle records the flavors as the cycle
	// found them: one copy, made by the first.
	var flavors map[string]*v1alpha1.ResourceFlavor
	if len(plan.Reservations) > 0 {
		flavors = plan.Reservations[0].Flavors
	} else {
		flavors = maps.Clone(s.flavors)
	}
	s.assume(c)
	plan.Reservations = append(plan.Reservations, Reservation{
		Workload:     c.e.wl,
		ClusterQueue: c.cq.spec,
		Assignment:   c.asg,
		Checks:       ChecksFor(c.cq.spec, c.asg),
		Flavors:      flavors,
	})
	return true
}

// drainQueues hands out, once per version, every workload that holds
// quota in a ClusterQueue or through a LocalQueue whose stopPolicy is
// HoldAndDrain and is not being evicted already. Its cost follows the
// workloads of the draining queues alone.
func (s *Scheduler) drainQueues(plan *Plan) {
	for name := range s.drainingCQs {
		for _, e := range s.byAdmission[name] {
			s.drain(plan, e, v1alpha1.ReasonClusterQueueStopped, "ClusterQueue "+name)
		}
	}
	for key := range s.drainingLQs {
		for _, e := range s.byLocalQueue[key] {
			s.drain(plan, e, v1alpha1.ReasonLocalQueueStopped, "LocalQueue "+key.Name)
		}
	}
}

// drain hands e out to be evicted from queue (a ClusterQueue or
// LocalQueue, named) unless it holds no quota, is being evicted already,
// or this version of it was handed out before.
func (s *Scheduler) drain(plan *Plan, e *entry, reason, queue string) {
	wl := e.wl
	if !evictable(e) {
		return
	}
	e.evicted = wl.ResourceVersion
	plan.Evictions = append(plan.Evictions, Eviction{Workload: wl, Reason: reason, Message: DrainMessage(wl, queue)})
}

// evictable reports whether e holds quota that an eviction would take
// back: it is reserved (and not only assumed), not being evicted or
// deleted already, and this version of it was not handed out to be
// evicted before.
func evictable(e *entry) bool {
	wl := e.wl
	return e.where == reserved && !e.assumed && wl.Status.Admission != nil && !workload.IsEvicting(wl) &&
		!workload.IsDeleting(wl) && e.evicted != wl.ResourceVersion
}

// RetryEviction hands wl out to be evicted again by the next cycle, if
// it still should be: the eviction of this version failed.
func (s *Scheduler) RetryEviction(wl *v1alpha1.Workload) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.workloads[workload.Key(wl)]
	if e == nil || e.evicted != wl.ResourceVersion {
		return
	}
	e.evicted = ""
	// A victim of preemption is handed out again by its preemptor, which
	// waits parked: try it again.
	if by, ok := s.claimant(e); ok {
		s.retry(s.workloads[by])
	}
}

// retry puts e, parked, back among the workloads its queue tries next.
func (s *Scheduler) retry(e *entry) {
	if e.where != parked && e.where != retrying {
		return
	}
	cq := e.cq
	cq.take(e)
	s.enqueue(cq, e)
}

// DrainMessage says why a workload of queue is evicted, and what becomes
// of its pods: a plain pod is deleted for good, since nothing creates it
// again; a pod group waits for its pods to be created again.
func DrainMessage(wl *v1alpha1.Workload, queue string) string {
	return queue + " drains (stopPolicy HoldAndDrain): " + fateOf(wl)
}

// releaseHeld queues the held workloads whose requeue time has come.
func (s *Scheduler) releaseHeld(now time.Time) {
	for h := s.held.peek(); h != nil && !h.fp.requeueAt.After(now); h = s.held.peek() {
		s.held.remove(h)
		s.enqueue(h.cq, h)
	}
}

// parkAll parks every workload waiting in cq and tells it message.
func (s *Scheduler) parkAll(plan *Plan, cq *clusterQueue, message string) {
	cq.endPass()
	for e := cq.heap.peek(); e != nil; e = cq.heap.peek() {
		cq.miss(e, message, false)
	}
	cq.parked.each(func(e *entry) {
		e.message = message
		s.tell(plan, e, message)
	})
}

// block stops a StrictFIFO queue at head e until quota frees: e says why,
// the workloads behind it say what they wait for.
func (s *Scheduler) block(plan *Plan, cq *clusterQueue, e *entry, message string) {
	cq.blockedBy = e
	e.message = message
	s.tell(plan, e, message)
	behind := behindMessage(cq)
	for _, other := range cq.heap.items {
		if other != e {
			s.tell(plan, other, behind)
		}
	}
}

// behindMessage is what the workloads behind the head a StrictFIFO queue
// is blocked by wait for.
func behindMessage(cq *clusterQueue) string {
	b := cq.blockedBy.wl
	return "waiting behind " + b.Namespace + "/" + b.Name + " in StrictFIFO ClusterQueue " + cq.name
}

// tell hands out e's waiting message unless the last Plan already did.
func (s *Scheduler) tell(plan *Plan, e *entry, message string) {
	shrink.Delete(&s.messages, e.key)
	if e.sent == message {
		return
	}
	e.sent = message
	plan.Waiting = append(plan.Waiting, Waiting{Workload: e.wl, Message: message})
}

// drainMessages hands out the messages of workloads that cannot queue.
func (s *Scheduler) drainMessages(plan *Plan) {
	for _, e := range s.messages {
		s.tell(plan, e, e.message)
	}
}

// assume counts c's reservation as if written.
func (s *Scheduler) assume(c candidate) {
	s.unplace(c.e)
	s.reserve(c.e, c.cq.name, c.asg.Usage)
	c.e.assumed = true
}

// ChecksFor lists, sorted, the checks cq asks of a workload with asg: those
// without onFlavors, and those naming one of its flavors.
func ChecksFor(cq *v1alpha1.ClusterQueue, asg quota.Assignment) []string {
	s := cq.Spec.AdmissionChecksStrategy
	if s == nil {
		return nil
	}
	flavors := asg.Flavors()
	var out []string
	for _, rule := range s.AdmissionChecks {
		if len(rule.OnFlavors) == 0 || slices.ContainsFunc(rule.OnFlavors, func(f string) bool { return slices.Contains(flavors, f) }) {
			out = append(out, rule.Name)
		}
	}
	sort.Strings(out)
	return out
}
