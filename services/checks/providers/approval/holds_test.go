package approval

import (
	"slices"
	"testing"
)

func TestHolds(t *testing.T) {
	a, b := Ref{Namespace: "n", Name: "a"}, Ref{Namespace: "n", Name: "b"}
	type op struct {
		add    bool
		key    string
		ref    Ref
		remove bool
	}
	tests := []struct {
		name         string
		ops          []op
		wantA, wantB []string
	}{
		{name: "empty"},
		{name: "keys by workload", ops: []op{{add: true, key: "2", ref: a}, {add: true, key: "1", ref: a}, {add: true, key: "3", ref: b}}, wantA: []string{"1", "2"}, wantB: []string{"3"}},
		{name: "add twice", ops: []op{{add: true, key: "1", ref: a}, {add: true, key: "1", ref: a}}, wantA: []string{"1"}},
		{name: "key moves", ops: []op{{add: true, key: "1", ref: a}, {add: true, key: "1", ref: b}}, wantB: []string{"1"}},
		{name: "remove", ops: []op{{add: true, key: "1", ref: a}, {add: true, key: "2", ref: a}, {remove: true, key: "1"}}, wantA: []string{"2"}},
		{name: "remove unknown and twice", ops: []op{{add: true, key: "1", ref: a}, {remove: true, key: "x"}, {remove: true, key: "1"}, {remove: true, key: "1"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHolds()
			for _, o := range tt.ops {
				if o.add {
					h.add(o.key, o.ref)
				}
				if o.remove {
					h.remove(o.key)
				}
			}
			if got := h.keys(a); !slices.Equal(got, tt.wantA) {
				t.Errorf("keys(a) = %v, want %v", got, tt.wantA)
			}
			if got := h.keys(b); !slices.Equal(got, tt.wantB) {
				t.Errorf("keys(b) = %v, want %v", got, tt.wantB)
			}
			if got, want := h.len(), len(tt.wantA)+len(tt.wantB); got != want {
				t.Errorf("len = %d, want %d", got, want)
			}
			if len(tt.wantA)+len(tt.wantB) == 0 && len(h.byRef) != 0 {
				t.Errorf("byRef keeps %d empty entries", len(h.byRef))
			}
		})
	}
}
