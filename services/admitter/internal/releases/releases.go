// Package releases sends the Release calls a workload owes its admission
// checks. They are owed durably: the status write that gives a reservation
// up lists them in status.pendingReleases (Owe), and workers call Release
// until each provider acknowledges. Acknowledgements live in memory and are
// written back lazily, pruned from the workload's next status write; after
// a restart the unpruned entries are sent again, which the contract allows
// (Release is idempotent).
//
// A deleted workload does not wait for an unreachable provider for ever:
// once its wait is over (HandOver) its outstanding Releases move to the
// AdmissionCheck's status.owedReleases, which the Tracker sends the same
// way and empties as they are acknowledged.
package releases

import (
	"context"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/services/admitter/internal/checks"
	"github.com/sluice-dev/sluice/services/admitter/internal/metrics"
	"github.com/sluice-dev/sluice/services/admitter/internal/shrink"
	"github.com/sluice-dev/sluice/services/admitter/internal/workload"
)

const (
	// DefaultWorkers bounds the Release calls in flight.
	DefaultWorkers = 8
	// DefaultWait is how long a deleted workload waits for its providers
	// before its outstanding Releases are handed over to its checks.
	DefaultWait = time.Minute
	// callTimeout bounds one Release call.
	callTimeout = 30 * time.Second
)

// item is one Release owed: by a workload (its status.pendingReleases) or,
// with owed set, held in the check's status.owedReleases for a workload
// that is gone. The two are distinct items even for the same Release, so
// that each source is settled on its own.
type item struct {
	key           types.NamespacedName
	uid           types.UID
	check         string
	reservationID string
	reason        v1alpha1.ReleaseReason
	owed          bool
}

func (it item) entry() entryKey { return entryKey{uid: it.uid, reservationID: it.reservationID} }

// Config is what a Tracker needs.
type Config struct {
	// Checks calls the providers.
	Checks *checks.Pool
	// Check returns the AdmissionCheck of that name, or nil when it is gone.
	Check func(name string) *v1alpha1.AdmissionCheck
	// Client writes AdmissionCheck status (status.owedReleases).
	Client client.Client
	// Recorder tells on the AdmissionCheck of the Releases handed over to
	// it: the Workloads' own events cannot be recorded in a namespace
	// being deleted. Nil records none.
	Recorder events.EventRecorder
	// Metrics are the admitter's collectors; nil records nothing.
	Metrics *metrics.Metrics
	// Changed is told when something a deleted workload may be waiting
	// for happened: a Release of it was acknowledged, failed for the
	// first time, or was written to its check's status.owedReleases.
	Changed func(types.NamespacedName)
	// Workers bounds the Release calls in flight.
	Workers int
	// Wait is how long a deleted workload waits, from its
	// deletionTimestamp, for providers that fail its Releases before
	// HandOver moves them to the checks; zero hands them over at the
	// first failure.
	Wait time.Duration
}

// Tracker tracks the Release calls owed and acknowledged, and sends them.
type Tracker struct {
	cfg Config
	q   workqueue.TypedRateLimitingInterface[item]

	mu sync.Mutex
	// live are the items still owed; an item dequeued that is not live
	// any more (its workload or its entry gone) is dropped.
	live  map[item]bool
	acked map[item]bool
	// failed are the items whose Release failed at least once in this
	// process: only those may be handed over.
	failed map[item]bool
	// fullNoted are the workloads already told the owedReleases of a
	// check are full, so the event is not repeated on every look.
	fullNoted map[types.NamespacedName]bool

	ledger *ledger
}

// New returns a Tracker that sends nothing until Run.
func New(cfg Config) *Tracker {
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.Changed == nil {
		cfg.Changed = func(types.NamespacedName) {}
	}
	if cfg.Check == nil {
		cfg.Check = func(string) *v1alpha1.AdmissionCheck { return nil }
	}
	t := &Tracker{
		cfg: cfg,
		q: workqueue.NewTypedRateLimitingQueue(
			workqueue.NewTypedItemExponentialFailureRateLimiter[item](checks.DefaultInitialBackoff, checks.DefaultMaxBackoff)),
		live:      map[item]bool{},
		acked:     map[item]bool{},
		failed:    map[item]bool{},
		fullNoted: map[types.NamespacedName]bool{},
	}
	t.ledger = newLedger(t)
	return t
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
		it := itemOf(wl, p)
		t.mu.Lock()
		add := !t.acked[it]
		if add {
			t.live[it] = true
		}
		t.mu.Unlock()
		if add {
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
	shrink.Delete(&t.live, it)
	shrink.Delete(&t.failed, it)
}

// fail records a failed attempt and reports whether it was the first.
func (t *Tracker) fail(it item) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.failed[it] || !t.live[it] {
		return false
	}
	t.failed[it] = true
	return true
}

func (t *Tracker) isLive(it item) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.live[it]
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

// Forget drops what is known of a workload that is gone; its Releases
// still queued are not sent (those handed over are its checks' now).
func (t *Tracker) Forget(key types.NamespacedName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, m := range []map[item]bool{t.acked, t.live, t.failed} {
		for it := range m {
			if it.key == key && !it.owed {
				delete(m, it)
			}
		}
	}
	shrink.Delete(&t.fullNoted, key)
}

// Run sends the Release calls owed, and writes the checks' owedReleases,
// until ctx ends.
func (t *Tracker) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for range t.cfg.Workers {
		wg.Go(func() { t.work(ctx) })
	}
	wg.Go(func() { t.ledger.run(ctx) })
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
		t.process(ctx, it)
		t.q.Done(it)
	}
}

func (t *Tracker) process(ctx context.Context, it item) {
	if !t.isLive(it) {
		t.q.Forget(it) // settled meanwhile, or its workload or entry is gone
		return
	}
	if t.send(ctx, it) {
		t.q.Forget(it)
		t.ack(it)
		// Either source settles the Release: an entry handed over for it
		// goes too (a crash before that removal sends it once more).
		t.ledger.remove(it.check, it.entry())
		if !it.owed {
			t.cfg.Changed(it.key)
		}
		return
	}
	if ctx.Err() != nil {
		return
	}
	if t.fail(it) && !it.owed {
		t.cfg.Changed(it.key)
	}
	t.q.AddRateLimited(it)
}

// send calls Release and reports whether the Release is done with:
// acknowledged, not supported by the provider, or owed to a check that no
// longer exists.
func (t *Tracker) send(ctx context.Context, it item) bool {
	log := ctrl.LoggerFrom(ctx).WithValues("check", it.check, "workload", it.key.String(), "owed", it.owed)
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
