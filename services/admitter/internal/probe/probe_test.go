package probe

import (
	"errors"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
