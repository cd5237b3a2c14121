package shard

import (
	"hash/fnv"
	"testing"
)

func TestOwns(t *testing.T) {
	// The hash of "ns/w" among 3 shards, computed independently.
	h := fnv.New32a()
	h.Write([]byte("ns/w"))
	want := h.Sum32() % 3
	tests := []struct {
		name  string
		shard Shard
		owns  bool
	}{
		{name: "single shard owns everything", shard: Shard{}, owns: true},
		{name: "count 1 owns everything", shard: Shard{Count: 1}, owns: true},
		{name: "owning shard", shard: Shard{Index: want, Count: 3}, owns: true},
		{name: "other shard", shard: Shard{Index: (want + 1) % 3, Count: 3}, owns: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.shard.Owns("ns", "w"); got != tt.owns {
				t.Errorf("Owns = %v, want %v", got, tt.owns)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		shard Shard
		ok    bool
	}{
		{Shard{}, true},
		{Shard{Index: 2, Count: 3}, true},
		{Shard{Index: 3, Count: 3}, false},
		{Shard{Index: 1, Count: 1}, false},
	}
	for _, tt := range tests {
		if err := tt.shard.Validate(); (err == nil) != tt.ok {
			t.Errorf("%+v.Validate() = %v, want ok %v", tt.shard, err, tt.ok)
		}
	}
	if p := (Shard{Count: 1}).Proto(); p != nil {
		t.Errorf("Proto of one shard = %v, want nil", p)
	}
	if p := (Shard{Index: 1, Count: 2}).Proto(); p.GetIndex() != 1 || p.GetCount() != 2 {
		t.Errorf("Proto = %v", p)
	}
}
