package grouper

import (
	"context"
	"errors"
	"fmt"
	"testing"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	sluicev1 "github.com/sluice-dev/sluice/gen/sluice/v1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
)

// TestNoUngateAfterStopReport forces the race between an admission's
// ungate and the eviction that replaces it: the grouper prepares the
// ungate of a group's pods (it reports a missing pod first, and the test
// holds that report), the eviction comes meanwhile, and the grouper
// reports the workload stopped — its pods are gated — which gives the
// quota back. The ungate prepared before must then never land: a pod
// ungated after the stop report would run on quota nobody holds.
func TestNoUngateAfterStopReport(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	const group = "raced"
	release := s.admitter.holdMissingReports(group)
	defer release()
	pods := createSubmittedGroup(ctx, t, group, "raced-a", "raced-b")
	superseded := grouperMetric(ctx, t, "sluice_grouper_ungates_superseded_total")
	held := s.admitter.heldReports()

	// The admission counts one pod more than the group has: before it
	// ungates, the grouper reports that pod missing, and waits on it.
	ref := &sluicev1.WorkloadRef{Namespace: namespace, Name: group, Uid: "raced-uid"}
	s.admitter.push(&admitterv1.Decision{Workload: ref, Action: admitterv1.Decision_ACTION_ADMIT, ClusterQueue: "cq",
		ReservationId: "r1", PodSetCounts: map[string]int32{"0123abcd": 3}})
	waitFor(ctx, t, "an ungate prepared, its missing report held", func() error {
		if s.admitter.heldReports() == held {
			return errors.New("no report held yet")
		}
		return nil
	})
	s.admitter.push(&admitterv1.Decision{Workload: ref, Action: admitterv1.Decision_ACTION_EVICT, ReservationId: "r1",
		Message: "preempted while its pods were being ungated"})
	waitFor(ctx, t, "the workload reported stopped", func() error { return stoppedReported(group, "r1") })

	release()
	waitFor(ctx, t, "the prepared ungates dropped", func() error {
		for _, p := range pods {
			if !hasGate(getPod(ctx, t, p.Name), podkeys.AdmissionGate) {
				t.Fatalf("pod %s was ungated after its workload was reported stopped", p.Name)
			}
		}
		if got := grouperMetric(ctx, t, "sluice_grouper_ungates_superseded_total"); got <= superseded {
			return fmt.Errorf("ungates superseded: %v, want more than %v", got, superseded)
		}
		return nil
	})
	for _, p := range pods {
		if got := getPod(ctx, t, p.Name); !hasGate(got, podkeys.AdmissionGate) || got.DeletionTimestamp != nil {
			t.Errorf("pod %s: gates %v, deleting %v; want it gated and kept for the next admission",
				p.Name, got.Spec.SchedulingGates, got.DeletionTimestamp != nil)
		}
	}
}
