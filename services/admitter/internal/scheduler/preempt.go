package scheduler

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/services/admitter/internal/preemption"
	"github.com/sluice-dev/sluice/services/admitter/internal/queue"
	"github.com/sluice-dev/sluice/services/admitter/internal/quota"
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
// of it, and the admitted workloads it may choose from, gathered on first
// use.
type preemptor struct {
	s       *Scheduler
	key     types.NamespacedName
	cq      *clusterQueue
	policy  preemption.Policy
	pending preemption.Workload
	// candidates and entries are the workloads holding quota in cq's tree
	// (cq alone outside a cohort); nil until asked for.
	candidates []*preemption.Workload
	entries    map[string]*entry
}

func (s *Scheduler) preemptorFor(cq *clusterQueue, e *entry, policy preemption.Policy) *preemptor {
	return &preemptor{s: s, key: e.key, cq: cq, policy: policy, pending: preemption.Workload{
		Key: e.key.String(), ClusterQueue: cq.name, Priority: workload.Priority(e.wl), QueuedAt: queue.QueuedSince(e.wl),
	}}
}

// preemptible tells quota.AssignWith whether preemption could make room
// for request.
func (p *preemptor) preemptible(request map[quota.FR]int64) bool {
	pending := p.pending
	pending.Usage = request
	return len(preemption.Targets(p.s.tree, &pending, p.policy, p.admitted())) > 0
}

// targets are the victims that make room for the pending workload taking
// usage, or nil.
func (p *preemptor) targets(usage map[quota.FR]int64) []preemption.Target {
	pending := p.pending
	pending.Usage = usage
	return preemption.Targets(p.s.tree, &pending, p.policy, p.admitted())
}

// admitted gathers, once, every workload holding quota where the pending
// workload may preempt. A reservation this cycle assumed, not written yet,
// cannot be a victim, nor can the victim another pending workload claimed;
// a workload being evicted or deleted, or handed out to be evicted, is
// marked Evicting: it goes anyway.
func (p *preemptor) admitted() []*preemption.Workload {
	if p.entries != nil {
		return p.candidates
	}
	p.entries = map[string]*entry{}
	names := []string{p.cq.name}
	if root := p.s.tree.Root(p.cq.name); root != "" {
		names = p.s.tree.ClusterQueuesUnder(root)
	}
	for _, name := range names {
		for _, e := range p.s.byAdmission[name] {
			if e.assumed || e.amounts == nil {
				continue
			}
			if by, ok := p.s.claimant(e); ok && by != p.key {
				continue
			}
			key := e.key.String()
			p.entries[key] = e
			p.candidates = append(p.candidates, &preemption.Workload{
				Key: key, ClusterQueue: e.admittedIn, Priority: workload.Priority(e.wl),
				QueuedAt: queue.QueuedSince(e.wl), ReservedAt: reservedAt(e.wl), Usage: e.amounts,
				Evicting: workload.IsEvicting(e.wl) || workload.IsDeleting(e.wl) || e.evicted == e.wl.ResourceVersion,
			})
		}
	}
	return p.candidates
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
	if p := s.workloads[by]; e.where == reserved && p != nil && p.where != reserved && p.where != unplaced {
		return by, true
	}
	delete(s.claims, e.key)
	return by, false
}

// dropStaleClaims forgets the claims that lapsed: on victims that no
// longer hold quota (it is back, to whoever fits first), and of preemptors
// that no longer wait. A preemptor whose victim stopped is tried again: the
// victim's quota may have gone to another workload, and it may need a
// victim anew — nothing else would wake it while the queue stays full.
func (s *Scheduler) dropStaleClaims() {
	for victim, by := range s.claims {
		v, p := s.workloads[victim], s.workloads[by]
		waiting := p != nil && p.where != reserved && p.where != unplaced
		if v != nil && v.where == reserved && waiting {
			continue
		}
		delete(s.claims, victim)
		if waiting {
			s.retry(p)
		}
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
	if err != nil || !asg.Preempting {
		return asg, "", err
	}
	targets := p.targets(quota.Amounts(asg.Usage))
	if len(targets) == 0 {
		// The pod sets fit one by one, not together: what fits without
		// preemption, if anything, is Assign's to say.
		asg, err = quota.Assign(cq.spec, e.wl.Spec.PodSets, s.flavors, s.tree)
		return asg, "", err
	}
	var victims []string
	for _, t := range targets {
		v := p.entries[t.Workload.Key]
		s.claims[v.key] = e.key
		victims = append(victims, t.Workload.Key)
		if !evictable(v) {
			continue // on its way out already
		}
		v.evicted = v.wl.ResourceVersion
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
