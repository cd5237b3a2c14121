package preemption

import (
	"slices"
	"strings"
	"testing"
)

func TestParseStrategies(t *testing.T) {
	for _, tc := range []struct {
		list string
		want []Strategy
	}{
		{"LessThanOrEqualToFinalShare", []Strategy{LessThanOrEqualToFinalShare}},
		{"LessThanInitialShare", []Strategy{LessThanInitialShare}},
		{"LessThanOrEqualToFinalShare,LessThanInitialShare", DefaultStrategies()},
		{"LessThanOrEqualToFinalShare, LessThanInitialShare", DefaultStrategies()},
		{"LessThanInitialShare,LessThanOrEqualToFinalShare", nil},
		{"LessThanInitialShare,LessThanInitialShare", nil},
		{"", nil},
		{"Always", nil},
		{"lessthaninitialshare", nil},
	} {
		t.Run(tc.list, func(t *testing.T) {
			got, err := ParseStrategies(tc.list)
			if tc.want == nil {
				if err == nil || !strings.Contains(err.Error(), `must be exactly "LessThanOrEqualToFinalShare", "LessThanInitialShare" or "LessThanOrEqualToFinalShare,LessThanInitialShare"`) {
					t.Fatalf("accepted %v, %v; want an error naming the allowed lists", got, err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}
