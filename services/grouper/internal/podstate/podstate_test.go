package podstate

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

func TestStatesResetForNewPod(t *testing.T) {
	s := NewStore()
	name := types.NamespacedName{Namespace: "ns", Name: "p"}
	s.Store(name, State{UID: "u1", Submitted: true, Ungated: true})
	if st := s.Load(name, "u1"); !st.Submitted || !st.Ungated {
		t.Errorf("Load(u1) = %+v, want the stored state", st)
	}
	if st := s.Load(name, "u2"); st.Submitted || st.Ungated || st.UID != "u2" {
		t.Errorf("Load(u2) = %+v, want a fresh state for the new pod", st)
	}
	s.Forget(name)
	if st := s.Load(name, "u1"); st.Submitted {
		t.Errorf("Load after Forget = %+v, want fresh", st)
	}
}
