// Package deadline acts on the deadlines of admitted workloads when they
// fall, whether or not anything else happens then: the start-up deadline
// of a ClusterQueue with one (evict the workload unless its pods all
// started) and a workload's maximum execution time (deactivate and evict
// it). It keeps one timer per admitted workload with a deadline to keep.
// Both deadlines are read from the Workload (its Admitted condition's
// transition time, the queue's timeout, the workload's remaining
// execution time), so the timers are only a cache: after a restart the
// admitter enqueues every workload and they are computed again.
package deadline

import (
	"context"
	"errors"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/services/admitter/internal/lifecycle"
	"github.com/sluice-dev/sluice/services/admitter/internal/startup"
	"github.com/sluice-dev/sluice/services/admitter/internal/store"
)

// retryAfter is when a failed eviction is tried again.
const retryAfter = time.Second

// Config is what a Watcher needs.
type Config struct {
	Store  *store.Store
	Writer *lifecycle.Writer
	// Policy is the start-up deadline policy of a ClusterQueue.
	Policy func(clusterQueue string) startup.Policy
}

// Watcher evicts workloads whose deadlines fall.
type Watcher struct {
	cfg Config
	q   workqueue.TypedDelayingInterface[types.NamespacedName]
}

// New returns a Watcher that acts on nothing until Run.
func New(cfg Config) *Watcher {
	return &Watcher{cfg: cfg, q: workqueue.NewTypedDelayingQueue[types.NamespacedName]()}
}

// Enqueue asks for a look at the workload's deadline.
func (w *Watcher) Enqueue(key types.NamespacedName) { w.q.Add(key) }

// Run looks at the enqueued workloads until ctx ends.
func (w *Watcher) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			key, shutdown := w.q.Get()
			if shutdown {
				return
			}
			after := w.process(ctx, key)
			w.q.Done(key)
			if after > 0 && ctx.Err() == nil {
				w.q.AddAfter(key, after)
			}
		}
	})
	<-ctx.Done()
	w.q.ShutDown()
	wg.Wait()
}

// kept is a deadline of a workload: when it falls and what then.
type kept struct {
	at time.Time
	// fall acts on the deadline; it checks again, under the workload's
	// lock, that it is due.
	fall func(context.Context, types.NamespacedName) error
	// what names the action, for the log.
	what string
}

// deadlinesOf are wl's deadlines in force, the one that wins when both
// fell first: a workload out of execution time is deactivated, not
// requeued for a missed start.
func (w *Watcher) deadlinesOf(wl *v1alpha1.Workload) []kept {
	var ds []kept
	if at, ok := lifecycle.ExecutionDeadline(wl); ok {
		ds = append(ds, kept{at: at, fall: w.cfg.Writer.ExceedExecutionTime,
			what: "deactivate a workload that ran out of its maximum execution time"})
	}
	if at, due := startup.Due(wl, w.cfg.Policy(wl.Status.Admission.ClusterQueue)); due {
		ds = append(ds, kept{at: at, fall: w.cfg.Writer.MissDeadline,
			what: "evict a workload that missed its start-up deadline"})
	}
	return ds
}

// process acts on the first of the workload's deadlines that fell, and
// otherwise returns how long until the next falls (0: no deadline to
// keep). What an action writes brings the workload back for a new look.
func (w *Watcher) process(ctx context.Context, key types.NamespacedName) time.Duration {
	wl := w.cfg.Store.Get(key)
	if wl == nil || wl.Status.Admission == nil {
		return 0
	}
	var next time.Duration
	for _, d := range w.deadlinesOf(wl) {
		wait := time.Until(d.at)
		if wait <= 0 {
			return w.act(ctx, key, d)
		}
		if next == 0 || wait < next {
			next = wait
		}
	}
	return next
}

// act acts on deadline d of the workload key, which fell, and returns
// when to try again (0: done).
func (w *Watcher) act(ctx context.Context, key types.NamespacedName, d kept) time.Duration {
	err := d.fall(ctx, key)
	switch {
	case err == nil:
		return 0
	case !errors.Is(err, lifecycle.ErrStale):
		ctrl.LoggerFrom(ctx).Error(err, d.what, "workload", key.String())
	}
	return retryAfter
}
