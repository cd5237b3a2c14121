package controller

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

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
		run          func(s *decisionStore)
		key          string
		wantPresent  bool
		wantReceived time.Time
		wantAction   admitterv1.Decision_Action
	}{
		{
			name: "a repeated decision keeps its first receive time",
			run: func(s *decisionStore) {
				s.put(admitA, t0)
				s.put(decision("a", admitterv1.Decision_ACTION_ADMIT, "cq"), t1)
			},
			key:          "a",
			wantPresent:  true,
			wantReceived: t0,
			wantAction:   admitterv1.Decision_ACTION_ADMIT,
		},
		{
			name: "a changed decision restarts the clock",
			run: func(s *decisionStore) {
				s.put(admitA, t0)
				s.put(decision("a", admitterv1.Decision_ACTION_EVICT, "cq"), t1)
			},
			key:          "a",
			wantPresent:  true,
			wantReceived: t1,
			wantAction:   admitterv1.Decision_ACTION_EVICT,
		},
		{
			name: "a snapshot drops absent workloads",
			run: func(s *decisionStore) {
				s.put(admitA, t0)
				s.replace([]*admitterv1.Decision{decision("b", admitterv1.Decision_ACTION_ADMIT, "cq")}, t1)
			},
			key:         "a",
			wantPresent: false,
		},
		{
			name: "a snapshot keeps the receive time of an unchanged decision",
			run: func(s *decisionStore) {
				s.put(admitA, t0)
				s.replace([]*admitterv1.Decision{decision("a", admitterv1.Decision_ACTION_ADMIT, "cq")}, t1)
			},
			key:          "a",
			wantPresent:  true,
			wantReceived: t0,
			wantAction:   admitterv1.Decision_ACTION_ADMIT,
		},
		{
			name:        "forget",
			run:         func(s *decisionStore) { s.put(admitA, t0); s.forget(workload.Key{Namespace: "ns", Name: "a"}) },
			key:         "a",
			wantPresent: false,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newDecisionStore()
			tt.run(s)
			e, ok := s.get(workload.Key{Namespace: "ns", Name: tt.key})
			if ok != tt.wantPresent {
				t.Fatalf("present = %v, want %v", ok, tt.wantPresent)
			}
			if !ok {
				return
			}
			if !e.received.Equal(tt.wantReceived) {
				t.Errorf("received = %v, want %v", e.received, tt.wantReceived)
			}
			if e.decision.GetAction() != tt.wantAction {
				t.Errorf("action = %v, want %v", e.decision.GetAction(), tt.wantAction)
			}
		})
	}
}

func TestPodStatesResetForNewPod(t *testing.T) {
	s := newPodStates()
	name := types.NamespacedName{Namespace: "ns", Name: "p"}
	s.store(name, podState{uid: "u1", submitted: true, ungated: true})
	if st := s.load(name, "u1"); !st.submitted || !st.ungated {
		t.Errorf("load(u1) = %+v, want the stored state", st)
	}
	if st := s.load(name, "u2"); st.submitted || st.ungated || st.uid != "u2" {
		t.Errorf("load(u2) = %+v, want a fresh state for the new pod", st)
	}
	s.forget(name)
	if st := s.load(name, "u1"); st.submitted {
		t.Errorf("load after forget = %+v, want fresh", st)
	}
}
