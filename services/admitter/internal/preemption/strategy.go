package preemption

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sluice-dev/sluice/services/admitter/internal/quota"
)

// Strategy is a rule by which, under fair sharing, a workload may preempt
// a workload of another ClusterQueue: it compares the shares of the two
// sides of their lowest common Cohort before and after the preemption.
type Strategy string

const (
	// LessThanOrEqualToFinalShare preempts when the preemptor's side,
	// with the incoming workload, would have a share no higher than the
	// victim's side without the victim.
	LessThanOrEqualToFinalShare Strategy = "LessThanOrEqualToFinalShare"
	// LessThanInitialShare preempts when the preemptor's side, with the
	// incoming workload, would have a share below the victim's side now.
	LessThanInitialShare Strategy = "LessThanInitialShare"
)

// allows reports whether s lets a workload preempt, given the share of
// its side with it admitted, and of the victim's side before and after.
func (s Strategy) allows(preemptorNew, targetOld, targetNew quota.Share) bool {
	if s == LessThanInitialShare {
		return quota.CompareShares(preemptorNew, targetOld) < 0
	}
	return quota.CompareShares(preemptorNew, targetNew) <= 0
}

// strategyLists are the strategy lists fair sharing accepts: either rule
// alone, or both in this order, the second tried for what the first
// leaves (a rule that is stricter second would never preempt more).
func strategyLists() [][]Strategy {
	return [][]Strategy{
		{LessThanOrEqualToFinalShare},
		{LessThanInitialShare},
		{LessThanOrEqualToFinalShare, LessThanInitialShare},
	}
}

// DefaultStrategies is the strategy list unless one is set: both rules.
func DefaultStrategies() []Strategy {
	return []Strategy{LessThanOrEqualToFinalShare, LessThanInitialShare}
}

// ParseStrategies reads a comma-separated strategy list, such as
// "LessThanOrEqualToFinalShare,LessThanInitialShare", and refuses any list
// but the accepted ones.
func ParseStrategies(list string) ([]Strategy, error) {
	var out []Strategy
	for item := range strings.SplitSeq(list, ",") {
		out = append(out, Strategy(strings.TrimSpace(item)))
	}
	lists := strategyLists()
	for _, allowed := range lists {
		if slices.Equal(out, allowed) {
			return out, nil
		}
	}
	names := make([]string, len(lists))
	for i, l := range lists {
		names[i] = fmt.Sprintf("%q", joinStrategies(l))
	}
	return nil, fmt.Errorf("%q: must be exactly %s or %s", list, strings.Join(names[:len(names)-1], ", "), names[len(names)-1])
}

// joinStrategies writes a list as ParseStrategies reads it.
func joinStrategies(list []Strategy) string {
	names := make([]string, len(list))
	for i, s := range list {
		names[i] = string(s)
	}
	return strings.Join(names, ",")
}
