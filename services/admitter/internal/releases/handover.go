package releases

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/services/admitter/internal/workload"
)

// Stage is where a deleted workload's outstanding Releases stand.
type Stage int

const (
	// Waiting: the wait is not over (look again at Until) or a Release
	// has not failed in this process yet (Changed tells when one does).
	Waiting Stage = iota
	// Writing: the Releases are being written to their checks' status;
	// Changed tells when.
	Writing
	// Full: a check's owedReleases has no room; the deletion waits for
	// the provider as before, and Changed tells when room is made.
	Full
	// HandedOver: every outstanding Release is in its check's
	// owedReleases; the workload no longer holds them.
	HandedOver
)

// Handover says where a deleted workload's outstanding Releases stand.
type Handover struct {
	Stage Stage
	// Until is when the wait is over (Waiting); zero when the wait is
	// over but a Release has not failed yet.
	Until time.Time
	// Checks are the checks concerned: those handed to (HandedOver), or
	// those full (Full).
	Checks []Owed
	// FirstFull is set the first time this workload found a list full.
	FirstFull bool
}

// Owed is a Release a deleted workload owes a check.
type Owed struct {
	Check         string
	Provider      string
	ReservationID string
}

// Wait is how long a deleted workload waits for failing providers.
func (t *Tracker) Wait() time.Duration { return t.cfg.Wait }

// HandOver moves the outstanding Releases of wl, a deleted workload, to
// their checks' status.owedReleases once its wait is over — Wait after
// its deletionTimestamp — and every one of them failed at least once in
// this process (so that a restarted admitter tries once before it gives
// up waiting). Call it again whenever Changed names wl, and at Until.
func (t *Tracker) HandOver(wl *v1alpha1.Workload, now time.Time) Handover {
	if wl.DeletionTimestamp == nil {
		return Handover{Stage: Waiting}
	}
	if due := wl.DeletionTimestamp.Add(t.cfg.Wait); now.Before(due) {
		return Handover{Stage: Waiting, Until: due}
	}
	var out []item
	t.mu.Lock()
	for _, p := range wl.Status.PendingReleases {
		it := itemOf(wl, p)
		if t.acked[it] {
			continue
		}
		if !t.failed[it] {
			t.mu.Unlock()
			return Handover{Stage: Waiting}
		}
		out = append(out, it)
	}
	t.mu.Unlock()
	key := workload.Key(wl)
	stage := HandedOver
	var handed, fulls []Owed
	for _, it := range out {
		o := Owed{Check: it.check, ReservationID: it.reservationID, Provider: t.providerOf(it.check)}
		switch t.ledger.want(it.check, v1alpha1.OwedRelease{
			Namespace: key.Namespace, Name: key.Name, UID: it.uid, ReservationID: it.reservationID,
			Reason: it.reason, Since: metav1.NewTime(now),
		}, key) {
		case held:
			handed = append(handed, o)
		case full:
			fulls = append(fulls, o)
		case queued:
			stage = min(stage, Writing)
		case noCheck:
			// Its next send finds the check gone and settles it.
			t.q.Add(it)
			stage = min(stage, Writing)
		}
	}
	if len(fulls) > 0 {
		t.mu.Lock()
		first := !t.fullNoted[key]
		t.fullNoted[key] = true
		t.mu.Unlock()
		return Handover{Stage: Full, Checks: fulls, FirstFull: first}
	}
	if stage != HandedOver {
		return Handover{Stage: stage}
	}
	return Handover{Stage: HandedOver, Checks: handed}
}

func (t *Tracker) providerOf(check string) string {
	if ac := t.cfg.Check(check); ac != nil && ac.Status.Provider != nil {
		return ac.Status.Provider.Name
	}
	return ""
}

// SetCheck records a version of an AdmissionCheck (from the informer or
// from a write) and queues the Releases its owedReleases hold.
func (t *Tracker) SetCheck(ac *v1alpha1.AdmissionCheck) {
	if !t.ledger.observe(ac) {
		return
	}
	entries := map[entryKey]bool{}
	var add []item
	t.mu.Lock()
	for _, o := range ac.Status.OwedReleases {
		it := owedItem(ac.Name, o)
		entries[it.entry()] = true
		if !t.acked[it] && !t.live[it] {
			t.live[it] = true
			add = append(add, it)
		}
	}
	// Entries removed (acknowledged) are forgotten.
	t.dropOwedLocked(ac.Name, func(it item) bool { return !entries[it.entry()] })
	t.mu.Unlock()
	for _, it := range add {
		t.q.Add(it)
	}
	if t.cfg.Metrics != nil {
		t.cfg.Metrics.OwedReleases.WithLabelValues(ac.Name).Set(float64(len(ac.Status.OwedReleases)))
	}
}

// DeleteCheck drops an AdmissionCheck that is gone, with the Releases its
// owedReleases held: there is no provider left to tell.
func (t *Tracker) DeleteCheck(name string) {
	waiting := t.ledger.forget(name)
	var settle []item
	t.mu.Lock()
	t.dropOwedLocked(name, func(item) bool { return true })
	for it := range t.live {
		if it.check == name {
			settle = append(settle, it) // a send finds the check gone
		}
	}
	t.mu.Unlock()
	for _, it := range settle {
		t.q.Add(it)
	}
	for _, k := range waiting {
		t.cfg.Changed(k)
	}
	if t.cfg.Metrics != nil {
		t.cfg.Metrics.OwedReleases.DeleteLabelValues(name)
	}
}

func (t *Tracker) dropOwedLocked(check string, drop func(item) bool) {
	for _, m := range []map[item]bool{t.acked, t.live, t.failed} {
		for it := range m {
			if it.owed && it.check == check && drop(it) {
				delete(m, it)
			}
		}
	}
}
