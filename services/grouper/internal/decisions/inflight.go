package decisions

import (
	"sync"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	"github.com/sluice-dev/sluice/services/grouper/internal/workload"
)

// Ungates counts, per workload, the ungate patches sent and not answered
// yet. A stop report must wait for them: the pods it judges stopped by
// their gate may lose it a moment later, and then run on quota the report
// gave back.
type Ungates struct {
	mu sync.Mutex
	m  map[workload.Key]int
}

// NewUngates returns an Ungates with none in flight.
func NewUngates() *Ungates {
	return &Ungates{m: map[workload.Key]int{}}
}

// Begin counts an ungate of a pod of key under admission, unless the
// decision in force (read from decisions now) is no longer that admission:
// an eviction or a deletion decided meanwhile must not be overtaken by an
// ungate built from the admission before it. The check and the count are
// made under one lock, which Busy takes too: a stop check that finds no
// ungate in flight comes after every ungate that saw the admission still
// in force had counted itself.
func (u *Ungates) Begin(key workload.Key, admission *admitterv1.Decision, decisions *Store) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	current, ok := decisions.Get(key)
	if !ok || current.Decision.GetAction() != admitterv1.Decision_ACTION_ADMIT ||
		current.Decision.GetReservationId() != admission.GetReservationId() ||
		current.Decision.GetWorkload().GetUid() != admission.GetWorkload().GetUid() {
		return false
	}
	u.m[key]++
	return true
}

// End takes back what Begin counted.
func (u *Ungates) End(key workload.Key) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.m[key]--; u.m[key] <= 0 {
		delete(u.m, key)
	}
}

// Busy reports whether an ungate of a pod of key is in flight.
func (u *Ungates) Busy(key workload.Key) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.m[key] > 0
}
