// Package releases sends the Release calls a workload owes its admission
// checks. They are owed durably: the status write that gives a reservation
// up lists them in status.pendingReleases (Owe), and workers call Release
// until each provider acknowledges. Acknowledgements live in memory and are
// written back lazily, pruned from the workload's next status write; after
// a restart the unpruned entries are sent again, which the contract allows
// (Release is idempotent).
package releases

import (
	"context"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/services/admitter/internal/checks"
	"github.com/sluice-dev/sluice/services/admitter/internal/workload"
)

const (
	// DefaultWorkers bounds the Release calls in flight.
	DefaultWorkers = 8
	// callTimeout bounds one Release call.
	callTimeout = 30 * time.Second
)

// item is one Release owed.
type item struct {
	key           types.NamespacedName
	uid           types.UID
	check         string
	reservationID string
	reason        v1alpha1.ReleaseReason
}

// Config is what a Tracker needs.
type Config struct {
	// Checks calls the providers.
	Checks *checks.Pool
	// Check returns the AdmissionCheck of that name, or nil when it is gone.
	Check func(name string) *v1alpha1.AdmissionCheck
	// Acknowledged is told when a Release of the workload was
	// acknowledged (a deleted workload may be waiting for it).
	Acknowledged func(types.NamespacedName)
	// Workers bounds the Release calls in flight.
	Workers int
}

// Tracker tracks the Release calls owed and acknowledged, and sends them.
type Tracker struct {
	cfg   Config
	q     workqueue.TypedRateLimitingInterface[item]
	mu    sync.Mutex
	acked map[item]bool
}

// New returns a Tracker that sends nothing until Run.
func New(cfg Config) *Tracker {
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.Acknowledged == nil {
		cfg.Acknowledged = func(types.NamespacedName) {}
	}
	return &Tracker{
		cfg: cfg,
		q: workqueue.NewTypedRateLimitingQueue(
			workqueue.NewTypedItemExponentialFailureRateLimiter[item](checks.DefaultInitialBackoff, checks.DefaultMaxBackoff)),
		acked: map[item]bool{},
	}
}

// Owe adds to wl's status a Release for each check of its current
// reservation. Call it in the write that gives the reservation up.
func Owe(wl *v1alpha1.Workload, reason v1alpha1.ReleaseReason) {
	id := workload.ReservationID(wl)
	if id == "" {
		return
	}
	for _, st := range wl.Status.AdmissionChecks {
		if slices.ContainsFunc(wl.Status.PendingReleases, func(p v1alpha1.PendingRelease) bool {
			return p.Name == st.Name && p.ReservationID == id
		}) {
			continue
		}
		wl.Status.PendingReleases = append(wl.Status.PendingReleases, v1alpha1.PendingRelease{Name: st.Name, ReservationID: id, Reason: reason})
	}
}

func itemOf(wl *v1alpha1.Workload, p v1alpha1.PendingRelease) item {
	return item{key: workload.Key(wl), uid: wl.UID, check: p.Name, reservationID: p.ReservationID, reason: p.Reason}
}

// Enqueue queues every Release wl owes that is not acknowledged yet.
func (t *Tracker) Enqueue(wl *v1alpha1.Workload) {
	for _, p := range wl.Status.PendingReleases {
		if it := itemOf(wl, p); !t.isAcked(it) {
			t.q.Add(it)
		}
	}
}

func (t *Tracker) isAcked(it item) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.acked[it]
}

func (t *Tracker) ack(it item) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.acked[it] = true
}

// Outstanding reports whether wl owes a Release not acknowledged yet.
func (t *Tracker) Outstanding(wl *v1alpha1.Workload) bool {
	return slices.ContainsFunc(wl.Status.PendingReleases, func(p v1alpha1.PendingRelease) bool { return !t.isAcked(itemOf(wl, p)) })
}

// Prune drops acknowledged entries from status (about to be written for
// wl) and forgets them.
func (t *Tracker) Prune(status *v1alpha1.WorkloadStatus, wl *v1alpha1.Workload) {
	if len(status.PendingReleases) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	status.PendingReleases = slices.DeleteFunc(status.PendingReleases, func(p v1alpha1.PendingRelease) bool {
		return t.acked[itemOf(wl, p)]
	})
}

// Forget drops what is known of a workload that is gone.
func (t *Tracker) Forget(key types.NamespacedName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for it := range t.acked {
		if it.key == key {
			delete(t.acked, it)
		}
	}
}

// Run sends the Release calls owed until ctx ends.
func (t *Tracker) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for range t.cfg.Workers {
		wg.Go(func() { t.work(ctx) })
	}
	<-ctx.Done()
	t.q.ShutDown()
	wg.Wait()
}

func (t *Tracker) work(ctx context.Context) {
	for {
		it, shutdown := t.q.Get()
		if shutdown {
			return
		}
		if t.send(ctx, it) {
			t.q.Forget(it)
			t.ack(it)
			t.cfg.Acknowledged(it.key)
		} else if ctx.Err() == nil {
			t.q.AddRateLimited(it)
		}
		t.q.Done(it)
	}
}

// send calls Release and reports whether the Release is done with:
// acknowledged, not supported by the provider, or owed to a check that no
// longer exists.
func (t *Tracker) send(ctx context.Context, it item) bool {
	log := ctrl.LoggerFrom(ctx).WithValues("check", it.check, "workload", it.key.String())
	ac := t.cfg.Check(it.check)
	if ac == nil {
		log.V(1).Info("release dropped: the admission check is gone")
		return true
	}
	if ac.Status.Provider != nil && !slices.Contains(checks.Capabilities(ac), checksv1.Capability_CAPABILITY_RELEASE) {
		return true
	}
	params, err := checks.Parameters(ac)
	if err != nil {
		log.V(1).Info("release dropped: the admission check's parameters are invalid", "error", err.Error())
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	err = t.cfg.Checks.Release(ctx, ac, &checksv1.ReleaseRequest{
		CheckName: it.check, Parameters: params, EvaluationKey: workload.EvaluationKey(it.uid, it.reservationID, it.check),
		Namespace: it.key.Namespace, Name: it.key.Name, Uid: string(it.uid), Reason: reasonProto(it.reason),
	})
	if err != nil {
		log.V(1).Info("release failed; will retry", "error", err.Error())
		return false
	}
	return true
}

func reasonProto(r v1alpha1.ReleaseReason) checksv1.ReleaseReason {
	switch r {
	case v1alpha1.ReleaseFinished:
		return checksv1.ReleaseReason_RELEASE_REASON_FINISHED
	case v1alpha1.ReleaseDeleted:
		return checksv1.ReleaseReason_RELEASE_REASON_DELETED
	default:
		return checksv1.ReleaseReason_RELEASE_REASON_EVICTED
	}
}
