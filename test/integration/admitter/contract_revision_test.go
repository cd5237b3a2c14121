package admitter

import (
	"context"
	"fmt"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/test/fakecheck"
)

// waitRecordedRevision waits until the AdmissionCheck's status records
// the provider's contract revision as want.
func waitRecordedRevision(ctx context.Context, t *testing.T, name string, want int32) {
	t.Helper()
	waitFor(ctx, t, fmt.Sprintf("AdmissionCheck %s status.provider.contractRevision %d", name, want), func() (bool, string) {
		var ac v1alpha1.AdmissionCheck
		if err := s.k8s.Get(ctx, client.ObjectKey{Name: name}, &ac); err != nil {
			return false, err.Error()
		}
		return ac.Status.Provider != nil && ac.Status.Provider.ContractRevision == want, fmt.Sprintf("provider %+v", ac.Status.Provider)
	})
}

// admittedFlags is the admitted field of every Evaluate the fake got
// about workload ns/name, oldest first.
func admittedFlags(fake *fakecheck.Provider, ns, name string) []bool {
	var out []bool
	for _, c := range fake.Calls() {
		if c.GetWorkload().GetNamespace() == ns && c.GetWorkload().GetName() == name {
			out = append(out, c.GetAdmitted())
		}
	}
	return out
}

// The admitter records the revision a provider declares, and tells a
// provider of CONTRACT_REVISION_3 or later, whenever it asks again about
// a workload admitted on that reservation (a pushed key, a stream opened
// again after the provider restarted), that the workload is admitted. A
// provider of an earlier revision never gets the field.
func TestEvaluateAdmittedFollowsTheContractRevision(t *testing.T) {
	tests := []struct {
		name     string
		declare  checksv1.ContractRevision // unset: the SDK's default, revision 2
		recorded int32
		admitted bool // what the asks after admission carry
	}{
		{"revision 3 is told", checksv1.ContractRevision_CONTRACT_REVISION_3, 3, true},
		{"the SDK's default (revision 2) is not", checksv1.ContractRevision_CONTRACT_REVISION_UNSPECIFIED, 2, false},
		{"revision 1 is not", checksv1.ContractRevision_CONTRACT_REVISION_1, 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testContext(t)
			fake := fakecheck.StartT(t, fakecheck.WithContractRevision(tt.declare), fakecheck.WithCapabilities(
				checksv1.Capability_CAPABILITY_POD_SET_UPDATES, checksv1.Capability_CAPABILITY_RELEASE, checksv1.Capability_CAPABILITY_WATCH_CHANGES))
			check := newCheck(ctx, t, fake.Target())
			waitRecordedRevision(ctx, t, check, tt.recorded)
			if err := fake.WaitWatchOpens(ctx, 1); err != nil {
				t.Fatalf("the admitter opened no WatchChanges stream to the provider of %s: %v", check, err)
			}
			st := newSetup(ctx, t, queueOptions{cpu: "1", checks: []string{check}})

			fake.SetAnswer(st.ns, "running", readyWithPool("a"))
			submit(ctx, t, st.ns, "running", "1")
			adm := waitWorkload(ctx, t, st.ns, "running", "admitted", admitted)
			before := admittedFlags(fake, st.ns, "running")
			for i, a := range before {
				if a {
					t.Fatalf("Evaluate %d, before the admission, carried admitted=true: %v", i, before)
				}
			}

			// A pushed key is asked again about the admitted workload.
			if fake.Push(evaluationKey(adm.UID, adm.Status.Admission.ReservationID, check)) == 0 {
				t.Fatal("no WatchChanges stream open to push on")
			}
			if err := fake.WaitEvaluated(ctx, st.ns, "running", len(before)+1); err != nil {
				t.Fatalf("the pushed key was not evaluated again: %v", err)
			}
			// The provider restarts: the stream opened again asks again.
			opens := fake.WatchOpens()
			fake.Down()
			if err := fake.Up(); err != nil {
				t.Fatal(err)
			}
			if err := fake.WaitWatchOpens(ctx, opens+1); err != nil {
				t.Fatalf("the admitter did not open the stream again after the provider restarted: %v", err)
			}
			if err := fake.WaitEvaluated(ctx, st.ns, "running", len(before)+2); err != nil {
				t.Fatalf("the stream opened again, and the admitted workload was not evaluated again: %v", err)
			}

			after := admittedFlags(fake, st.ns, "running")[len(before):]
			for i, a := range after {
				if a != tt.admitted {
					t.Errorf("Evaluate %d after the admission carried admitted=%v, want %v (declared %s): %v",
						len(before)+i, a, tt.admitted, tt.declare, after)
				}
			}
			if got := getWorkload(ctx, t, st.ns, "running"); !admitted(got) {
				t.Errorf("the workload is no longer admitted: %+v", got.Status.Conditions)
			}
		})
	}
}
