package controller

import (
	"context"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/crashpoint"
	"github.com/sluice-dev/sluice/services/admitter/internal/workload"
)

// A deleted Workload keeps the ResourceInUseFinalizer until the grouper
// reports that no pod of it holds sluice's finalizer any more, and its
// providers acknowledged the Releases of its reservation. Until then
// its decision in force is DELETE and it keeps its quota, so the deletion
// survives any crash and a resubmission can never bring it back.

// stoppedSet remembers the deleted workloads whose pods were reported
// stopped. It lives in memory: after a restart the grouper reports again
// when it sees the DELETE decision in the new snapshot.
type stoppedSet struct {
	mu sync.Mutex
	m  map[types.NamespacedName]types.UID
}

func newStoppedSet() *stoppedSet { return &stoppedSet{m: map[types.NamespacedName]types.UID{}} }

func (s *stoppedSet) markStopped(key types.NamespacedName, uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[key] = uid
}

func (s *stoppedSet) isStopped(key types.NamespacedName, uid types.UID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	u, ok := s.m[key]
	return ok && u == uid
}

func (s *stoppedSet) forget(key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, key)
}

func (a *Admitter) deletionWorker(ctx context.Context) {
	for {
		key, shutdown := a.deletionQ.Get()
		if shutdown {
			return
		}
		err := a.finishDeletion(ctx, key)
		switch {
		case err == nil:
			a.deletionQ.Forget(key)
		case ctx.Err() == nil:
			a.log.V(1).Info("finishing a deleted workload", "workload", key.String(), "error", err.Error())
			a.deletionQ.AddRateLimited(key)
		}
		a.deletionQ.Done(key)
	}
}

// finishDeletion lets a deleted workload go once nothing holds it: its
// pods stopped (or it finished) and every Release of its reservation was
// acknowledged. A reservation still held is given up first, in one status
// write that owes its Releases.
func (a *Admitter) finishDeletion(ctx context.Context, key types.NamespacedName) error {
	unlock := a.locks.lock(key)
	defer unlock()
	orig := a.store.get(key)
	if orig == nil || !isDeleting(orig) || !slices.Contains(orig.Finalizers, v1alpha1.ResourceInUseFinalizer) {
		return nil
	}
	if !a.deletions.isStopped(key, orig.UID) {
		return nil // waiting for the grouper
	}
	if orig.Status.Admission != nil && !isFinished(orig) {
		wl := orig.DeepCopy()
		owe(wl, v1alpha1.ReleaseDeleted)
		wl.Status.Admission = nil
		wl.Status.PodSetInfos = nil
		if err := a.patchStatus(ctx, orig, wl, "release-deleted"); err != nil {
			return err
		}
		orig = a.store.get(key)
	}
	if a.releases.outstanding(orig) {
		a.releases.enqueue(orig) // the last acknowledgement queues this again
		return nil
	}
	done := orig.DeepCopy()
	done.Finalizers = slices.DeleteFunc(done.Finalizers, func(f string) bool { return f == v1alpha1.ResourceInUseFinalizer })
	if err := a.patchSpec(ctx, orig, done, "remove-finalizer"); err != nil {
		return err
	}
	crashpoint.Hit("admitter/remove-finalizer")
	a.log.V(1).Info("deleted workload released", "workload", key.String(), "after", time.Since(orig.DeletionTimestamp.Time))
	return nil
}

// watchDeletion queues a deleted workload for finishDeletion.
func (a *Admitter) watchDeletion(wl *v1alpha1.Workload) {
	if isDeleting(wl) {
		a.deletionQ.Add(workload.Key(wl))
	}
}
