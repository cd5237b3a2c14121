package shard

import (
	"hash/fnv"
	"testing"
)

func TestOf(t *testing.T) {
	tests := []struct {
		name      string
		namespace string
		workload  string
		count     uint32
		want      uint32
	}{
		// fnv32a("ns/a") = 0xa520febe, computed independently; the admitter
		// and every grouper replica must agree on it.
		{name: "FNV-1a of namespace/name", namespace: "ns", workload: "a", count: 1000, want: 0xa520febe % 1000},
		{name: "one shard", namespace: "ns", workload: "a", count: 1, want: 0},
		{name: "count 0 is one shard", namespace: "ns", workload: "a", count: 0, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Of(tt.namespace, tt.workload, tt.count); got != tt.want {
				t.Errorf("Of(%q, %q, %d) = %d, want %d", tt.namespace, tt.workload, tt.count, got, tt.want)
			}
		})
	}
}

func TestOfSeparatesNamespaceFromName(t *testing.T) {
	// "a/bc" and "ab/c" must hash their own strings, not "abc".
	if Of("a", "bc", 1<<31) == Of("ab", "c", 1<<31) {
		t.Error(`Of("a", "bc") == Of("ab", "c"): namespace and name are not separated`)
	}
}

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
		{Shard{Count: 1}, true},
		{Shard{Index: 2, Count: 3}, true},
		{Shard{Index: 3, Count: 3}, false},
		{Shard{Index: 1, Count: 1}, false},
		{Shard{Index: 1, Count: 0}, false},
	}
	for _, tt := range tests {
		if err := tt.shard.Validate(); (err == nil) != tt.ok {
			t.Errorf("%+v.Validate() = %v, want ok %v", tt.shard, err, tt.ok)
		}
	}
}
