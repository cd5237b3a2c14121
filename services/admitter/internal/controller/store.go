package controller

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

// store is the admitter's view of every Workload: the informer's objects
// and the answers to its own writes, whichever is newer. Writes land here
// at once, so the next scheduling cycle counts a reservation even before
// the informer has seen it — the store never goes back to an older
// resourceVersion. Objects in the store are shared and never mutated.
type store struct {
	mu sync.RWMutex
	m  map[types.NamespacedName]*v1alpha1.Workload
	// deleted remembers, for a while, the uids of workloads seen deleted,
	// so a read that raced the deletion cannot bring one back.
	deleted   map[types.UID]time.Time
	lastPrune time.Time
}

// tombstoneTTL is how long a deleted workload's uid is refused: far longer
// than any read that could have started before the deletion.
const tombstoneTTL = 10 * time.Minute

func newStore() *store {
	return &store{m: map[types.NamespacedName]*v1alpha1.Workload{}, deleted: map[types.UID]time.Time{}}
}

// upsert records wl unless the store holds the same or a newer version
// of it, or saw it deleted. It returns the version it replaced and whether
// wl was recorded.
func (s *store) upsert(wl *v1alpha1.Workload) (*v1alpha1.Workload, bool) {
	key := types.NamespacedName{Namespace: wl.Namespace, Name: wl.Name}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, gone := s.deleted[wl.UID]; gone {
		return s.m[key], false
	}
	prev := s.m[key]
	if prev != nil && prev.UID == wl.UID && !newer(wl.ResourceVersion, prev.ResourceVersion) {
		return prev, false
	}
	s.m[key] = wl
	return prev, true
}

// newer reports whether resourceVersion a is newer than b. Versions that
// do not compare (not integers) count as newer: the informer's word wins.
func newer(a, b string) bool {
	c, err := resourceversion.CompareResourceVersion(a, b)
	if err != nil {
		return true
	}
	return c > 0
}

// remove forgets the workload if the store holds the version with uid
// (or any version when uid is empty) and returns what it held.
func (s *store) remove(key types.NamespacedName, uid types.UID) *v1alpha1.Workload {
	s.mu.Lock()
	defer s.mu.Unlock()
	prev := s.m[key]
	now := time.Now()
	if uid != "" {
		s.deleted[uid] = now
	}
	if now.Sub(s.lastPrune) > tombstoneTTL/10 {
		s.lastPrune = now
		for u, at := range s.deleted {
			if now.Sub(at) > tombstoneTTL {
				delete(s.deleted, u)
			}
		}
	}
	if prev == nil || (uid != "" && prev.UID != uid) {
		return nil
	}
	delete(s.m, key)
	return prev
}

func (s *store) get(key types.NamespacedName) *v1alpha1.Workload {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.m[key]
}

func (s *store) list() []*v1alpha1.Workload {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*v1alpha1.Workload, 0, len(s.m))
	for _, wl := range s.m {
		out = append(out, wl)
	}
	return out
}

// keyLocks serializes the writes to one workload, so that each write
// starts from the store's answer to the previous one.
type keyLocks struct {
	mu    sync.Mutex
	locks map[types.NamespacedName]*keyLock
}

type keyLock struct {
	mu   sync.Mutex
	refs int
}

func newKeyLocks() *keyLocks { return &keyLocks{locks: map[types.NamespacedName]*keyLock{}} }

func (k *keyLocks) lock(key types.NamespacedName) func() {
	k.mu.Lock()
	l := k.locks[key]
	if l == nil {
		l = &keyLock{}
		k.locks[key] = l
	}
	l.refs++
	k.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		k.mu.Lock()
		l.refs--
		if l.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}
