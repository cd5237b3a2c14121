// Package lifecycle writes every transition of a Workload: created on
// submission, quota reserved, admitted, told why it waits, evicted (quota
// held until its pods stop, then released), rejected, finished, moved to
// another queue, and let go once deleted. Each transition is one guarded
// write (two where a crash in between must still end well, as noted), made
// under the workload's lock from the store's newest version, and handed
// back to the admitter through Config.Observe so the rest of it reacts to
// the admitter's own writes without waiting for the informer.
package lifecycle

import (
	"errors"
	"fmt"
	"time"

	"context"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/services/admitter/internal/metrics"
	"github.com/sluice-dev/sluice/services/admitter/internal/releases"
	"github.com/sluice-dev/sluice/services/admitter/internal/startup"
	"github.com/sluice-dev/sluice/services/admitter/internal/store"
)

// FieldOwner is the field manager of every write the admitter makes.
const FieldOwner = "sluice-admitter"

// ErrStale reports a write lost to a newer version of the workload; the
// caller may retry.
var ErrStale = errors.New("the workload changed; will retry from the newer version")

// Config is what a Writer needs.
type Config struct {
	// Client writes (with FieldOwner); APIReader reads from the API server
	// when the store cannot answer.
	Client    client.Client
	APIReader client.Reader
	Store     *store.Store
	Locks     *store.Locks
	Recorder  events.EventRecorder
	Metrics   *metrics.Metrics
	// Releases prunes acknowledged Releases from every status write and
	// says whether a deleted workload still owes some.
	Releases *releases.Tracker
	// Observe is told of every version the Writer wrote.
	Observe func(*v1alpha1.Workload)
	// Requeue asks for a scheduling cycle.
	Requeue func()
	// Reserved is told of each reservation written, and whether it
	// admitted the workload at once.
	Reserved func(clusterQueue string, admitted bool)
	// StartPolicy is the start-up deadline policy of a ClusterQueue; nil
	// means no queue has a deadline.
	StartPolicy func(clusterQueue string) startup.Policy
	// ReplacementWindow is how long a pod group holding quota in a
	// ClusterQueue may be without pods before its Workload is deleted (see
	// NoPods); nil means DefaultReplacementWindow for every queue.
	ReplacementWindow func(ctx context.Context, clusterQueue string) (time.Duration, error)
}

// Writer makes the admitter's Workload writes.
type Writer struct {
	cfg       Config
	deletionQ workqueue.TypedRateLimitingInterface[types.NamespacedName]
	stopped   *stoppedSet
	messages  *messages
	started   *startedReports
}

// New returns a Writer; its deletion and message workers start with Run.
func New(cfg Config) *Writer {
	if cfg.Observe == nil {
		cfg.Observe = func(*v1alpha1.Workload) {}
	}
	if cfg.Requeue == nil {
		cfg.Requeue = func() {}
	}
	if cfg.Reserved == nil {
		cfg.Reserved = func(string, bool) {}
	}
	if cfg.StartPolicy == nil {
		cfg.StartPolicy = func(string) startup.Policy { return startup.Policy{} }
	}
	if cfg.ReplacementWindow == nil {
		cfg.ReplacementWindow = func(context.Context, string) (time.Duration, error) { return DefaultReplacementWindow, nil }
	}
	return &Writer{
		cfg: cfg,
		deletionQ: workqueue.NewTypedRateLimitingQueue(
			workqueue.NewTypedItemExponentialFailureRateLimiter[types.NamespacedName](100*time.Millisecond, 30*time.Second)),
		stopped:  newStoppedSet(),
		messages: newMessages(),
		started:  newStartedReports(),
	}
}

// Run runs the workers that let deleted workloads go and write the waiting
// messages held back by their rate limit, until ctx ends.
func (w *Writer) Run(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.runMessages(ctx)
	}()
	w.runDeletions(ctx)
	<-done
}

// Forget drops what the Writer remembers of a workload that is gone.
func (w *Writer) Forget(key types.NamespacedName) {
	w.stopped.forget(key)
	w.messages.forget(key)
	w.started.forget(key)
}

// unchanged returns the store's version of wl and whether it is still the
// version a decision was made on. Call it under the workload's lock.
func (w *Writer) unchanged(wl *v1alpha1.Workload) (*v1alpha1.Workload, bool) {
	cur := w.cfg.Store.Get(types.NamespacedName{Namespace: wl.Namespace, Name: wl.Name})
	return cur, cur != nil && cur.UID == wl.UID && cur.ResourceVersion == wl.ResourceVersion
}

// PatchStatus writes wl's status as a merge patch from orig, guarded by
// orig's resourceVersion, and records the answer. A conflict means the
// store was behind: the informer brings the newer version, which triggers
// the next look; it is ErrStale, not a failure.
func (w *Writer) PatchStatus(ctx context.Context, orig, wl *v1alpha1.Workload, op string) error {
	if equality.Semantic.DeepEqual(orig.Status, wl.Status) {
		return nil
	}
	// Acknowledged Releases ride out with whatever this write changes.
	w.cfg.Releases.Prune(&wl.Status, wl)
	patch := client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})
	if err := w.cfg.Client.Status().Patch(ctx, wl, patch, client.FieldOwner(FieldOwner)); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			ctrl.LoggerFrom(ctx).V(1).Info("workload changed under a write; waiting for the newer version",
				"workload", wl.Namespace+"/"+wl.Name, "operation", op)
			return ErrStale
		}
		return fmt.Errorf("%s: patch status of workload %s/%s: %w", op, wl.Namespace, wl.Name, err)
	}
	w.cfg.Metrics.WorkloadWrites.WithLabelValues(op).Inc()
	w.cfg.Observe(wl)
	return nil
}

// patchSpec writes wl's metadata and spec as a merge patch from orig,
// guarded by orig's resourceVersion, and records the answer.
func (w *Writer) patchSpec(ctx context.Context, orig, wl *v1alpha1.Workload, op string) error {
	patch := client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})
	if err := w.cfg.Client.Patch(ctx, wl, patch, client.FieldOwner(FieldOwner)); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return ErrStale
		}
		return fmt.Errorf("%s: patch workload %s/%s: %w", op, orig.Namespace, orig.Name, err)
	}
	w.cfg.Metrics.WorkloadWrites.WithLabelValues(op).Inc()
	w.cfg.Observe(wl)
	return nil
}

// current is the store's version of the workload, or the API server's
// when fresh is set or the store does not know it; nil when it is gone
// (or finished and retired).
func (w *Writer) current(ctx context.Context, key types.NamespacedName, fresh bool) (*v1alpha1.Workload, error) {
	if cur := w.cfg.Store.Get(key); cur != nil && !fresh {
		return cur, nil
	}
	var live v1alpha1.Workload
	if err := w.cfg.APIReader.Get(ctx, key, &live); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("read workload %s: %w", key, err)
	}
	w.cfg.Store.Upsert(&live)
	return w.cfg.Store.Get(key), nil
}

// StoredOrRead is the store's version of the workload or, when the store
// holds none (finished workloads are retired from it), the API server's,
// without recording it. A workload that does not exist is a NotFound
// error.
func (w *Writer) StoredOrRead(ctx context.Context, key types.NamespacedName) (*v1alpha1.Workload, error) {
	if cur := w.cfg.Store.Get(key); cur != nil {
		return cur, nil
	}
	var live v1alpha1.Workload
	if err := w.cfg.APIReader.Get(ctx, key, &live); err != nil {
		return nil, fmt.Errorf("read workload %s: %w", key, err)
	}
	return &live, nil
}
