// Package shard splits workloads between grouper replicas: a replica
// handles the workloads whose "<namespace>/<name>" FNV-1a hash modulo the
// shard count is its index, the same rule the admitter filters its decision
// stream with.
package shard

import (
	"fmt"
	"hash/fnv"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
)

// Shard is one replica's share of the workloads. Count 0 or 1 means one
// shard holding everything.
type Shard struct {
	Index uint32
	Count uint32
}

// Validate checks that Index names a shard below Count.
func (s Shard) Validate() error {
	if s.Count > 1 && s.Index >= s.Count {
		return fmt.Errorf("shard index %d is not valid: must be below the shard count %d", s.Index, s.Count)
	}
	if s.Count <= 1 && s.Index != 0 {
		return fmt.Errorf("shard index %d is not valid: must be 0 with a shard count of %d", s.Index, s.Count)
	}
	return nil
}

// Owns reports whether the workload namespace/name falls in s.
func (s Shard) Owns(namespace, name string) bool {
	if s.Count <= 1 {
		return true
	}
	return Of(namespace, name, s.Count) == s.Index
}

// Of returns the shard of workload namespace/name among count shards.
func Of(namespace, name string, count uint32) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(namespace + "/" + name)) // hash.Hash never fails
	return h.Sum32() % count
}

// Proto returns s as the stream's shard filter; nil asks for everything.
func (s Shard) Proto() *admitterv1.Shard {
	if s.Count <= 1 {
		return nil
	}
	return &admitterv1.Shard{Index: s.Index, Count: s.Count}
}
