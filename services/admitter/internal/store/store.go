// Package store is the admitter's view of every Workload it acts on: the
// informer's objects and the answers to its own writes, whichever is newer,
// plus the per-workload locks that order its writes. Writes land here at
// once, so the next decision about a workload starts from the admitter's
// last write even before the informer has seen it; the store never goes
// back to an older resourceVersion. Finished workloads are retired: only
// their uid and resourceVersion are kept, so nothing older brings them
// back, until the Workload is deleted.
package store

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/services/admitter/internal/shrink"
	"github.com/sluice-dev/sluice/services/admitter/internal/workload"
)

// Store holds the newest version of every live Workload. Objects in the
// store are shared and never mutated. It is safe for concurrent use.
type Store struct {
	mu sync.RWMutex
	m  map[types.NamespacedName]*v1alpha1.Workload
	// byUID indexes m by uid, for providers that name a workload by its
	// evaluation key.
	byUID map[types.UID]types.NamespacedName
	// retired are the finished workloads dropped from m.
	retired map[types.NamespacedName]mark
	// deleted remembers, for a while, the uids of workloads seen deleted,
	// so a read that raced the deletion cannot bring one back.
	deleted map[types.UID]time.Time
}

type mark struct {
	uid             types.UID
	resourceVersion string
}

// tombstoneTTL is how long a deleted workload's uid is refused: far longer
// than any read that could have started before the deletion.
const tombstoneTTL = 10 * time.Minute

// New returns an empty Store.
func New() *Store {
	return &Store{
		m:       map[types.NamespacedName]*v1alpha1.Workload{},
		byUID:   map[types.UID]types.NamespacedName{},
		retired: map[types.NamespacedName]mark{},
		deleted: map[types.UID]time.Time{},
	}
}

// Upsert records wl unless the store holds the same or a newer version
// of it, or saw it deleted. It returns the version it replaced and whether
// wl was recorded. A finished workload that is not being deleted is
// recorded as retired: Get no longer returns it.
func (s *Store) Upsert(wl *v1alpha1.Workload) (*v1alpha1.Workload, bool) {
	key := types.NamespacedName{Namespace: wl.Namespace, Name: wl.Name}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, gone := s.deleted[wl.UID]; gone {
		return s.m[key], false
	}
	if r, ok := s.retired[key]; ok && r.uid == wl.UID && !Newer(wl.ResourceVersion, r.resourceVersion) {
		return nil, false
	}
	prev := s.m[key]
	if prev != nil && prev.UID == wl.UID && !Newer(wl.ResourceVersion, prev.ResourceVersion) {
		return prev, false
	}
	if prev != nil {
		shrink.Delete(&s.byUID, prev.UID)
	}
	if workload.IsFinished(wl) && !workload.IsDeleting(wl) {
		shrink.Delete(&s.m, key)
		s.retired[key] = mark{uid: wl.UID, resourceVersion: wl.ResourceVersion}
		return prev, true
	}
	shrink.Delete(&s.retired, key)
	s.m[key] = wl
	s.byUID[wl.UID] = key
	return prev, true
}

// Newer reports whether resourceVersion a is newer than b. Versions that
// do not compare (not integers) count as newer: the informer's word wins.
func Newer(a, b string) bool {
	c, err := resourceversion.CompareResourceVersion(a, b)
	if err != nil {
		return true
	}
	return c > 0
}

// Remove forgets the workload if the store holds the version with uid
// (or any version when uid is empty) and returns what it held.
func (s *Store) Remove(key types.NamespacedName, uid types.UID) *v1alpha1.Workload {
	s.mu.Lock()
	defer s.mu.Unlock()
	prev := s.m[key]
	if uid != "" {
		s.deleted[uid] = time.Now()
	}
	if r, ok := s.retired[key]; ok && (uid == "" || r.uid == uid) {
		shrink.Delete(&s.retired, key)
	}
	if prev == nil || (uid != "" && prev.UID != uid) {
		return nil
	}
	shrink.Delete(&s.m, key)
	shrink.Delete(&s.byUID, prev.UID)
	return prev
}

// Run forgets deleted workloads' uids once they are older than the
// tombstone TTL, checking every tenth of it until ctx ends: on a timer, so
// the last run's tombstones go even when no Workload changes after it.
func (s *Store) Run(ctx context.Context) {
	t := time.NewTicker(tombstoneTTL / 10)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.PruneTombstones(now)
		}
	}
}

// PruneTombstones forgets the uids of workloads deleted more than the
// tombstone TTL before now, and reports how many it still remembers.
func (s *Store) PruneTombstones(now time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	for u, at := range s.deleted {
		if now.Sub(at) > tombstoneTTL {
			shrink.Delete(&s.deleted, u)
		}
	}
	return len(s.deleted)
}

// Get returns the newest version of the workload; nil when it is unknown,
// gone or retired.
func (s *Store) Get(key types.NamespacedName) *v1alpha1.Workload {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.m[key]
}

// GetByUID returns the newest version of the workload with uid; nil when
// it is unknown, gone or retired.
func (s *Store) GetByUID(uid types.UID) *v1alpha1.Workload {
	s.mu.RLock()
	defer s.mu.RUnlock()
	key, ok := s.byUID[uid]
	if !ok {
		return nil
	}
	return s.m[key]
}

// List returns every workload held.
func (s *Store) List() []*v1alpha1.Workload {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*v1alpha1.Workload, 0, len(s.m))
	for _, wl := range s.m {
		out = append(out, wl)
	}
	return out
}

// Retired reports how many finished workloads are remembered only by
// their version.
func (s *Store) Retired() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.retired)
}

// Locks serializes the writes to one workload, so that each write starts
// from the store's answer to the previous one.
type Locks struct {
	mu    sync.Mutex
	locks map[types.NamespacedName]*keyLock
}

type keyLock struct {
	mu   sync.Mutex
	refs int
}

// NewLocks returns a Locks with nothing locked.
func NewLocks() *Locks { return &Locks{locks: map[types.NamespacedName]*keyLock{}} }

// Lock locks key and returns the function that unlocks it.
func (k *Locks) Lock(key types.NamespacedName) func() {
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
			// A plain delete: the map holds only the writes in flight,
			// and making it afresh each time it empties would cost an
			// allocation per write.
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}
