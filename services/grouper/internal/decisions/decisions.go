// Package decisions holds what the admitter decided, as the grouper holds
// it: the decision in force for each workload, and the ungates in flight
// under an admission, which a newer decision must not be overtaken by and
// which a stop report waits for.
package decisions

import (
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	"github.com/sluice-dev/sluice/services/grouper/internal/workload"
)

// Entry is a decision in force and when it was first received.
type Entry struct {
	Decision *admitterv1.Decision
	Received time.Time
}

// Store holds the decisions in force by workload. Decisions for pods the
// cache has not seen yet wait here until the pods show up.
type Store struct {
	mu sync.RWMutex
	m  map[workload.Key]Entry
}

// NewStore returns an empty Store.
func NewStore() *Store {
	return &Store{m: map[workload.Key]Entry{}}
}

// KeyOf is the workload d is about.
func KeyOf(d *admitterv1.Decision) workload.Key {
	return workload.Key{Namespace: d.GetWorkload().GetNamespace(), Name: d.GetWorkload().GetName()}
}

// Get returns the decision in force for workload k.
func (s *Store) Get(k workload.Key) (Entry, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	e, ok := s.m[k]
	return e, ok
}

// Put records d, keeping the first receive time of an identical decision
// so that repeats do not reset the decision-to-ungate clock.
func (s *Store) Put(d *admitterv1.Decision, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.putLocked(s.m, d, now)
}

func (s *Store) putLocked(into map[workload.Key]Entry, d *admitterv1.Decision, now time.Time) {
	k := KeyOf(d)
	if old, ok := s.m[k]; ok && proto.Equal(old.Decision, d) {
		into[k] = old
		return
	}
	into[k] = Entry{Decision: d, Received: now}
}

// Keys lists the workloads whose decision matches.
func (s *Store) Keys(match func(*admitterv1.Decision) bool) []workload.Key {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []workload.Key
	for k, e := range s.m {
		if match(e.Decision) {
			out = append(out, k)
		}
	}
	return out
}

// Forget drops the decision of workload k.
func (s *Store) Forget(k workload.Key) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, k)
}

// Replace makes decisions the only ones in force.
func (s *Store) Replace(decisions []*admitterv1.Decision, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := make(map[workload.Key]Entry, len(decisions))
	for _, d := range decisions {
		s.putLocked(next, d, now)
	}
	s.m = next
}

// Stopping reports whether d asks for the workload's pods to stop.
func Stopping(d *admitterv1.Decision) bool {
	switch d.GetAction() {
	case admitterv1.Decision_ACTION_EVICT, admitterv1.Decision_ACTION_DELETE:
		return true
	}
	return false
}

// HasDeadline reports whether d admits with a start-up deadline: the
// admitter then waits for started counts.
func HasDeadline(d *admitterv1.Decision) bool {
	return d.GetAction() == admitterv1.Decision_ACTION_ADMIT && d.GetStartBy() != nil
}
