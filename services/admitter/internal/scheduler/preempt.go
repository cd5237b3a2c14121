package scheduler

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/services/admitter/internal/preemption"
	"github.com/sluice-dev/sluice/services/admitter/internal/queue"
	"github.com/sluice-dev/sluice/services/admitter/internal/quota"
	"github.com/sluice-dev/sluice/services/admitter/internal/shrink"
	"github.com/sluice-dev/sluice/services/admitter/internal/workload"
)

// policyOf is cq's preemption policy; ok is false when it preempts
// nothing.
func policyOf(cq *v1alpha1.ClusterQueue) (p preemption.Policy, ok bool) {
	spec := cq.Spec.Preemption
	if spec == nil {
		return p, false
	}
	p.WithinClusterQueue = preemption.WithinClusterQueue(orNever(spec.WithinClusterQueue))
	p.ReclaimWithinCohort = preemption.ReclaimWithinCohort(orNever(spec.ReclaimWithinCohort))
	if b := spec.BorrowWithinCohort; b != nil && b.Policy == v1alpha1.PreemptionLowerPriority {
		p.BorrowWithinCohort = preemption.BorrowWithinCohort{LowerPriority: true, MaxPriorityThreshold: b.MaxPriorityThreshold}
	}
	ok = p.WithinClusterQueue != preemption.WithinNever || p.ReclaimWithinCohort != preemption.ReclaimNever
	return p, ok
}

func orNever(p v1alpha1.PreemptionPolicy) v1alpha1.PreemptionPolicy {
	if p == "" {
		return v1alpha1.PreemptionNever
	}
	return p
}

// preemptor is a head that may preempt: what the preemption package needs
// of it, the admitted workloads it may choose from, gathered on first use,
// and the victims decided for each usage asked about.
type preemptor struct {
	s       *Scheduler
	self    *entry
	cq      *clusterQueue
	policy  preemption.Policy
	pending preemption.Workload
	// pool holds the candidate victims of cq's tree this cycle, and
	// candidates those this preemptor may take; both nil until asked for.
	pool       *victimPool
	candidates []*preemption.Workload
	// decided memoises preemption.Targets by usage: quota.AssignWith asks
	// whether preemption helps the usage it settles on, and tryPreemption
	// then asks for the victims of that same usage.
	decided []decision
}

// decision is what preemption.Targets answered for usage.
type decision struct {
	usage   map[quota.FR]int64
	targets []preemption.Target
}

func (s *Scheduler) preemptorFor(cq *clusterQueue, e *entry, policy preemption.Policy) *preemptor {
	return &preemptor{s: s, self: e, cq: cq, policy: policy, pending: preemption.Workload{
		Key: e.key.String(), ClusterQueue: cq.name, Priority: workload.Priority(e.wl), QueuedAt: queue.QueuedSince(e.wl),
	}}
}

// preemptible tells quota.AssignWith whether preemption could make room
// for request.
func (p *preemptor) preemptible(request map[quota.FR]int64) bool {
	return len(p.decide(request)) > 0
}

// targets are the victims that make room for the pending workload taking
// usage, or nil.
func (p *preemptor) targets(usage map[quota.FR]int64) []preemption.Target {
	return p.decide(usage)
}

// decide runs preemption.Targets for usage once per head: nothing it
// depends on (the tree, the candidates, their claims) changes until the
// head has its answer, so asking again would get the same one. The quota
// held for waiting preemptors is lifted meanwhile: a hold keeps free quota
// from workloads that would fit in it, it does not make its queue look
// as if it borrowed, which could make that queue's workloads victims.
func (p *preemptor) decide(usage map[quota.FR]int64) []preemption.Target {
	for _, d := range p.decided {
		if maps.Equal(d.usage, usage) {
			return d.targets
		}
	}
	pending := p.pending
	pending.Usage = usage
	defer p.s.liftHolds()()
	var targets []preemption.Target
	if fs := p.s.fairSharing; fs.Enabled {
		admitted := p.admitted()
		undo := p.assumeQueueClaims()
		targets = preemption.FairTargets(p.s.tree, &pending, p.policy, fs.PreemptionStrategies, admitted)
		undo()
	} else {
		targets = preemption.Targets(p.s.tree, &pending, p.policy, p.admitted())
	}
	p.decided = append(p.decided, decision{usage: maps.Clone(usage), targets: targets})
	return targets
}

// admitted is every workload holding quota where the pending workload may
// preempt, less those another waiting preemptor claimed (see victimPool).
func (p *preemptor) admitted() []*preemption.Workload {
	if p.pool == nil {
		p.pool = p.s.victimPoolOf(p.cq.name)
		p.s.releaseLapsedClaims(p.pool)
		p.candidates = p.pool.candidatesFor(p.self)
	}
	return p.candidates
}

// assumeQueueClaims moves, in the quota tree, the quota of the victims
// that the other waiting heads of the preemptor's ClusterQueue claimed to
// that queue, as it will be once the victims stop and those heads take
// their place, and returns what undoes it. Under fair sharing the shares
// decide, and they must count the quota already spoken for: else every
// head of a queue in one cycle would see its queue's share as if none of
// the others had preempted, and together they would take more than the
// queue's share. Only the queue's own heads are counted: another queue's
// claims could make a queue that borrows nothing now look as if it
// borrowed, and no workload is taken from a queue for quota it does not
// hold yet. The preemptor's own claims stay as they are: deciding again
// must see what it saw the first time, to name the same victims.
func (p *preemptor) assumeQueueClaims() (undo func()) {
	var freed []*preemption.Workload
	var awaited []map[quota.FR]int64
	for by, victims := range p.pool.claimed {
		if by == p.self || by.cq != p.cq || by.awaits == nil {
			continue
		}
		for _, v := range victims {
			p.s.tree.RemoveUsage(v.ClusterQueue, v.Usage)
			freed = append(freed, v)
		}
		p.s.tree.AddUsage(p.cq.name, by.awaits)
		awaited = append(awaited, by.awaits)
	}
	return func() {
		for _, usage := range awaited {
			p.s.tree.RemoveUsage(p.cq.name, usage)
		}
		for _, v := range freed {
			p.s.tree.AddUsage(v.ClusterQueue, v.Usage)
		}
	}
}

// unhelped is the waiting message of a head that does not fit, err, when
// preemption could not help it because a policy protects the victims it
// would need (preemption.Blocked, asked about the first usage AssignWith
// weighed); "" leaves err's own message.
func (p *preemptor) unhelped(err error) string {
	var unfit *quota.UnfitError
	if !errors.As(err, &unfit) || unfit.Permanent || len(p.decided) == 0 {
		return ""
	}
	why := p.blocked(p.decided[0].usage)
	if why == "" {
		return ""
	}
	return err.Error() + "; preemption cannot help: " + why
}

// blocked is preemption.Blocked for the pending workload taking usage.
// The heads of a long queue often share their priority and request, so
// the answer is kept for the cycle for those that claimed no victims:
// theirs is the same.
func (p *preemptor) blocked(usage map[quota.FR]int64) string {
	p.admitted()
	if len(p.pool.claimed[p.self]) > 0 {
		return p.blockedNow(usage)
	}
	key := p.blockedKey(usage)
	if why, ok := p.s.blockedNotes[key]; ok {
		return why
	}
	why := p.blockedNow(usage)
	if p.s.blockedNotes == nil {
		p.s.blockedNotes = map[string]string{}
	}
	p.s.blockedNotes[key] = why
	return why
}

func (p *preemptor) blockedNow(usage map[quota.FR]int64) string {
	defer p.s.liftHolds()()
	pending := p.pending
	pending.Usage = usage
	if fs := p.s.fairSharing; fs.Enabled {
		admitted := p.admitted()
		defer p.assumeQueueClaims()()
		return preemption.FairBlocked(p.s.tree, &pending, p.policy, fs.PreemptionStrategies, admitted)
	}
	return preemption.Blocked(p.s.tree, &pending, p.policy, p.admitted())
}

// blockedKey names what preemption.Blocked's answer depends on, of the
// pending workload: its queue, priority and usage, and when it queued if
// the policy weighs that.
func (p *preemptor) blockedKey(usage map[quota.FR]int64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s|%d", p.cq.name, p.pending.Priority)
	if p.policy.WithinClusterQueue == preemption.WithinLowerOrNewerEqualPriority {
		fmt.Fprintf(&b, "|%d", p.pending.QueuedAt.UnixNano())
	}
	parts := make([]string, 0, len(usage))
	for fr, v := range usage {
		parts = append(parts, fmt.Sprintf("%s/%s=%d", fr.Flavor, fr.Resource, v))
	}
	slices.Sort(parts)
	b.WriteString("|" + strings.Join(parts, ","))
	return b.String()
}

// victimPool is, for one cycle, the workloads that a preemptor may take as
// victims in one tree of cohorts (or one ClusterQueue outside a cohort):
// gathered once, on first use, rather than for every head that may preempt,
// and kept up to date with what changes during the cycle:
//
//   - A reservation the cycle assumed, not written yet, cannot be a victim.
//     The reservations not assumed do not change during a cycle (nothing
//     is observed meanwhile), so gathering them once finds them all.
//   - A victim another waiting preemptor claimed is a candidate for that
//     preemptor alone (see claimant): claims made this cycle move victims
//     from free to claimed, and the claims of a preemptor that stopped
//     waiting (a reservation the cycle assumed for it) lapse, which puts
//     its victims back.
//   - A workload being evicted or deleted, or handed out to be evicted, is
//     marked Evicting: it goes anyway. Victims handed out this cycle are
//     marked as they are.
type victimPool struct {
	// free are the candidates no waiting preemptor claimed, kept in
	// preemption.Compare order: preemption.Targets then orders them in
	// linear time rather than sorting them for every head.
	free []*preemption.Workload
	// claimed are the victims of each waiting preemptor, in no particular
	// order (candidatesFor sorts the few of one preemptor).
	claimed map[*entry][]*preemption.Workload
	slots   map[*preemption.Workload]slot
}

// slot is a candidate's entry and whether it is in free.
type slot struct {
	e    *entry
	free bool
}

// poolKey names a tree of cohorts by its root, or a ClusterQueue outside
// a cohort.
type poolKey struct{ root, clusterQueue string }

// victimPoolOf is the pool of cq's tree this cycle, gathered on first use.
func (s *Scheduler) victimPoolOf(cq string) *victimPool {
	key, names := poolKey{clusterQueue: cq}, []string{cq}
	if root := s.tree.Root(cq); root != "" {
		key, names = poolKey{root: root}, nil
	}
	if pool := s.victimPools[key]; pool != nil {
		return pool
	}
	if names == nil {
		names = s.tree.ClusterQueuesUnder(key.root)
	}
	if s.victimPools == nil {
		s.victimPools = map[poolKey]*victimPool{}
	}
	pool := s.gatherVictims(names)
	s.victimPools[key] = pool
	return pool
}

// gatherVictims pools every workload holding quota in the ClusterQueues
// names, each with the preemptor that claimed it, if any.
func (s *Scheduler) gatherVictims(names []string) *victimPool {
	n := 0
	for _, name := range names {
		n += len(s.byAdmission[name])
	}
	pool := &victimPool{
		free:    make([]*preemption.Workload, 0, n),
		claimed: map[*entry][]*preemption.Workload{},
		slots:   make(map[*preemption.Workload]slot, n),
	}
	// One allocation for all the candidates: there may be thousands.
	workloads := make([]preemption.Workload, 0, n)
	for _, name := range names {
		for _, e := range s.byAdmission[name] {
			if e.assumed || e.amounts == nil {
				continue
			}
			workloads = append(workloads, victimOf(e))
			w := &workloads[len(workloads)-1]
			if by, ok := s.claimant(e); ok {
				pool.slots[w] = slot{e: e}
				pool.claimed[s.workloads[by]] = append(pool.claimed[s.workloads[by]], w)
				continue
			}
			pool.slots[w] = slot{e: e, free: true}
			pool.free = append(pool.free, w)
		}
	}
	slices.SortFunc(pool.free, preemption.Compare)
	return pool
}

// victimOf is e as a candidate victim.
func victimOf(e *entry) preemption.Workload {
	return preemption.Workload{
		Key: e.key.String(), ClusterQueue: e.admittedIn, Priority: workload.Priority(e.wl),
		QueuedAt: queue.QueuedSince(e.wl), ReservedAt: reservedAt(e.wl), Usage: e.amounts,
		Evicting: evicting(e),
	}
}

// evicting reports whether e is on its way out already: being evicted or
// deleted, or handed out to be evicted.
func evicting(e *entry) bool {
	return workload.IsEvicting(e.wl) || workload.IsDeleting(e.wl) || e.evicted == e.wl.ResourceVersion
}

// candidatesFor are the victims preemptor may take, in
// preemption.Compare order: the free ones, and those it claimed itself.
// Its own are sorted as they are handed out: tryPreemption marks the
// victims it claims Evicting, which moves them in the order.
func (pool *victimPool) candidatesFor(preemptor *entry) []*preemption.Workload {
	own := pool.claimed[preemptor]
	if len(own) == 0 {
		return pool.free
	}
	slices.SortFunc(own, preemption.Compare)
	return mergeInOrder(pool.free, own)
}

// mergeInOrder is a and b, both in preemption.Compare order, merged in a
// new slice in that order.
func mergeInOrder(a, b []*preemption.Workload) []*preemption.Workload {
	out := make([]*preemption.Workload, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		if preemption.Compare(b[0], a[0]) < 0 {
			out, b = append(out, b[0]), b[1:]
		} else {
			out, a = append(out, a[0]), a[1:]
		}
	}
	return append(append(out, a...), b...)
}

// entryOf is the entry of candidate w.
func (pool *victimPool) entryOf(w *preemption.Workload) *entry { return pool.slots[w].e }

// claim records that preemptor claimed candidate w: w leaves free, which
// keeps its order.
func (pool *victimPool) claim(preemptor *entry, w *preemption.Workload) {
	sl := pool.slots[w]
	if !sl.free {
		return // its own already
	}
	i := pool.indexInFree(w)
	pool.free = slices.Delete(pool.free, i, i+1)
	pool.slots[w] = slot{e: sl.e}
	pool.claimed[preemptor] = append(pool.claimed[preemptor], w)
}

// indexInFree is where w, a free candidate, is in free. Its place in the
// order finds it: nothing that order weighs changes while it is free (a
// victim is marked Evicting once claimed). The scan is for candidates
// that Compare could not tell apart, which unique keys rule out.
func (pool *victimPool) indexInFree(w *preemption.Workload) int {
	if i, found := slices.BinarySearchFunc(pool.free, w, preemption.Compare); found && pool.free[i] == w {
		return i
	}
	return slices.Index(pool.free, w)
}

// putBack makes w, of entry e, free again, in its place in the order.
func (pool *victimPool) putBack(w *preemption.Workload, e *entry) {
	pool.slots[w] = slot{e: e, free: true}
	i, _ := slices.BinarySearchFunc(pool.free, w, preemption.Compare)
	pool.free = slices.Insert(pool.free, i, w)
}

// releaseLapsedClaims puts back in pool the victims of the preemptors
// that stopped waiting since it was gathered (within a cycle, only by a
// reservation assumed for them), and drops their claims as claimant
// would. It looks at the claimants, not at every candidate.
func (s *Scheduler) releaseLapsedClaims(pool *victimPool) {
	lapsed := false
	defer func() {
		if lapsed {
			s.restoreSetAside()
		}
	}()
	for by, victims := range pool.claimed {
		if waits(by) {
			continue
		}
		delete(pool.claimed, by)
		lapsed = true
		for _, w := range victims {
			e := pool.entryOf(w)
			if s.claims[e.key] == by.key {
				shrink.Delete(&s.claims, e.key)
			}
			pool.putBack(w, e)
		}
	}
}

// waits reports whether p, a preemptor, still waits for its victims.
func waits(p *entry) bool {
	return p != nil && p.where != reserved && p.where != unplaced
}

func reservedAt(wl *v1alpha1.Workload) time.Time {
	if c := workload.Condition(wl, v1alpha1.WorkloadQuotaReserved); c != nil {
		return c.LastTransitionTime.Time
	}
	return wl.CreationTimestamp.Time
}

// claimant is the pending workload victim e was preempted for, if that
// workload still waits: the quota e frees is spoken for, so no other
// preemptor counts on it. A claim whose victim no longer holds quota, or
// whose preemptor no longer waits, is dropped.
func (s *Scheduler) claimant(e *entry) (types.NamespacedName, bool) {
	by, ok := s.claims[e.key]
	if !ok {
		return by, false
	}
	if e.where == reserved && waits(s.workloads[by]) {
		return by, true
	}
	shrink.Delete(&s.claims, e.key)
	return by, false
}

// dropStaleClaims forgets the claims that lapsed: on victims that no
// longer hold quota (it is back, to whoever fits first), and of preemptors
// that no longer wait. A preemptor whose victim stopped is tried again: the
// victim's quota may have gone to another workload, and it may need a
// victim anew — nothing else would wake it while the queue stays full.
func (s *Scheduler) dropStaleClaims() {
	dropped := false
	defer func() {
		if dropped {
			s.restoreSetAside()
		}
	}()
	for victim, by := range s.claims {
		v, p := s.workloads[victim], s.workloads[by]
		if v != nil && v.where == reserved && waits(p) {
			continue
		}
		shrink.Delete(&s.claims, victim)
		dropped = true
		if waits(p) {
			s.retry(p)
		}
	}
}

// restoreSetAside brings back the parked workloads that passes set aside
// (see parkedSet): victims a preemptor had claimed are free again, and
// they may let those workloads preempt.
func (s *Scheduler) restoreSetAside() {
	for _, cq := range s.clusterQueues {
		cq.parked.restore()
	}
}

// tryPreemption makes room for head e of cq by preemption when cq's
// policy allows and some flavor fits once victims are gone: it claims the
// victims, hands out those not on their way already to be evicted, and
// returns what e waits for. wait is empty when preemption does not help;
// asg is then the assignment e fits now, if any (err nil), found with the
// queue's flavorFungibility weighing preemption against the other flavors.
func (s *Scheduler) tryPreemption(plan *Plan, cq *clusterQueue, e *entry, policy preemption.Policy) (asg quota.Assignment, wait string, err error) {
	p := s.preemptorFor(cq, e, policy)
	asg, err = quota.AssignWith(cq.spec, e.wl.Spec.PodSets, s.flavors, s.tree, p.preemptible)
	if err != nil {
		return asg, p.unhelped(err), err
	}
	if !asg.Preempting {
		return asg, "", nil
	}
	targets := p.targets(quota.Amounts(asg.Usage))
	if len(targets) == 0 {
		// The pod sets fit one by one, not together: what fits without
		// preemption, if anything, is Assign's to say.
		asg, err = quota.Assign(cq.spec, e.wl.Spec.PodSets, s.flavors, s.tree)
		return asg, "", err
	}
	e.awaits = quota.Amounts(asg.Usage)
	var victims []string
	for _, t := range targets {
		v := p.pool.entryOf(t.Workload)
		s.claims[v.key] = e.key
		p.pool.claim(e, t.Workload)
		victims = append(victims, t.Workload.Key)
		if !evictable(v) {
			continue // on its way out already
		}
		v.evicted = v.wl.ResourceVersion
		t.Workload.Evicting = true // as evicting(v) now says, should its claim lapse this cycle
		plan.Evictions = append(plan.Evictions, Eviction{
			Workload: v.wl, Reason: v1alpha1.ReasonPreempted,
			Message: PreemptedMessage(v.wl, e.wl, cq.name, t.Reason, cq.spec.Spec.Preemption),
		})
	}
	slices.Sort(victims)
	return quota.Assignment{}, fmt.Sprintf("waiting for %d preempted workload(s) to stop, which frees its quota: %s",
		len(victims), strings.Join(victims, ", ")), nil
}

// PreemptedMessage says why victim was preempted for preemptor, pending
// in ClusterQueue cq, under policy, and what becomes of its pods.
func PreemptedMessage(victim, preemptor *v1alpha1.Workload, cq string, reason preemption.Reason, policy *v1alpha1.ClusterQueuePreemption) string {
	by := fmt.Sprintf("preempted by %s/%s (priority %d) of ClusterQueue %s", preemptor.Namespace, preemptor.Name, workload.Priority(preemptor), cq)
	var why string
	switch reason {
	case preemption.InClusterQueue:
		why = fmt.Sprintf("it has a lower priority in the same ClusterQueue (withinClusterQueue %s)", orNever(policy.WithinClusterQueue))
	case preemption.InCohortReclaimWhileBorrowing:
		why = fmt.Sprintf("it borrowed quota of the cohort, which %s borrows in its place (borrowWithinCohort %s)", cq, policy.BorrowWithinCohort.Policy)
	case preemption.InCohortFairSharing:
		why = fmt.Sprintf("under fair sharing its side of the cohort held a larger weighted share than %s's would with the preemptor admitted (%s)", cq, preemption.InCohortFairSharing)
	default:
		why = fmt.Sprintf("its ClusterQueue borrowed quota of the cohort, which %s reclaims (reclaimWithinCohort %s)", cq, orNever(policy.ReclaimWithinCohort))
	}
	return by + ": " + why + "; " + fateOf(victim)
}

// fateOf says what becomes of an evicted workload's pods: a plain pod is
// deleted for good, since nothing creates it again; a pod group waits for
// its pods to be created again.
func fateOf(wl *v1alpha1.Workload) string {
	if workload.PodGroup(wl) == "" {
		return "the pod is deleted and does not run again, as nothing creates a plain pod anew; create it again to queue it"
	}
	return "the group's pods are deleted; it queues again once they are all created again"
}
