package app

import (
	"slices"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/services/admitter/internal/preemption"
)

// TestFairSharing: unset strategies take the default pair; each allowed
// list is taken as written; anything else is refused naming the flag and
// the rule, with fair sharing on or off.
func TestFairSharing(t *testing.T) {
	pair := []preemption.Strategy{preemption.LessThanOrEqualToFinalShare, preemption.LessThanInitialShare}
	for _, tt := range []struct {
		name string
		set  FairSharing
		want []preemption.Strategy // nil: refused
	}{
		{"off, unset", FairSharing{}, pair},
		{"on, unset", FairSharing{Enabled: true}, pair},
		{"the pair", FairSharing{Enabled: true, PreemptionStrategies: []string{"LessThanOrEqualToFinalShare", "LessThanInitialShare"}}, pair},
		{"final share alone", FairSharing{Enabled: true, PreemptionStrategies: []string{"LessThanOrEqualToFinalShare"}},
			[]preemption.Strategy{preemption.LessThanOrEqualToFinalShare}},
		{"initial share alone", FairSharing{Enabled: true, PreemptionStrategies: []string{"LessThanInitialShare"}},
			[]preemption.Strategy{preemption.LessThanInitialShare}},
		{"the pair reversed", FairSharing{Enabled: true, PreemptionStrategies: []string{"LessThanInitialShare", "LessThanOrEqualToFinalShare"}}, nil},
		{"empty", FairSharing{Enabled: true, PreemptionStrategies: []string{""}}, nil},
		{"unknown, with fair sharing off", FairSharing{PreemptionStrategies: []string{"Never"}}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.set.setting()
			if tt.want == nil {
				if err == nil || !strings.Contains(err.Error(), "--fair-sharing-preemption-strategies") || !strings.Contains(err.Error(), "must be exactly") {
					t.Fatalf("accepted %+v, %v; want an error naming the flag and the rule", got, err)
				}
				if tt.set.Validate() == nil {
					t.Fatal("Validate accepts what setting refuses")
				}
				return
			}
			if err != nil || got.Enabled != tt.set.Enabled || !slices.Equal(got.PreemptionStrategies, tt.want) {
				t.Fatalf("setting %+v, %v; want enabled %v with %v", got, err, tt.set.Enabled, tt.want)
			}
		})
	}
}
