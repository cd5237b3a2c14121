package lifecycle

import (
	"context"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/crashpoint"
	"github.com/sluice-dev/sluice/services/admitter/internal/releases"
	"github.com/sluice-dev/sluice/services/admitter/internal/shrink"
	"github.com/sluice-dev/sluice/services/admitter/internal/workload"
)

// A deleted Workload keeps the ResourceInUseFinalizer until the grouper
// reports that no pod of it holds sluice's finalizer any more, and its
// providers acknowledged the Releases of its reservation — or, for a
// provider that keeps failing, until the Releases were handed over to its
// AdmissionCheck's status.owedReleases after the release wait (see
// handOver). Until then its decision in force is DELETE and it keeps its
// quota, so the deletion survives any crash and a resubmission can never
// bring it back.

// stoppedSet remembers the deleted workloads whose pods were reported
// stopped. It lives in memory: after a restart the grouper reports again
// when it sees the DELETE decision in the new snapshot.
type stoppedSet struct {
	mu sync.Mutex
	m  map[types.NamespacedName]types.UID
}

func newStoppedSet() *stoppedSet { return &stoppedSet{m: map[types.NamespacedName]types.UID{}} }

func (s *stoppedSet) mark(key types.NamespacedName, uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[key] = uid
}

func (s *stoppedSet) has(key types.NamespacedName, uid types.UID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	u, ok := s.m[key]
	return ok && u == uid
}

func (s *stoppedSet) forget(key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	shrink.Delete(&s.m, key)
}

// WatchDeletion queues a deleted workload for the deletion worker; call it
// for every version of a workload and whenever one of its Releases was
// acknowledged.
func (w *Writer) WatchDeletion(key types.NamespacedName) {
	if wl := w.cfg.Store.Get(key); wl != nil && workload.IsDeleting(wl) {
		w.deletionQ.Add(key)
	}
}

func (w *Writer) runDeletions(ctx context.Context) {
	go func() {
		<-ctx.Done()
		w.deletionQ.ShutDown()
	}()
	log := ctrl.LoggerFrom(ctx)
	for {
		key, shutdown := w.deletionQ.Get()
		if shutdown {
			return
		}
		err := w.finishDeletion(ctx, key)
		switch {
		case err == nil:
			w.deletionQ.Forget(key)
		case ctx.Err() == nil:
			log.V(1).Info("finishing a deleted workload", "workload", key.String(), "error", err.Error())
			w.deletionQ.AddRateLimited(key)
		}
		w.deletionQ.Done(key)
	}
}

// finishDeletion lets a deleted workload go once nothing holds it: its
// pods stopped (or it finished) and every Release of its reservation was
// acknowledged or handed over to its check. A reservation still held is
// given up first, in one status write that owes its Releases.
func (w *Writer) finishDeletion(ctx context.Context, key types.NamespacedName) error {
	unlock := w.cfg.Locks.Lock(key)
	defer unlock()
	orig := w.cfg.Store.Get(key)
	if orig == nil || !workload.IsDeleting(orig) || !slices.Contains(orig.Finalizers, v1alpha1.ResourceInUseFinalizer) {
		return nil
	}
	if !w.stopped.has(key, orig.UID) {
		return nil // waiting for the grouper
	}
	if orig.Status.Admission != nil && !workload.IsFinished(orig) {
		wl := orig.DeepCopy()
		releases.Owe(wl, v1alpha1.ReleaseDeleted)
		wl.Status.Admission = nil
		wl.Status.PodSetInfos = nil
		if err := w.PatchStatus(ctx, orig, wl, "release-deleted"); err != nil {
			return err
		}
		orig = w.cfg.Store.Get(key)
	}
	var handed []releases.Owed
	if w.cfg.Releases.Outstanding(orig) {
		w.cfg.Releases.Enqueue(orig) // the last acknowledgement queues this again
		var ok bool
		if handed, ok = w.handOver(orig); !ok {
			return nil
		}
	}
	done := orig.DeepCopy()
	done.Finalizers = slices.DeleteFunc(done.Finalizers, func(f string) bool { return f == v1alpha1.ResourceInUseFinalizer })
	if err := w.patchSpec(ctx, orig, done, "remove-finalizer"); err != nil {
		return err
	}
	crashpoint.Hit("admitter/remove-finalizer")
	w.handedOver(ctx, done, handed)
	ctrl.LoggerFrom(ctx).V(1).Info("deleted workload released", "workload", key.String(), "after", time.Since(orig.DeletionTimestamp.Time))
	return nil
}
