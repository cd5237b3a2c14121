package decisions

import (
	"testing"
	"time"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	sluicev1 "github.com/sluice-dev/sluice/gen/sluice/v1"
	"github.com/sluice-dev/sluice/services/grouper/internal/workload"
)

func TestUngateBeginsOnlyUnderItsAdmission(t *testing.T) {
	key := workload.Key{Namespace: "ns", Name: "g"}
	decision := func(action admitterv1.Decision_Action, uid, reservation string) *admitterv1.Decision {
		return &admitterv1.Decision{Workload: &sluicev1.WorkloadRef{Namespace: key.Namespace, Name: key.Name, Uid: uid},
			Action: action, ReservationId: reservation}
	}
	admission := decision(admitterv1.Decision_ACTION_ADMIT, "u1", "r1")
	tests := []struct {
		name    string
		inForce *admitterv1.Decision // nil: none
		want    bool
	}{
		{name: "the same admission", inForce: decision(admitterv1.Decision_ACTION_ADMIT, "u1", "r1"), want: true},
		{name: "evicted meanwhile", inForce: decision(admitterv1.Decision_ACTION_EVICT, "u1", "r1")},
		{name: "deleted meanwhile", inForce: decision(admitterv1.Decision_ACTION_DELETE, "u1", "r1")},
		{name: "admitted again under another reservation", inForce: decision(admitterv1.Decision_ACTION_ADMIT, "u1", "r2")},
		{name: "another Workload of the name", inForce: decision(admitterv1.Decision_ACTION_ADMIT, "u2", "r1")},
		{name: "forgotten meanwhile"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			decisions := NewStore()
			if tt.inForce != nil {
				decisions.Put(tt.inForce, time.Now())
			}
			u := NewUngates()
			if got := u.Begin(key, admission, decisions); got != tt.want {
				t.Fatalf("begin = %v, want %v", got, tt.want)
			}
			if u.Busy(key) != tt.want {
				t.Fatalf("busy = %v after begin returned %v", u.Busy(key), tt.want)
			}
			if tt.want {
				u.End(key)
				if u.Busy(key) {
					t.Fatal("busy after end")
				}
			}
		})
	}
}

func TestUngatesInFlightCount(t *testing.T) {
	key := workload.Key{Namespace: "ns", Name: "g"}
	d := &admitterv1.Decision{Workload: &sluicev1.WorkloadRef{Namespace: "ns", Name: "g"}, Action: admitterv1.Decision_ACTION_ADMIT}
	decisions := NewStore()
	decisions.Put(d, time.Now())
	u := NewUngates()
	u.Begin(key, d, decisions)
	u.Begin(key, d, decisions)
	u.End(key)
	if !u.Busy(key) {
		t.Fatal("not busy with one of two ungates still in flight")
	}
	u.End(key)
	if u.Busy(key) {
		t.Fatal("busy with none in flight")
	}
}
