// Package podstate holds what the grouper remembers of each pod between
// reconciles.
package podstate

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/services/grouper/internal/podpatch"
	"github.com/sluice-dev/sluice/services/grouper/internal/workload"
)

// State is what the grouper remembers about one pod. It lives in memory
// only: after a restart pods are resubmitted (the admitter answers
// AlreadyExists) and the cache tells which pods are ungated.
type State struct {
	UID types.UID
	// Workload the pod belongs to, so a pod gone from the cache still
	// wakes its workload's stop check.
	Workload workload.Key
	// Submitted: SubmitWorkload succeeded for this pod's workload, in
	// LocalQueue Queue.
	Submitted bool
	Queue     string
	// Ungated: the ungate patch succeeded, even if the cache lags.
	Ungated bool
	// Reported: the finish of the pod was reported.
	Reported bool
	// FinalizerRemoved: sluice's finalizer was removed, even if the cache
	// lags. A pod event from before the removal must not send it again: its
	// patch would fail its test and be retried for nothing.
	FinalizerRemoved bool
	// Evicted: the pod was deleted for an eviction.
	Evicted bool
	// Released: the pod was found released by someone else (gate and
	// finalizer removed together) and counted.
	Released bool
	// Warned: a Warning event for a problem that only a change of the pod
	// can fix was already emitted.
	Warned bool
	// Misfit is the last reason told (fit.Verdict.Key) why the pod does
	// not fit its pod set, so each is told once.
	Misfit string
}

// Store holds State by pod name; an entry for an older pod of the same
// name is discarded.
type Store struct {
	mu sync.Mutex
	m  map[types.NamespacedName]State
}

// NewStore returns an empty Store.
func NewStore() *Store {
	return &Store{m: map[types.NamespacedName]State{}}
}

// Load returns the state of the pod of name and uid; a fresh one when the
// pod is new.
func (s *Store) Load(name types.NamespacedName, uid types.UID) State {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.m[name]
	if !ok || st.UID != uid {
		return State{UID: uid}
	}
	return st
}

// Store keeps st as the state of the pod of name.
func (s *Store) Store(name types.NamespacedName, st State) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[name] = st
}

// Forget drops the pod's state and returns the workload it belonged to.
func (s *Store) Forget(name types.NamespacedName) (workload.Key, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.m[name]
	delete(s.m, name)
	return st.Workload, ok && st.Workload != (workload.Key{})
}

// ResubmitAll makes every pod submit again on its next look: the grouper
// holds no decision for it after a snapshot, and the admitter answers a
// repeated submission from memory.
func (s *Store) ResubmitAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, st := range s.m {
		st.Submitted = false
		s.m[name] = st
	}
}

// AlreadyUngated reports whether pod is ungated: without the gate in the
// cache, or ungated by this grouper while the cache lags.
func (s *Store) AlreadyUngated(pod *corev1.Pod) bool {
	if !podpatch.HasGate(pod) {
		return true
	}
	return s.Load(client.ObjectKeyFromObject(pod), pod.UID).Ungated
}
