package checkphase

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

// TestEvaluateRequestAdmitted: admitted is sent true for an admitted
// workload, and only to providers that declare CONTRACT_REVISION_3 or a
// later one; a provider of an earlier revision, or one whose revision is
// unknown, never gets it.
func TestEvaluateRequestAdmitted(t *testing.T) {
	tests := []struct {
		name     string
		revision int32 // status.provider.contractRevision; 0: unset
		noStatus bool
		admitted bool
		want     bool
	}{
		{"revision 3, admitted", 3, false, true, true},
		{"revision 3, waiting", 3, false, false, false},
		{"a later revision counts as the latest", 9, false, true, true},
		{"revision 2 never gets it", 2, false, true, false},
		{"revision 1 never gets it", 1, false, true, false},
		{"unset revision never gets it", 0, false, true, false},
		{"no provider status never gets it", 0, true, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ac := &v1alpha1.AdmissionCheck{ObjectMeta: metav1.ObjectMeta{Name: "budget"}}
			if !tt.noStatus {
				ac.Status.Provider = &v1alpha1.ProviderInfo{Name: "budget.checks.sluice.dev", ContractRevision: tt.revision}
			}
			wl := &v1alpha1.Workload{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "w", UID: "uid-1"}}
			wl.Status.Admission = &v1alpha1.Admission{ReservationID: "r1"}
			if tt.admitted {
				wl.Status.Conditions = []metav1.Condition{{Type: v1alpha1.WorkloadAdmitted, Status: metav1.ConditionTrue, Reason: "Admitted"}}
			}
			req := evaluateRequest(wl, ac, "r1", &checksv1.Workload{Namespace: "team-a", Name: "w"})
			if req.GetAdmitted() != tt.want {
				t.Errorf("admitted = %v, want %v", req.GetAdmitted(), tt.want)
			}
			if req.GetEvaluationKey() != "uid-1/r1/budget" || req.GetCheckName() != "budget" {
				t.Errorf("request %v, want key uid-1/r1/budget for check budget", req)
			}
		})
	}
}
