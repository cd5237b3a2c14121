// Package deadline acts on start-up deadlines when they fall, whether or
// not anything else happens then: it keeps one timer per admitted
// workload whose ClusterQueue has a deadline, and at the deadline asks the
// lifecycle Writer to evict the workload unless its pods all started. The
// deadline itself is read from the Workload (its Admitted condition's
// transition time plus the timeout), so the timers are only a cache:
// after a restart the admitter enqueues every workload and they are
// computed again.
package deadline

import (
	"context"
	"errors"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"

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

// Watcher evicts workloads that miss their start-up deadline.
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

// process evicts the workload if its deadline passed, and otherwise
// returns how long until it falls (0: no deadline to keep).
func (w *Watcher) process(ctx context.Context, key types.NamespacedName) time.Duration {
	wl := w.cfg.Store.Get(key)
	if wl == nil || wl.Status.Admission == nil {
		return 0
	}
	at, due := startup.Due(wl, w.cfg.Policy(wl.Status.Admission.ClusterQueue))
	if !due {
		return 0
	}
	if wait := time.Until(at); wait > 0 {
		return wait
	}
	err := w.cfg.Writer.MissDeadline(ctx, key)
	switch {
	case err == nil:
		return 0
	case !errors.Is(err, lifecycle.ErrStale):
		ctrl.LoggerFrom(ctx).Error(err, "evict a workload that missed its start-up deadline", "workload", key.String())
	}
	return retryAfter
}
