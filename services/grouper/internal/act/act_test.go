package act

import (
	"strings"
	"testing"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	sluicev1 "github.com/sluice-dev/sluice/gen/sluice/v1"
	"github.com/sluice-dev/sluice/pkg/rpc"
)

func TestTooLarge(t *testing.T) {
	withAnnotations := func(sets, bytesEach int) *admitterv1.SubmitWorkloadRequest {
		wl := &sluicev1.Workload{Ref: &sluicev1.WorkloadRef{Namespace: "ns", Name: "group-g"}, QueueName: "lq"}
		for i := range sets {
			wl.PodSets = append(wl.PodSets, &sluicev1.PodSet{
				Name: "role-" + string(rune('a'+i)), Count: 1,
				Annotations: map[string]string{"notes": strings.Repeat("x", bytesEach)},
			})
		}
		return &admitterv1.SubmitWorkloadRequest{Workload: wl}
	}
	tests := []struct {
		name    string
		req     *admitterv1.SubmitWorkloadRequest
		refused bool
	}{
		{name: "one small pod set", req: withAnnotations(1, 100)},
		{name: "18 roles of 200 KiB each, under the limit", req: withAnnotations(18, 200<<10)},
		{name: "18 roles of 250 KiB each, over the limit", req: withAnnotations(18, 250<<10), refused: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tooLarge(tc.req, "workload of group ns/g")
			if !tc.refused {
				if got != "" {
					t.Fatalf("refused %d bytes: %s", len(got), got)
				}
				return
			}
			if !strings.Contains(got, "workload of group ns/g") || !strings.Contains(got, "over the 4194304 a call to the admitter may carry") {
				t.Fatalf("refusal = %q, want it to name the workload and the limit of %d", got, rpc.MaxMessageBytes)
			}
		})
	}
}
