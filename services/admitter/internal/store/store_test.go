package store

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

func wlAt(uid, rv string) *v1alpha1.Workload {
	return &v1alpha1.Workload{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w", UID: types.UID(uid), ResourceVersion: rv}}
}

func TestStoreNeverGoesBack(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "w"}
	tests := []struct {
		name    string
		first   *v1alpha1.Workload
		second  *v1alpha1.Workload
		applied bool
		wantRV  string
	}{
		{"newer replaces", wlAt("u", "10"), wlAt("u", "11"), true, "11"},
		{"older is ignored", wlAt("u", "11"), wlAt("u", "10"), false, "11"},
		{"same is ignored", wlAt("u", "11"), wlAt("u", "11"), false, "11"},
		{"numeric, not lexical", wlAt("u", "9"), wlAt("u", "10"), true, "10"},
		{"a new object replaces whatever its version", wlAt("u", "50"), wlAt("v", "20"), true, "20"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := New()
			s.Upsert(tc.first)
			if _, applied := s.Upsert(tc.second); applied != tc.applied {
				t.Fatalf("applied = %v, want %v", applied, tc.applied)
			}
			if got := s.Get(key).ResourceVersion; got != tc.wantRV {
				t.Fatalf("stored version %s, want %s", got, tc.wantRV)
			}
		})
	}
}

func TestStoreRemoveChecksUID(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "w"}
	s := New()
	s.Upsert(wlAt("new", "5"))
	if s.Remove(key, "old") != nil || s.Get(key) == nil {
		t.Fatal("removing an older incarnation removed the current one")
	}
	if s.Remove(key, "new") == nil || s.Get(key) != nil {
		t.Fatal("removing the current incarnation left it in the store")
	}
}

// A read that raced a deletion must not bring the deleted workload back.
func TestStoreRefusesDeletedWorkloads(t *testing.T) {
	s := New()
	wl := &v1alpha1.Workload{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w", UID: "u1", ResourceVersion: "5"}}
	s.Upsert(wl)
	key := types.NamespacedName{Namespace: "ns", Name: "w"}
	if s.Remove(key, "u1") == nil {
		t.Fatal("remove found nothing")
	}
	stale := wl.DeepCopy()
	stale.ResourceVersion = "4"
	if _, ok := s.Upsert(stale); ok || s.Get(key) != nil {
		t.Fatal("a stale read of a deleted workload was recorded")
	}
	again := &v1alpha1.Workload{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w", UID: "u2", ResourceVersion: "9"}}
	if _, ok := s.Upsert(again); !ok || s.Get(key).UID != "u2" {
		t.Fatal("a new workload of the same name was refused")
	}
}

// Tombstones last the TTL, then go on the timer's next tick, with no
// further Workload event needed.
func TestTombstonesPrunedAfterTheirTTL(t *testing.T) {
	s := New()
	key := types.NamespacedName{Namespace: "ns", Name: "w"}
	s.Upsert(wlAt("u1", "5"))
	s.Remove(key, "u1")
	if left := s.PruneTombstones(time.Now()); left != 1 {
		t.Fatalf("a fresh tombstone was pruned: %d left, want 1", left)
	}
	if _, ok := s.Upsert(wlAt("u1", "4")); ok {
		t.Fatal("a stale read was recorded while its tombstone lives")
	}
	if left := s.PruneTombstones(time.Now().Add(tombstoneTTL + time.Second)); left != 0 {
		t.Fatalf("%d tombstones outlived their TTL", left)
	}
}

func TestStoreRetiresFinishedWorkloads(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "w"}
	s := New()
	running := wlAt("u", "10")
	done := wlAt("u", "11")
	done.Status.Conditions = []metav1.Condition{{Type: v1alpha1.WorkloadFinished, Status: metav1.ConditionTrue}}
	s.Upsert(running)
	if _, applied := s.Upsert(done); !applied {
		t.Fatal("the finished version was not applied")
	}
	if s.Get(key) != nil || s.Retired() != 1 {
		t.Fatalf("finished workload still held (retired %d)", s.Retired())
	}
	if _, applied := s.Upsert(running); applied || s.Get(key) != nil {
		t.Fatal("an older version brought the finished workload back")
	}
	deleting := wlAt("u", "12")
	deleting.Status.Conditions = done.Status.Conditions
	deleting.DeletionTimestamp = &metav1.Time{}
	if _, applied := s.Upsert(deleting); !applied || s.Get(key) == nil {
		t.Fatal("a finished workload being deleted must be held: its deletion still needs work")
	}
	s.Remove(key, "u")
	if s.Retired() != 0 || s.Get(key) != nil {
		t.Fatal("the deleted workload is still remembered")
	}
}

func TestStoreGetByUID(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "w"}
	finished := wlAt("u2", "30")
	finished.Status.Conditions = []metav1.Condition{{Type: v1alpha1.WorkloadFinished, Status: metav1.ConditionTrue}}
	tests := []struct {
		name   string
		do     func(s *Store)
		uid    types.UID
		wantRV string // empty: not found
	}{
		{"held", func(s *Store) { s.Upsert(wlAt("u1", "10")) }, "u1", "10"},
		{"newest version", func(s *Store) { s.Upsert(wlAt("u1", "10")); s.Upsert(wlAt("u1", "11")) }, "u1", "11"},
		{"unknown uid", func(s *Store) { s.Upsert(wlAt("u1", "10")) }, "u9", ""},
		{"older incarnation of the name", func(s *Store) { s.Upsert(wlAt("u1", "10")); s.Upsert(wlAt("u2", "20")) }, "u1", ""},
		{"newer incarnation of the name", func(s *Store) { s.Upsert(wlAt("u1", "10")); s.Upsert(wlAt("u2", "20")) }, "u2", "20"},
		{"retired", func(s *Store) { s.Upsert(wlAt("u2", "20")); s.Upsert(finished) }, "u2", ""},
		{"removed", func(s *Store) { s.Upsert(wlAt("u1", "10")); s.Remove(key, "u1") }, "u1", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New()
			tt.do(s)
			got := s.GetByUID(tt.uid)
			switch {
			case tt.wantRV == "" && got != nil:
				t.Fatalf("GetByUID(%s) = version %s, want none", tt.uid, got.ResourceVersion)
			case tt.wantRV != "" && (got == nil || got.ResourceVersion != tt.wantRV):
				t.Fatalf("GetByUID(%s) = %v, want version %s", tt.uid, got, tt.wantRV)
			}
		})
	}
}
