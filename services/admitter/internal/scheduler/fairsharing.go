package scheduler

import "github.com/sluice-dev/sluice/services/admitter/internal/preemption"

// FairSharing is the admitter's fair-sharing setting. While it is on,
// each ClusterQueue's and Cohort's status reports its share, the heads of
// a cohort tree are admitted by share (fairOrder), and victims of
// preemption are chosen by share (preemption.FairTargets).
type FairSharing struct {
	Enabled bool
	// PreemptionStrategies are the rules of preemption between queues
	// by share, tried in order; nil means preemption.DefaultStrategies.
	PreemptionStrategies []preemption.Strategy
}

// Option adjusts a Scheduler made by New.
type Option func(*Scheduler)

// WithFairSharing sets the fair-sharing setting; without it, fair sharing
// is off.
func WithFairSharing(fs FairSharing) Option {
	return func(s *Scheduler) {
		if fs.PreemptionStrategies == nil {
			fs.PreemptionStrategies = preemption.DefaultStrategies()
		}
		s.fairSharing = fs
	}
}
