package controller

import (
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/types"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	"github.com/sluice-dev/sluice/services/grouper/internal/workload"
)

// decisionEntry is a decision in force and when it was first received.
type decisionEntry struct {
	decision *admitterv1.Decision
	received time.Time
}

// decisionStore holds the decisions in force by workload. Decisions for
// pods the cache has not seen yet wait here until the pods show up.
type decisionStore struct {
	mu sync.RWMutex
	m  map[workload.Key]decisionEntry
}

func newDecisionStore() *decisionStore {
	return &decisionStore{m: map[workload.Key]decisionEntry{}}
}

func keyOf(d *admitterv1.Decision) workload.Key {
	return workload.Key{Namespace: d.GetWorkload().GetNamespace(), Name: d.GetWorkload().GetName()}
}

func (s *decisionStore) get(k workload.Key) (decisionEntry, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	e, ok := s.m[k]
	return e, ok
}

// put records d, keeping the first receive time of an identical decision
// so that repeats do not reset the decision-to-ungate clock.
func (s *decisionStore) put(d *admitterv1.Decision, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.putLocked(s.m, d, now)
}

func (s *decisionStore) putLocked(into map[workload.Key]decisionEntry, d *admitterv1.Decision, now time.Time) {
	k := keyOf(d)
	if old, ok := s.m[k]; ok && proto.Equal(old.decision, d) {
		into[k] = old
		return
	}
	into[k] = decisionEntry{decision: d, received: now}
}

// keys lists the workloads whose decision matches.
func (s *decisionStore) keys(match func(*admitterv1.Decision) bool) []workload.Key {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []workload.Key
	for k, e := range s.m {
		if match(e.decision) {
			out = append(out, k)
		}
	}
	return out
}

func (s *decisionStore) forget(k workload.Key) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, k)
}

// replace makes decisions the only ones in force.
func (s *decisionStore) replace(decisions []*admitterv1.Decision, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := make(map[workload.Key]decisionEntry, len(decisions))
	for _, d := range decisions {
		s.putLocked(next, d, now)
	}
	s.m = next
}

// podState is what the grouper remembers about one pod. It lives in
// memory only: after a restart pods are resubmitted (the admitter answers
// AlreadyExists) and the cache tells which pods are ungated.
type podState struct {
	uid types.UID
	// workload the pod belongs to, so a pod gone from the cache still
	// wakes its workload's stop check.
	workload workload.Key
	// submitted: SubmitWorkload succeeded for this pod's workload, in
	// LocalQueue queue.
	submitted bool
	queue     string
	// ungated: the ungate patch succeeded, even if the cache lags.
	ungated bool
	// reported: the finish of the pod was reported.
	reported bool
	// evicted: the pod was deleted for an eviction.
	evicted bool
	// released: the pod was found released by someone else (gate and
	// finalizer removed together) and counted.
	released bool
	// warned: a Warning event for a problem that only a change of the pod
	// can fix was already emitted.
	warned bool
	// misfit is the last reason told (fit.Verdict.Key) why the pod does
	// not fit its pod set, so each is told once.
	misfit string
}

// podStates holds podState by pod name; an entry for an older pod of the
// same name is discarded.
type podStates struct {
	mu sync.Mutex
	m  map[types.NamespacedName]podState
}

func newPodStates() *podStates {
	return &podStates{m: map[types.NamespacedName]podState{}}
}

func (s *podStates) load(name types.NamespacedName, uid types.UID) podState {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.m[name]
	if !ok || st.uid != uid {
		return podState{uid: uid}
	}
	return st
}

func (s *podStates) store(name types.NamespacedName, st podState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[name] = st
}

// forget drops the pod's state and returns the workload it belonged to.
func (s *podStates) forget(name types.NamespacedName) (workload.Key, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.m[name]
	delete(s.m, name)
	return st.workload, ok && st.workload != (workload.Key{})
}

// resubmitAll makes every pod submit again on its next look: the grouper
// holds no decision for it after a snapshot, and the admitter answers a
// repeated submission from memory.
func (s *podStates) resubmitAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, st := range s.m {
		st.submitted = false
		s.m[name] = st
	}
}

// stopReports remembers which EVICT or DELETE decisions were answered
// with a stop report, so a workload is reported once per decision.
type stopReports struct {
	mu sync.Mutex
	m  map[workload.Key]string
}

func newStopReports() *stopReports { return &stopReports{m: map[workload.Key]string{}} }

func stopID(d *admitterv1.Decision) string {
	return d.GetAction().String() + "/" + d.GetWorkload().GetUid() + "/" + d.GetReservationId()
}

func (s *stopReports) reported(k workload.Key, d *admitterv1.Decision) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[k] == stopID(d)
}

func (s *stopReports) markReported(k workload.Key, d *admitterv1.Decision) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[k] = stopID(d)
}

func (s *stopReports) forget(k workload.Key) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, k)
}

// reset forgets every report: after a snapshot the admitter may have lost
// what it was told.
func (s *stopReports) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m = map[workload.Key]string{}
}
