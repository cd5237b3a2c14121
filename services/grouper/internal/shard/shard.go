// Package shard is the grouper's view of pkg/shard: a replica handles the
// workloads of its shard and asks the admitter for only their decisions.
package shard

import (
	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	"github.com/sluice-dev/sluice/pkg/shard"
)

// Shard is one replica's share of the workloads; see pkg/shard for the rule.
type Shard = shard.Shard

// Proto returns s as the decision stream's shard filter; nil asks for
// everything.
func Proto(s Shard) *admitterv1.Shard {
	if s.Count <= 1 {
		return nil
	}
	return &admitterv1.Shard{Index: s.Index, Count: s.Count}
}
