package controller

import (
	"context"
	"fmt"
	"sync"

	"google.golang.org/protobuf/types/known/timestamppb"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/services/admitter/internal/lifecycle"
	"github.com/sluice-dev/sluice/services/admitter/internal/startup"
	"github.com/sluice-dev/sluice/services/admitter/internal/workload"
)

// policies holds the start-up deadline policy of each ClusterQueue, kept
// from the informer, so that looking one up on every write costs no copy
// of the queue.
type policies struct {
	mu   sync.RWMutex
	def  startup.Policy
	byCQ map[string]startup.Policy
}

func newPolicies(def startup.Policy) *policies {
	return &policies{def: def, byCQ: map[string]startup.Policy{}}
}

// get is the policy of ClusterQueue name: the default for a queue not
// seen (yet).
func (p *policies) get(name string) startup.Policy {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if pol, ok := p.byCQ[name]; ok {
		return pol
	}
	return p.def
}

// set records cq's policy (nil: the queue is gone) and reports whether it
// changed.
func (p *policies) set(name string, cq *v1alpha1.ClusterQueue) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	old, had := p.byCQ[name]
	if cq == nil {
		delete(p.byCQ, name)
		return had
	}
	pol := startup.For(cq, p.def)
	p.byCQ[name] = pol
	return !had || !samePolicy(old, pol)
}

func samePolicy(a, b startup.Policy) bool {
	return a.Timeout == b.Timeout && a.Condition == b.Condition && a.BackoffBase == b.BackoffBase &&
		a.BackoffMax == b.BackoffMax && (a.LimitCount == nil) == (b.LimitCount == nil) &&
		(a.LimitCount == nil || *a.LimitCount == *b.LimitCount)
}

// loadPolicies reads every ClusterQueue's policy from the synced cache,
// before the first decisions are published with their deadlines.
func (a *Admitter) loadPolicies(ctx context.Context) error {
	var cqs v1alpha1.ClusterQueueList
	if err := a.cfg.Cache.List(ctx, &cqs); err != nil {
		return fmt.Errorf("list cluster queues: %w", err)
	}
	for i := range cqs.Items {
		a.policies.set(cqs.Items[i].Name, &cqs.Items[i])
	}
	return nil
}

// setPolicy records a ClusterQueue's policy. When it changed, the
// deadlines of the workloads admitted in the queue are computed again and
// their decisions published with the new start_by.
func (a *Admitter) setPolicy(name string, cq *v1alpha1.ClusterQueue) {
	if !a.policies.set(name, cq) || !a.leading.Load() {
		return
	}
	for _, wl := range a.store.List() {
		if wl.Status.Admission != nil && wl.Status.Admission.ClusterQueue == name {
			a.syncDecision(wl)
			a.watchDeadline(wl)
		}
	}
}

// watchDeadline hands an admitted workload with a deadline to keep (a
// start-up deadline, a maximum execution time) to the deadline watcher;
// others cost nothing. It runs for every version of every workload, and
// for every workload when this admitter starts to lead: a new leader
// arms its timers from the Workloads alone.
func (a *Admitter) watchDeadline(wl *v1alpha1.Workload) {
	if wl.Status.Admission == nil || !workload.IsAdmitted(wl) {
		return
	}
	if _, ok := lifecycle.ExecutionDeadline(wl); ok {
		a.deadlines.Enqueue(workload.Key(wl))
		return
	}
	if _, due := startup.Due(wl, a.policies.get(wl.Status.Admission.ClusterQueue)); due {
		a.deadlines.Enqueue(workload.Key(wl))
	}
}

// withStartBy sets an admission's start-up deadline on its decision:
// unset when the queue has none or every pod started already.
func (a *Admitter) withStartBy(d *admitterv1.Decision, wl *v1alpha1.Workload) *admitterv1.Decision {
	if d == nil || d.GetAction() != admitterv1.Decision_ACTION_ADMIT {
		return d
	}
	if at, due := startup.Due(wl, a.policies.get(wl.Status.Admission.ClusterQueue)); due {
		d.StartBy = timestamppb.New(at)
	}
	return d
}
