package probe

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/checkvalidate"
	"github.com/sluice-dev/sluice/services/admitter/internal/checks"
)

func TestStatusFor(t *testing.T) {
	info := &checksv1.GetProviderInfoResponse{
		Name: "capacity.example.com", VendorVersion: "1.2.0",
		ContractVersions: []string{checkvalidate.ContractVersion},
		Capabilities:     []checksv1.Capability{checksv1.Capability_CAPABILITY_RELEASE},
	}
	known := &v1alpha1.ProviderInfo{Name: "capacity.example.com", Version: "1.1.0"}
	tests := []struct {
		name         string
		info         *checksv1.GetProviderInfoResponse
		probe        *checksv1.ProbeResponse
		err          error
		active       bool
		reason       string
		providerName string
		version      string
	}{
		{"ready", info, &checksv1.ProbeResponse{Ready: true}, nil, true, "ProviderReady", "capacity.example.com", "1.2.0"},
		{"not ready", info, &checksv1.ProbeResponse{Message: "warming up"}, nil, false, "ProviderNotReady", "capacity.example.com", "1.2.0"},
		{"unreachable keeps the identity it last gave", nil, nil, errors.New("connection refused"), false, "ProviderUnreachable", "capacity.example.com", "1.1.0"},
		{"invalid info", &checksv1.GetProviderInfoResponse{}, nil, nil, false, "InvalidProviderInfo", "", ""},
		{"unverified provider keeps the identity it last gave", nil, nil,
			fmt.Errorf("GetProviderInfo: %w", &checks.TLSError{Reason: v1alpha1.ReasonTLSHandshakeFailed, Err: errors.New("x509: certificate signed by unknown authority")}),
			false, v1alpha1.ReasonTLSHandshakeFailed, "capacity.example.com", "1.1.0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ac := &v1alpha1.AdmissionCheck{ObjectMeta: metav1.ObjectMeta{Name: "capacity", Generation: 3},
				Status: v1alpha1.AdmissionCheckStatus{Provider: known}}
			got := statusFor(ac, tt.info, tt.probe, tt.err)
			c := findActive(got)
			wantStatus := metav1.ConditionFalse
			if tt.active {
				wantStatus = metav1.ConditionTrue
			}
			if c == nil || c.Status != wantStatus || c.Reason != tt.reason || c.ObservedGeneration != 3 {
				t.Fatalf("Active = %+v, want %s reason %s", c, wantStatus, tt.reason)
			}
			if got.Status.Provider.Name != tt.providerName || got.Status.Provider.Version != tt.version {
				t.Fatalf("provider = %+v, want %s %s", got.Status.Provider, tt.providerName, tt.version)
			}
			if ac.Status.Conditions != nil {
				t.Fatal("statusFor changed its input")
			}
		})
	}
}

// TestStatusForContractRevision: the status records the revision the
// provider declared, 1 when it declares none, and a revision the admitter
// does not know as it was declared (checks.Revision caps it on reading).
func TestStatusForContractRevision(t *testing.T) {
	tests := []struct {
		name     string
		declared checksv1.ContractRevision
		want     int32
	}{
		{"unset is revision 1", checksv1.ContractRevision_CONTRACT_REVISION_UNSPECIFIED, 1},
		{"revision 2", checksv1.ContractRevision_CONTRACT_REVISION_2, 2},
		{"revision 3", checksv1.ContractRevision_CONTRACT_REVISION_3, 3},
		{"a later revision is kept as declared", checksv1.ContractRevision(7), 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			info := &checksv1.GetProviderInfoResponse{
				Name: "capacity.example.com", ContractVersions: []string{checkvalidate.ContractVersion},
				ContractRevision: tt.declared,
			}
			ac := &v1alpha1.AdmissionCheck{ObjectMeta: metav1.ObjectMeta{Name: "capacity"}}
			got := statusFor(ac, info, &checksv1.ProbeResponse{Ready: true}, nil)
			if got.Status.Provider.ContractRevision != tt.want {
				t.Errorf("status.provider.contractRevision = %d, want %d", got.Status.Provider.ContractRevision, tt.want)
			}
		})
	}
}

// TestStatusPatchTouchesOnlyWhatTheProbeOwns: the probe's merge patch,
// computed from the cached object, carries the Active condition and the
// provider and nothing else, so status fields other writers keep (such as
// owedReleases) are neither dropped nor overwritten.
func TestStatusPatchTouchesOnlyWhatTheProbeOwns(t *testing.T) {
	ac := &v1alpha1.AdmissionCheck{ObjectMeta: metav1.ObjectMeta{Name: "capacity", ResourceVersion: "7"},
		Status: v1alpha1.AdmissionCheckStatus{
			Provider: &v1alpha1.ProviderInfo{Name: "capacity.example.com", Version: "1.0.0"},
			OwedReleases: []v1alpha1.OwedRelease{{
				Namespace: "team-a", Name: "w", UID: "uid-1", ReservationID: "r1", Reason: v1alpha1.ReleaseDeleted,
			}},
		}}
	info := &checksv1.GetProviderInfoResponse{
		Name: "capacity.example.com", VendorVersion: "1.1.0", ContractVersions: []string{checkvalidate.ContractVersion},
		ContractRevision: checksv1.ContractRevision_CONTRACT_REVISION_3,
	}
	want := statusFor(ac, info, &checksv1.ProbeResponse{Ready: true}, nil)
	data, err := client.MergeFrom(ac).Data(want)
	if err != nil {
		t.Fatal(err)
	}
	var patch map[string]any
	if err := json.Unmarshal(data, &patch); err != nil {
		t.Fatal(err)
	}
	status, _ := patch["status"].(map[string]any)
	if len(patch) != 1 || status == nil {
		t.Fatalf("patch %s, want only status", data)
	}
	if len(status) != 2 || status["conditions"] == nil || status["provider"] == nil {
		t.Fatalf("status patch %s, want exactly conditions and provider", data)
	}
	provider := status["provider"].(map[string]any)
	if provider["contractRevision"] != float64(3) || provider["version"] != "1.1.0" {
		t.Errorf("provider patch %v, want contractRevision 3 and version 1.1.0", provider)
	}
}
