// Package queue orders the pending workloads of a ClusterQueue: higher
// priority first, then the one that has waited longest. A workload that was
// evicted and requeued waits from its requeue time, so it goes to the back
// of its priority.
package queue

import (
	"cmp"
	"time"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/services/admitter/internal/workload"
)

// QueuedSince is the time the workload's place in line counts from: its
// creation, or its last requeue after an eviction.
func QueuedSince(wl *v1alpha1.Workload) time.Time {
	t := wl.CreationTimestamp.Time
	if rs := wl.Status.RequeueState; rs != nil && rs.RequeueAt != nil && rs.RequeueAt.After(t) {
		t = rs.RequeueAt.Time
	}
	return t
}

// Compare orders a before b (negative) when a has the higher priority, or
// the same priority and an earlier QueuedSince; namespace and name break
// ties so the order is total.
func Compare(a, b *v1alpha1.Workload) int {
	if c := cmp.Compare(workload.Priority(b), workload.Priority(a)); c != 0 {
		return c
	}
	if c := QueuedSince(a).Compare(QueuedSince(b)); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	return cmp.Compare(a.Name, b.Name)
}

// ReadyAt is when the workload may be queued again after an eviction; the
// zero time when it may be queued now.
func ReadyAt(wl *v1alpha1.Workload, now time.Time) time.Time {
	rs := wl.Status.RequeueState
	if rs == nil || rs.RequeueAt == nil || !rs.RequeueAt.After(now) {
		return time.Time{}
	}
	return rs.RequeueAt.Time
}
