package controller

import (
	"context"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

// summaries counts reservations and admissions per ClusterQueue between
// two summary events, so that the success path costs one Event per queue
// and interval instead of one per workload.
type summaries struct {
	mu     sync.Mutex
	counts map[string]*summary
}

type summary struct{ reserved, admitted int }

func newSummaries() *summaries { return &summaries{counts: map[string]*summary{}} }

func (s *summaries) add(cq string, admitted bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.counts[cq]
	if c == nil {
		c = &summary{}
		s.counts[cq] = c
	}
	if admitted {
		c.admitted++
	} else {
		c.reserved++
	}
}

func (s *summaries) take() map[string]*summary {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.counts
	s.counts = map[string]*summary{}
	return out
}

// emitSummaries writes one aggregated event per ClusterQueue for what it
// admitted since the last call.
func (a *Admitter) emitSummaries(ctx context.Context) {
	for name, c := range a.summaries.take() {
		var cq v1alpha1.ClusterQueue
		if err := a.cfg.Cache.Get(ctx, client.ObjectKey{Name: name}, &cq); err != nil {
			continue
		}
		a.cfg.Recorder.Eventf(&cq, nil, "Normal", "Admitted", "Admit",
			"in the last %s: %d workloads admitted, %d more reserved quota and wait for admission checks",
			a.cfg.EventInterval, c.admitted, c.reserved)
	}
}
