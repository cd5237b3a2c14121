package scheduler

import (
	"fmt"
	"slices"
	"strings"
)

// PreemptionStrategy is a rule by which, under fair sharing, a workload
// may preempt a workload of another queue: it compares the shares of the
// two sides before and after the preemption.
type PreemptionStrategy string

const (
	// LessThanOrEqualToFinalShare preempts when the preemptor's side,
	// with the incoming workload, would have a share no higher than the
	// victim's side without the victim.
	LessThanOrEqualToFinalShare PreemptionStrategy = "LessThanOrEqualToFinalShare"
	// LessThanInitialShare preempts when the preemptor's side, with the
	// incoming workload, would have a share below the victim's side now.
	LessThanInitialShare PreemptionStrategy = "LessThanInitialShare"
)

// allowedStrategies are the strategy lists fair sharing accepts: either
// rule alone, or both in this order, the second tried for what the first
// leaves.
var allowedStrategies = [][]PreemptionStrategy{
	{LessThanOrEqualToFinalShare},
	{LessThanInitialShare},
	{LessThanOrEqualToFinalShare, LessThanInitialShare},
}

// DefaultPreemptionStrategies is the strategy list unless one is set.
func DefaultPreemptionStrategies() []PreemptionStrategy {
	return slices.Clone(allowedStrategies[2])
}

// FairSharing is the admitter's fair-sharing setting. While it is on,
// each ClusterQueue's and Cohort's status reports its share.
type FairSharing struct {
	Enabled bool
	// PreemptionStrategies are the rules of preemption between queues
	// by share, tried in order; nil means DefaultPreemptionStrategies.
	PreemptionStrategies []PreemptionStrategy
}

// ParsePreemptionStrategies reads a comma-separated strategy list, such
// as "LessThanOrEqualToFinalShare,LessThanInitialShare", and refuses any
// list but the allowed ones.
func ParsePreemptionStrategies(list string) ([]PreemptionStrategy, error) {
	var out []PreemptionStrategy
	for item := range strings.SplitSeq(list, ",") {
		out = append(out, PreemptionStrategy(strings.TrimSpace(item)))
	}
	for _, allowed := range allowedStrategies {
		if slices.Equal(out, allowed) {
			return out, nil
		}
	}
	return nil, fmt.Errorf("%q: must be exactly %s", list, allowedStrategyLists())
}

// allowedStrategyLists names the allowed lists as they are written:
// "A", "B" or "A,B".
func allowedStrategyLists() string {
	lists := make([]string, len(allowedStrategies))
	for i, l := range allowedStrategies {
		names := make([]string, len(l))
		for j, s := range l {
			names[j] = string(s)
		}
		lists[i] = fmt.Sprintf("%q", strings.Join(names, ","))
	}
	return strings.Join(lists[:len(lists)-1], ", ") + " or " + lists[len(lists)-1]
}

// Option adjusts a Scheduler made by New.
type Option func(*Scheduler)

// WithFairSharing sets the fair-sharing setting; without it, fair sharing
// is off.
func WithFairSharing(fs FairSharing) Option {
	return func(s *Scheduler) {
		if fs.PreemptionStrategies == nil {
			fs.PreemptionStrategies = DefaultPreemptionStrategies()
		}
		s.fairSharing = fs
	}
}
