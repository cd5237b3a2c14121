package checks

import (
	"testing"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

func TestRevision(t *testing.T) {
	tests := []struct {
		name     string
		provider *v1alpha1.ProviderInfo
		want     checksv1.ContractRevision
	}{
		{"no provider recorded", nil, checksv1.ContractRevision_CONTRACT_REVISION_1},
		{"unset: a status written before revisions", &v1alpha1.ProviderInfo{Name: "p"}, checksv1.ContractRevision_CONTRACT_REVISION_1},
		{"revision 2", &v1alpha1.ProviderInfo{ContractRevision: 2}, checksv1.ContractRevision_CONTRACT_REVISION_2},
		{"revision 3", &v1alpha1.ProviderInfo{ContractRevision: 3}, checksv1.ContractRevision_CONTRACT_REVISION_3},
		{"a revision the admitter does not know counts as the latest", &v1alpha1.ProviderInfo{ContractRevision: 9}, LatestRevision},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ac := &v1alpha1.AdmissionCheck{Status: v1alpha1.AdmissionCheckStatus{Provider: tt.provider}}
			if got := Revision(ac); got != tt.want {
				t.Errorf("Revision = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestProviderStatusRecordsRevision(t *testing.T) {
	for declared, want := range map[checksv1.ContractRevision]int32{
		checksv1.ContractRevision_CONTRACT_REVISION_UNSPECIFIED: 1,
		checksv1.ContractRevision_CONTRACT_REVISION_3:           3,
		checksv1.ContractRevision(9):                            9,
	} {
		got := ProviderStatus(&checksv1.GetProviderInfoResponse{Name: "p", ContractRevision: declared})
		if got.ContractRevision != want {
			t.Errorf("ProviderStatus(contract_revision %s).ContractRevision = %d, want %d", declared, got.ContractRevision, want)
		}
	}
}
