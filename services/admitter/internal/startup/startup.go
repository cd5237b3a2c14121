// Package startup holds the rules of the start-up deadline of admitted
// workloads: which policy a ClusterQueue has (its own waitForPodsReady or
// the cluster default), when an admission's deadline falls, whether the
// grouper's counts mean every pod started, and how long a requeue after a
// missed deadline waits. It does no I/O.
package startup

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

// Defaults of a requeuing strategy.
const (
	DefaultBackoffBase = 60 * time.Second
	DefaultBackoffMax  = time.Hour
)

// Policy is the start-up deadline of a ClusterQueue's admissions.
type Policy struct {
	// Timeout after the admission by which every pod must have started;
	// zero means no deadline.
	Timeout time.Duration
	// Condition is what counts as started.
	Condition v1alpha1.PodsStartedCondition
	// BackoffBase and BackoffMax shape the requeue wait; LimitCount, when
	// set, is how many requeues are allowed before deactivation.
	BackoffBase, BackoffMax time.Duration
	LimitCount              *int32
}

// Enabled reports whether the policy sets a deadline.
func (p Policy) Enabled() bool { return p.Timeout > 0 }

// FromSpec is the policy a waitForPodsReady spells, defaults filled in.
func FromSpec(w *v1alpha1.WaitForPodsReady) Policy {
	if w == nil {
		return Policy{}
	}
	p := Policy{Timeout: w.Timeout.Duration, Condition: w.Condition, BackoffBase: DefaultBackoffBase, BackoffMax: DefaultBackoffMax}
	if p.Condition == "" {
		p.Condition = v1alpha1.PodsReady
	}
	if rs := w.RequeuingStrategy; rs != nil {
		if rs.BackoffBaseSeconds != nil {
			p.BackoffBase = time.Duration(*rs.BackoffBaseSeconds) * time.Second
		}
		if rs.BackoffMaxSeconds != nil {
			p.BackoffMax = time.Duration(*rs.BackoffMaxSeconds) * time.Second
		}
		p.LimitCount = rs.BackoffLimitCount
	}
	return p
}

// For is cq's policy: its own waitForPodsReady, as a whole, when set;
// otherwise the cluster default.
func For(cq *v1alpha1.ClusterQueue, def Policy) Policy {
	if cq == nil || cq.Spec.WaitForPodsReady == nil {
		return def
	}
	return FromSpec(cq.Spec.WaitForPodsReady)
}

// Validate refuses a policy that cannot be applied, naming the setting
// (as the admitter's flags spell it) and the rule.
func (p Policy) Validate() error {
	switch {
	case p.Timeout < 0:
		return fmt.Errorf("wait-for-pods-ready-timeout %s: must not be negative", p.Timeout)
	case p.Condition != v1alpha1.PodsReady && p.Condition != v1alpha1.PodsScheduled:
		return fmt.Errorf("wait-for-pods-ready-condition %q: must be %s or %s", p.Condition, v1alpha1.PodsReady, v1alpha1.PodsScheduled)
	case p.BackoffBase <= 0:
		return fmt.Errorf("requeuing-backoff-base %s: must be positive", p.BackoffBase)
	case p.BackoffMax < p.BackoffBase:
		return fmt.Errorf("requeuing-backoff-max %s: must not be below requeuing-backoff-base %s", p.BackoffMax, p.BackoffBase)
	case p.LimitCount != nil && *p.LimitCount < 0:
		return fmt.Errorf("requeuing-backoff-limit-count %d: must not be negative", *p.LimitCount)
	}
	return nil
}

// Deadline is when the admission of wl must have started by: the time its
// Admitted condition turned True plus the timeout. It is read from the
// object alone, so it survives restarts. ok is false when no deadline is
// in force: no deadline in the policy, or wl is not admitted (or its
// eviction is under way).
func Deadline(wl *v1alpha1.Workload, p Policy) (at time.Time, ok bool) {
	if !p.Enabled() || wl.Status.Admission == nil || wl.DeletionTimestamp != nil {
		return time.Time{}, false
	}
	c := meta.FindStatusCondition(wl.Status.Conditions, v1alpha1.WorkloadAdmitted)
	if c == nil || c.Status != metav1.ConditionTrue || meta.IsStatusConditionTrue(wl.Status.Conditions, v1alpha1.WorkloadEvicted) ||
		meta.IsStatusConditionTrue(wl.Status.Conditions, v1alpha1.WorkloadFinished) {
		return time.Time{}, false
	}
	return c.LastTransitionTime.Add(p.Timeout), true
}

// Due is the deadline of wl's admission when it is still to be kept: a
// deadline is in force and the pods have not all started (PodsReady).
func Due(wl *v1alpha1.Workload, p Policy) (time.Time, bool) {
	if HasStarted(wl) {
		return time.Time{}, false
	}
	return Deadline(wl, p)
}

// HasStarted reports whether wl's current admission recorded that every
// pod started.
func HasStarted(wl *v1alpha1.Workload) bool {
	return meta.IsStatusConditionTrue(wl.Status.Conditions, v1alpha1.WorkloadPodsReady)
}

// Counts is what the grouper reports of started pods, per pod set.
type Counts struct {
	Scheduled, Ready map[string]int32
}

// Of is the count the policy's condition looks at.
func (c Counts) Of(cond v1alpha1.PodsStartedCondition) map[string]int32 {
	if cond == v1alpha1.PodsScheduled {
		return c.Scheduled
	}
	return c.Ready
}

// AllStarted reports whether every pod set's count, by the policy's
// condition, reaches the pod set's count.
func AllStarted(p Policy, podSets []v1alpha1.PodSet, c Counts) bool {
	counts := c.Of(p.Condition)
	for _, ps := range podSets {
		if counts[ps.Name] < ps.Count {
			return false
		}
	}
	return true
}

// Describe says, for a message, how many pods of each pod set started by
// the policy's condition; known is false when nothing was reported.
func Describe(p Policy, podSets []v1alpha1.PodSet, c Counts, known bool) string {
	word := "ready"
	if p.Condition == v1alpha1.PodsScheduled {
		word = "scheduled"
	}
	if !known {
		return "no pod was reported " + word
	}
	counts := c.Of(p.Condition)
	byName := map[string]int32{}
	for _, ps := range podSets {
		byName[ps.Name] = ps.Count
	}
	parts := make([]string, 0, len(byName))
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		parts = append(parts, fmt.Sprintf("pod set %s %d/%d %s", name, counts[name], byName[name], word))
	}
	return strings.Join(parts, ", ")
}

// Backoff is the wait before the n-th requeue (n >= 1) after a missed
// deadline: min(base * 2^(n-1), max).
func Backoff(p Policy, n int32) time.Duration {
	if n < 1 {
		n = 1
	}
	d := p.BackoffBase
	for i := int32(1); i < n; i++ {
		if d >= p.BackoffMax {
			break
		}
		d *= 2
	}
	return min(d, p.BackoffMax)
}

// LimitExceeded reports whether the n-th requeue is beyond the policy's
// limit.
func LimitExceeded(p Policy, n int32) bool {
	return p.LimitCount != nil && n > ptr.Deref(p.LimitCount, 0)
}
