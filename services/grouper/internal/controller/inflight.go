package controller

import (
	"sync"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	"github.com/sluice-dev/sluice/services/grouper/internal/workload"
)

// ungatesInFlight counts, per workload, the ungate patches sent and not
// answered yet. A stop report must wait for them: the pods it judges
// stopped by their gate may lose it a moment later, and then run on quota
// the report gave back.
type ungatesInFlight struct {
	mu sync.Mutex
	m  map[workload.Key]int
}

func newUngatesInFlight() *ungatesInFlight {
	return &ungatesInFlight{m: map[workload.Key]int{}}
}

// begin counts an ungate of a pod of key under admission, unless the
// decision in force (read from decisions now) is no longer that admission:
// an eviction or a deletion decided meanwhile must not be overtaken by an
// ungate built from the admission before it. The check and the count are
// made under one lock, which busy takes too: a stop check that finds no
// ungate in flight comes after every ungate that saw the admission still
// in force had counted itself.
func (u *ungatesInFlight) begin(key workload.Key, admission *admitterv1.Decision, decisions *decisionStore) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	current, ok := decisions.get(key)
	if !ok || current.decision.GetAction() != admitterv1.Decision_ACTION_ADMIT ||
		current.decision.GetReservationId() != admission.GetReservationId() ||
		current.decision.GetWorkload().GetUid() != admission.GetWorkload().GetUid() {
		return false
	}
	u.m[key]++
	return true
}

// end takes back what begin counted.
func (u *ungatesInFlight) end(key workload.Key) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.m[key]--; u.m[key] <= 0 {
		delete(u.m, key)
	}
}

// busy reports whether an ungate of a pod of key is in flight.
func (u *ungatesInFlight) busy(key workload.Key) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.m[key] > 0
}
