package shard

import (
	"testing"

	"google.golang.org/protobuf/proto"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
)

func TestProto(t *testing.T) {
	tests := []struct {
		name  string
		shard Shard
		want  *admitterv1.Shard
	}{
		{name: "no shards asks for everything", shard: Shard{}, want: nil},
		{name: "one shard asks for everything", shard: Shard{Count: 1}, want: nil},
		{name: "one of two", shard: Shard{Index: 1, Count: 2}, want: &admitterv1.Shard{Index: 1, Count: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Proto(tt.shard)
			if (got == nil) != (tt.want == nil) || !proto.Equal(got, tt.want) {
				t.Errorf("Proto = %v, want %v", got, tt.want)
			}
		})
	}
}
