// Package shard is the one rule that splits workloads between grouper
// replicas: a workload belongs to the shard whose index is the FNV-1a (32
// bit) hash of "<namespace>/<name>" modulo the shard count. The grouper
// owns the workloads of its shard and the admitter filters its decision
// stream with the same rule, so both must share this code.
package shard

import (
	"fmt"
	"hash/fnv"
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

// Of returns the shard of workload namespace/name among count shards;
// count 0 counts as one shard.
func Of(namespace, name string, count uint32) uint32 {
	if count <= 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(namespace + "/" + name)) // hash.Hash never fails
	return h.Sum32() % count
}
