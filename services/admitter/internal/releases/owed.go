package releases

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/crashpoint"
	"github.com/sluice-dev/sluice/services/admitter/internal/store"
)

// MaxOwed is the most entries an AdmissionCheck's status.owedReleases
// holds (the API's MaxItems).
const MaxOwed = 1000

// entryKey identifies an owedReleases entry (the list's map keys).
type entryKey struct {
	uid           types.UID
	reservationID string
}

func keyOf(o v1alpha1.OwedRelease) entryKey {
	return entryKey{uid: o.UID, reservationID: o.ReservationID}
}

func owedItem(check string, o v1alpha1.OwedRelease) item {
	return item{
		key: types.NamespacedName{Namespace: o.Namespace, Name: o.Name}, uid: o.UID, check: check,
		reservationID: o.ReservationID, reason: o.Reason, owed: true,
	}
}

// ledger is the only writer of the checks' status.owedReleases. Entries to
// add and remove are collected per check and written by one worker per
// check in one merge patch guarded by the resourceVersion of the newest
// version seen: a namespace deletion of hundreds of workloads costs a few
// writes of the check, not hundreds, and no two writes lose each other's
// entries. The patch carries only owedReleases, so it cannot undo the
// prober's conditions and provider, nor the prober's patch (which carries
// only what it changed) the entries.
type ledger struct {
	t *Tracker
	q workqueue.TypedRateLimitingInterface[string]

	mu sync.Mutex
	// acs is the newest version of each check: the informer's or the
	// answer to our own write.
	acs     map[string]*v1alpha1.AdmissionCheck
	adds    map[string]map[entryKey]v1alpha1.OwedRelease
	removes map[string]map[entryKey]bool
	// waiting are the workloads whose entries are being added, told once
	// they are written; blocked are those that found a check's list full,
	// told when entries leave it.
	waiting map[string]map[entryKey]types.NamespacedName
	blocked map[string]map[types.NamespacedName]bool
}

func newLedger(t *Tracker) *ledger {
	return &ledger{
		t: t,
		q: workqueue.NewTypedRateLimitingQueue(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 30*time.Second)),
		acs:     map[string]*v1alpha1.AdmissionCheck{},
		adds:    map[string]map[entryKey]v1alpha1.OwedRelease{},
		removes: map[string]map[entryKey]bool{},
		waiting: map[string]map[entryKey]types.NamespacedName{},
		blocked: map[string]map[types.NamespacedName]bool{},
	}
}

// holding is what want found of an entry.
type holding int

const (
	held    holding = iota // in the check's status
	queued                 // to be written
	full                   // no room left in the check's status
	noCheck                // the check does not exist
)

// want asks for o to be in check's owedReleases on behalf of the deleted
// workload key, and says where it stands.
func (l *ledger) want(check string, o v1alpha1.OwedRelease, key types.NamespacedName) holding {
	l.mu.Lock()
	defer l.mu.Unlock()
	ac := l.acs[check]
	if ac == nil {
		return noCheck
	}
	e := keyOf(o)
	if slices.ContainsFunc(ac.Status.OwedReleases, func(x v1alpha1.OwedRelease) bool { return keyOf(x) == e }) {
		return held
	}
	if _, ok := l.adds[check][e]; !ok {
		if len(ac.Status.OwedReleases)+len(l.adds[check]) >= MaxOwed {
			setIn(l.blocked, check, key, true)
			return full
		}
		setIn(l.adds, check, e, o)
	}
	setIn(l.waiting, check, e, key)
	l.q.Add(check)
	return queued
}

// remove asks for the entry to leave check's owedReleases, if it is there.
func (l *ledger) remove(check string, e entryKey) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if m := l.adds[check]; m != nil {
		delete(m, e) // settled before it was written
		delete(l.waiting[check], e)
	}
	ac := l.acs[check]
	if ac == nil || !slices.ContainsFunc(ac.Status.OwedReleases, func(x v1alpha1.OwedRelease) bool { return keyOf(x) == e }) {
		return
	}
	setIn(l.removes, check, e, true)
	l.q.Add(check)
}

// observe records a version of a check and reports whether it is the
// newest seen.
func (l *ledger) observe(ac *v1alpha1.AdmissionCheck) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if cur := l.acs[ac.Name]; cur != nil && cur.UID == ac.UID && !store.Newer(ac.ResourceVersion, cur.ResourceVersion) {
		return false
	}
	l.acs[ac.Name] = ac
	if len(l.adds[ac.Name]) > 0 || len(l.removes[ac.Name]) > 0 {
		l.q.Add(ac.Name) // a write that lost to this version tries again now
	}
	return true
}

// forget drops a check that is gone, with whatever was to be written to
// it, and returns the workloads that were waiting for it.
func (l *ledger) forget(check string) []types.NamespacedName {
	l.mu.Lock()
	defer l.mu.Unlock()
	var keys []types.NamespacedName
	for _, k := range l.waiting[check] {
		keys = append(keys, k)
	}
	for k := range l.blocked[check] {
		keys = append(keys, k)
	}
	delete(l.acs, check)
	delete(l.adds, check)
	delete(l.removes, check)
	delete(l.waiting, check)
	delete(l.blocked, check)
	return keys
}

func (l *ledger) run(ctx context.Context) {
	go func() {
		<-ctx.Done()
		l.q.ShutDown()
	}()
	log := ctrl.LoggerFrom(ctx)
	for {
		check, shutdown := l.q.Get()
		if shutdown {
			return
		}
		switch err := l.flush(ctx, check); {
		case err == nil:
			l.q.Forget(check)
		case ctx.Err() == nil:
			log.V(1).Info("write owed releases", "check", check, "error", err.Error())
			l.q.AddRateLimited(check)
		}
		l.q.Done(check)
	}
}

// flush writes what is to be added to and removed from check's
// owedReleases, in one patch.
func (l *ledger) flush(ctx context.Context, check string) error {
	l.mu.Lock()
	base := l.acs[check]
	adds, removes := maps.Clone(l.adds[check]), maps.Clone(l.removes[check])
	l.mu.Unlock()
	if base == nil || (len(adds) == 0 && len(removes) == 0) {
		return nil
	}
	list, added := applyOwed(base.Status.OwedReleases, adds, removes)
	written := base
	if !equality.Semantic.DeepEqual(list, base.Status.OwedReleases) {
		want := base.DeepCopy()
		want.Status.OwedReleases = list
		patch := client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})
		if err := l.t.cfg.Client.Status().Patch(ctx, want, patch); err != nil {
			if apierrors.IsNotFound(err) {
				return nil // the check's deletion event drops it all
			}
			// A conflict waits for the newer version (observe queues the
			// check again) or the backoff, whichever comes first.
			return fmt.Errorf("patch owedReleases of admission check %s: %w", check, err)
		}
		if added > 0 {
			// The Releases are the check's now; their deleted workloads
			// still hold their finalizers.
			crashpoint.Hit("admitter/hand-over-release")
			l.tell(want, added)
		}
		written = want
		l.t.SetCheck(want)
	}
	var told []types.NamespacedName
	l.mu.Lock()
	for e := range adds {
		delete(l.adds[check], e)
		if k, ok := l.waiting[check][e]; ok {
			told = append(told, k)
			delete(l.waiting[check], e)
		}
	}
	for e := range removes {
		delete(l.removes[check], e)
	}
	if len(written.Status.OwedReleases) < MaxOwed {
		for k := range l.blocked[check] {
			told = append(told, k)
		}
		delete(l.blocked, check)
	}
	l.mu.Unlock()
	for _, k := range told {
		l.t.cfg.Changed(k)
	}
	return nil
}

// ReasonReleasesOwed is the reason of the AdmissionCheck's Warning event
// when deleted Workloads hand their Releases over to it.
const ReasonReleasesOwed = "ReleasesOwed"

// tell records on ac that added more Releases are now kept in its
// status, one event per write.
func (l *ledger) tell(ac *v1alpha1.AdmissionCheck, added int) {
	if l.t.cfg.Recorder == nil {
		return
	}
	provider := "unknown"
	if ac.Status.Provider != nil {
		provider = ac.Status.Provider.Name
	}
	who := fmt.Sprintf("%d deleted Workloads", added)
	if added == 1 {
		who = "a deleted Workload"
	}
	l.t.cfg.Recorder.Eventf(ac, nil, "Warning", ReasonReleasesOwed, "Delete",
		"%s stopped waiting for provider %s after %s: the Releases are kept in status.owedReleases (%d entries) and sent when it answers",
		who, provider, l.t.cfg.Wait, len(ac.Status.OwedReleases))
}

// applyOwed returns list without the entries in removes and with those in
// adds it lacks, in the order they were handed over, as far as MaxOwed
// allows, and how many it added. An entry already there is kept as it is.
func applyOwed(list []v1alpha1.OwedRelease, adds map[entryKey]v1alpha1.OwedRelease, removes map[entryKey]bool) ([]v1alpha1.OwedRelease, int) {
	out := make([]v1alpha1.OwedRelease, 0, len(list)+len(adds))
	have := map[entryKey]bool{}
	for _, o := range list {
		if e := keyOf(o); !removes[e] && !have[e] {
			out = append(out, o)
			have[e] = true
		}
	}
	var fresh []v1alpha1.OwedRelease
	for e, o := range adds {
		if !have[e] && !removes[e] {
			fresh = append(fresh, o)
		}
	}
	slices.SortFunc(fresh, func(a, b v1alpha1.OwedRelease) int {
		if c := a.Since.Compare(b.Since.Time); c != 0 {
			return c
		}
		if a.UID != b.UID {
			if a.UID < b.UID {
				return -1
			}
			return 1
		}
		if a.ReservationID < b.ReservationID {
			return -1
		}
		if a.ReservationID > b.ReservationID {
			return 1
		}
		return 0
	})
	n := 0
	for _, o := range fresh {
		if len(out) >= MaxOwed {
			break
		}
		out = append(out, o)
		n++
	}
	if len(out) == 0 {
		return nil, 0
	}
	return out, n
}

func setIn[K comparable, V any](m map[string]map[K]V, check string, k K, v V) {
	if m[check] == nil {
		m[check] = map[K]V{}
	}
	m[check][k] = v
}
