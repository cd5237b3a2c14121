package scheduler

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/services/admitter/internal/quota"
)

func activeCheck(name string, active bool) *v1alpha1.AdmissionCheck {
	status := metav1.ConditionFalse
	if active {
		status = metav1.ConditionTrue
	}
	return &v1alpha1.AdmissionCheck{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: v1alpha1.AdmissionCheckStatus{
		Conditions: []metav1.Condition{{Type: v1alpha1.AdmissionCheckActive, Status: status, Message: "provider down"}},
	}}
}

// inactiveFor is an AdmissionCheck with failurePolicy policy whose Active
// condition is False for reason.
func inactiveFor(name string, policy v1alpha1.FailurePolicy, reason, message string) *v1alpha1.AdmissionCheck {
	ac := activeCheck(name, false)
	ac.Spec.FailurePolicy = policy
	ac.Status.Conditions[0].Reason, ac.Status.Conditions[0].Message = reason, message
	return ac
}

func TestQueueActivity(t *testing.T) {
	cq := func(flavor string, checks ...string) *v1alpha1.ClusterQueue {
		q := &v1alpha1.ClusterQueue{Spec: v1alpha1.ClusterQueueSpec{ResourceGroups: []v1alpha1.ResourceGroup{{
			CoveredResources: []corev1.ResourceName{"cpu"}, Flavors: []v1alpha1.FlavorQuotas{{Name: flavor}},
		}}}}
		if len(checks) > 0 {
			q.Spec.AdmissionChecksStrategy = &v1alpha1.AdmissionChecksStrategy{}
			for _, c := range checks {
				q.Spec.AdmissionChecksStrategy.AdmissionChecks = append(q.Spec.AdmissionChecksStrategy.AdmissionChecks, v1alpha1.AdmissionCheckStrategyRule{Name: c})
			}
		}
		return q
	}
	flavors := map[string]*v1alpha1.ResourceFlavor{"f": {}}
	advisoryDown := activeCheck("advisory-down", false)
	advisoryDown.Spec.FailurePolicy = v1alpha1.IgnoreFailure
	advisoryUnreachable := inactiveFor("advisory-unreachable", v1alpha1.IgnoreFailure, "ProviderUnreachable", "the provider did not answer")
	advisoryUnverified := inactiveFor("advisory-unverified", v1alpha1.IgnoreFailure, v1alpha1.ReasonTLSHandshakeFailed,
		"TLS handshake with the provider failed: x509: certificate signed by unknown authority")
	advisoryMisconfigured := inactiveFor("advisory-misconfigured", v1alpha1.IgnoreFailure, v1alpha1.ReasonTLSConfigInvalid,
		"the provider's transport settings cannot be used: spec.tls.caSecretRef: Secret sluice-system/ca not found")
	unverified := inactiveFor("unverified", v1alpha1.FailClosed, v1alpha1.ReasonTLSHandshakeFailed, "TLS handshake with the provider failed: x509")
	checks := map[string]*v1alpha1.AdmissionCheck{"up": activeCheck("up", true), "down": activeCheck("down", false), "advisory-down": advisoryDown}
	for _, ac := range []*v1alpha1.AdmissionCheck{advisoryUnreachable, advisoryUnverified, advisoryMisconfigured, unverified} {
		checks[ac.Name] = ac
	}
	stopped := cq("f")
	stopped.Spec.StopPolicy = ptr.To(v1alpha1.Hold)
	negative := cq("f")
	negative.Spec.ResourceGroups[0].Flavors[0].Resources = []v1alpha1.ResourceQuota{{Name: "cpu", NominalQuota: resource.MustParse("-2")}}
	tests := []struct {
		name    string
		cq      *v1alpha1.ClusterQueue
		active  bool
		reason  string
		message string
	}{
		{"ready", cq("f", "up"), true, "Ready", "Can admit"},
		{"missing flavor", cq("gone"), false, "FlavorNotFound", "resource flavor gone doesn't exist"},
		{"missing check", cq("f", "nowhere"), false, "AdmissionCheckNotFound", "admission check nowhere doesn't exist"},
		{"inactive check", cq("f", "down"), false, "AdmissionCheckInactive", "admission check down is not active: provider down"},
		// failurePolicy Ignore counts a provider that cannot answer as
		// Ready, so it does not hold the queue back either.
		{"inactive check with failurePolicy Ignore", cq("f", "up", "advisory-down"), true, "Ready", "Can admit"},
		{"inactive checks, one with failurePolicy Ignore", cq("f", "advisory-down", "down"), false, "AdmissionCheckInactive",
			"admission check down is not active: provider down"},
		{"unreachable check with failurePolicy Ignore", cq("f", "advisory-unreachable"), true, "Ready", "Can admit"},
		// A TLS failure is not a provider that cannot answer: Ignore does
		// not cover it, and the message names the check and the reason.
		{"unverified provider with failurePolicy Ignore", cq("f", "advisory-unverified"), false, "AdmissionCheckInactive",
			"admission check advisory-unverified is not active (TLSHandshakeFailed): TLS handshake with the provider failed: x509: certificate signed by unknown authority"},
		{"unusable TLS settings with failurePolicy Ignore", cq("f", "advisory-misconfigured"), false, "AdmissionCheckInactive",
			"admission check advisory-misconfigured is not active (TLSConfigInvalid): the provider's transport settings cannot be used: spec.tls.caSecretRef: Secret sluice-system/ca not found"},
		{"unverified provider", cq("f", "up", "unverified"), false, "AdmissionCheckInactive",
			"admission check unverified is not active (TLSHandshakeFailed): TLS handshake with the provider failed: x509"},
		{"stopped", stopped, false, "Stopped", "stopPolicy Hold"},
		{"negative quota", negative, false, "NegativeQuota", "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: -2 must not be negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			active, reason, msg := Activity(tc.cq, flavors, checks)
			if active != tc.active || reason != tc.reason || !strings.Contains(msg, tc.message) {
				t.Fatalf("queueActivity = %v %q %q, want %v %q containing %q", active, reason, msg, tc.active, tc.reason, tc.message)
			}
		})
	}
}

func TestChecksFor(t *testing.T) {
	cq := &v1alpha1.ClusterQueue{Spec: v1alpha1.ClusterQueueSpec{AdmissionChecksStrategy: &v1alpha1.AdmissionChecksStrategy{
		AdmissionChecks: []v1alpha1.AdmissionCheckStrategyRule{
			{Name: "z-all"}, {Name: "gpu-only", OnFlavors: []string{"gpu"}}, {Name: "a-spot", OnFlavors: []string{"spot", "other"}},
		},
	}}}
	asg := func(flavor string) quota.Assignment {
		return quota.Assignment{PodSets: []v1alpha1.PodSetAssignment{{Name: "main", Flavors: map[corev1.ResourceName]string{"cpu": flavor}}}}
	}
	tests := []struct {
		flavor string
		want   string
	}{
		{"gpu", "gpu-only,z-all"},
		{"spot", "a-spot,z-all"},
		{"plain", "z-all"},
	}
	for _, tc := range tests {
		if got := strings.Join(ChecksFor(cq, asg(tc.flavor)), ","); got != tc.want {
			t.Errorf("ChecksFor(%s) = %s, want %s", tc.flavor, got, tc.want)
		}
	}
	if got := ChecksFor(&v1alpha1.ClusterQueue{}, asg("gpu")); got != nil {
		t.Errorf("no strategy: %v", got)
	}
}
