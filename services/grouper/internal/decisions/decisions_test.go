package decisions

import (
	"testing"
	"time"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	sluicev1 "github.com/sluice-dev/sluice/gen/sluice/v1"
	"github.com/sluice-dev/sluice/services/grouper/internal/workload"
)

func decision(name string, action admitterv1.Decision_Action, cq string) *admitterv1.Decision {
	return &admitterv1.Decision{
		Workload:     &sluicev1.WorkloadRef{Namespace: "ns", Name: name},
		Action:       action,
		ClusterQueue: cq,
	}
}

func TestDecisionStore(t *testing.T) {
	t0 := time.Unix(100, 0)
	t1 := t0.Add(time.Second)
	admitA := decision("a", admitterv1.Decision_ACTION_ADMIT, "cq")
	tests := []struct {
		name         string
		run          func(s *Store)
		key          string
		wantPresent  bool
		wantReceived time.Time
		wantAction   admitterv1.Decision_Action
	}{
		{
			name: "a repeated decision keeps its first receive time",
			run: func(s *Store) {
				s.Put(admitA, t0)
				s.Put(decision("a", admitterv1.Decision_ACTION_ADMIT, "cq"), t1)
			},
			key:          "a",
			wantPresent:  true,
			wantReceived: t0,
			wantAction:   admitterv1.Decision_ACTION_ADMIT,
		},
		{
			name: "a changed decision restarts the clock",
			run: func(s *Store) {
				s.Put(admitA, t0)
				s.Put(decision("a", admitterv1.Decision_ACTION_EVICT, "cq"), t1)
			},
			key:          "a",
			wantPresent:  true,
			wantReceived: t1,
			wantAction:   admitterv1.Decision_ACTION_EVICT,
		},
		{
			name: "a snapshot drops absent workloads",
			run: func(s *Store) {
				s.Put(admitA, t0)
				s.Replace([]*admitterv1.Decision{decision("b", admitterv1.Decision_ACTION_ADMIT, "cq")}, t1)
			},
			key:         "a",
			wantPresent: false,
		},
		{
			name: "a snapshot keeps the receive time of an unchanged decision",
			run: func(s *Store) {
				s.Put(admitA, t0)
				s.Replace([]*admitterv1.Decision{decision("a", admitterv1.Decision_ACTION_ADMIT, "cq")}, t1)
			},
			key:          "a",
			wantPresent:  true,
			wantReceived: t0,
			wantAction:   admitterv1.Decision_ACTION_ADMIT,
		},
		{
			name:        "forget",
			run:         func(s *Store) { s.Put(admitA, t0); s.Forget(workload.Key{Namespace: "ns", Name: "a"}) },
			key:         "a",
			wantPresent: false,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewStore()
			tt.run(s)
			e, ok := s.Get(workload.Key{Namespace: "ns", Name: tt.key})
			if ok != tt.wantPresent {
				t.Fatalf("present = %v, want %v", ok, tt.wantPresent)
			}
			if !ok {
				return
			}
			if !e.Received.Equal(tt.wantReceived) {
				t.Errorf("received = %v, want %v", e.Received, tt.wantReceived)
			}
			if e.Decision.GetAction() != tt.wantAction {
				t.Errorf("action = %v, want %v", e.Decision.GetAction(), tt.wantAction)
			}
		})
	}
}
