package controller

import (
	"testing"

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
			s := newStore()
			s.upsert(tc.first)
			if _, applied := s.upsert(tc.second); applied != tc.applied {
				t.Fatalf("applied = %v, want %v", applied, tc.applied)
			}
			if got := s.get(key).ResourceVersion; got != tc.wantRV {
				t.Fatalf("stored version %s, want %s", got, tc.wantRV)
			}
		})
	}
}

func TestStoreRemoveChecksUID(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "w"}
	s := newStore()
	s.upsert(wlAt("new", "5"))
	if s.remove(key, "old") != nil || s.get(key) == nil {
		t.Fatal("removing an older incarnation removed the current one")
	}
	if s.remove(key, "new") == nil || s.get(key) != nil {
		t.Fatal("removing the current incarnation left it in the store")
	}
}

// A read that raced a deletion must not bring the deleted workload back.
func TestStoreRefusesDeletedWorkloads(t *testing.T) {
	s := newStore()
	wl := &v1alpha1.Workload{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w", UID: "u1", ResourceVersion: "5"}}
	s.upsert(wl)
	key := types.NamespacedName{Namespace: "ns", Name: "w"}
	if s.remove(key, "u1") == nil {
		t.Fatal("remove found nothing")
	}
	stale := wl.DeepCopy()
	stale.ResourceVersion = "4"
	if _, ok := s.upsert(stale); ok || s.get(key) != nil {
		t.Fatal("a stale read of a deleted workload was recorded")
	}
	again := &v1alpha1.Workload{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w", UID: "u2", ResourceVersion: "9"}}
	if _, ok := s.upsert(again); !ok || s.get(key).UID != "u2" {
		t.Fatal("a new workload of the same name was refused")
	}
}
