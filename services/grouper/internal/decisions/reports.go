package decisions

import (
	"sync"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	"github.com/sluice-dev/sluice/services/grouper/internal/workload"
)

// Reports remembers, per workload, what the grouper reported of its
// decisions: which EVICT or DELETE decision was answered with a stop
// report, and the started counts last reported for its admission, so
// each is reported once. It lives in memory only: after a restart, or a
// snapshot from a new leader, everything is reported again (the admitter
// may have lost what it was told).
type Reports struct {
	mu sync.Mutex
	m  map[workload.Key]reported
}

type reported struct {
	// stop identifies the stop decision answered (see stopID).
	stop string
	// admission is the workload uid and reservation the started counts
	// are of; counts is the last report of them, printed; done: it said
	// every pod is ready, and the admitter took it.
	admission string
	counts    string
	done      bool
}

// NewReports returns a Reports that remembers nothing.
func NewReports() *Reports {
	return &Reports{m: map[workload.Key]reported{}}
}

func stopID(d *admitterv1.Decision) string {
	return d.GetAction().String() + "/" + d.GetWorkload().GetUid() + "/" + d.GetReservationId()
}

func admissionID(d *admitterv1.Decision) string {
	return d.GetWorkload().GetUid() + "/" + d.GetReservationId()
}

// Stopped reports whether the stop decision d of workload k was answered
// with a stop report.
func (r *Reports) Stopped(k workload.Key, d *admitterv1.Decision) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[k].stop == stopID(d)
}

// MarkStopped records that the stop decision d of workload k was answered.
func (r *Reports) MarkStopped(k workload.Key, d *admitterv1.Decision) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.m[k]
	e.stop = stopID(d)
	r.m[k] = e
}

// StartedChanged reports whether started counts differ from what was last
// reported for the admission d of workload k, and that admission's
// reports are not over.
func (r *Reports) StartedChanged(k workload.Key, d *admitterv1.Decision, counts string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	last := r.m[k]
	if last.admission != admissionID(d) {
		return true
	}
	return !last.done && last.counts != counts
}

// MarkStarted records the started counts reported for the admission d of
// workload k; done says they were the last.
func (r *Reports) MarkStarted(k workload.Key, d *admitterv1.Decision, counts string, done bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.m[k]
	e.admission, e.counts, e.done = admissionID(d), counts, done
	r.m[k] = e
}

// Forget drops what was reported of workload k.
func (r *Reports) Forget(k workload.Key) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m, k)
}

// Reset forgets every report.
func (r *Reports) Reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.m = map[workload.Key]reported{}
}
