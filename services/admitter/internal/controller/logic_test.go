package controller

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
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
	checks := map[string]*v1alpha1.AdmissionCheck{"up": activeCheck("up", true), "down": activeCheck("down", false)}
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
		{"stopped", stopped, false, "Stopped", "stopPolicy Hold"},
		{"negative quota", negative, false, "NegativeQuota", "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: -2 must not be negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			active, reason, msg := queueActivity(tc.cq, flavors, checks)
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
		if got := strings.Join(checksFor(cq, asg(tc.flavor)), ","); got != tc.want {
			t.Errorf("checksFor(%s) = %s, want %s", tc.flavor, got, tc.want)
		}
	}
	if got := checksFor(&v1alpha1.ClusterQueue{}, asg("gpu")); got != nil {
		t.Errorf("no strategy: %v", got)
	}
}

func TestDecisionFor(t *testing.T) {
	admission := &v1alpha1.Admission{ClusterQueue: "cq", ReservationID: "r"}
	cond := func(t string) metav1.Condition { return metav1.Condition{Type: t, Status: metav1.ConditionTrue} }
	tests := []struct {
		name   string
		status v1alpha1.WorkloadStatus
		want   admitterv1.Decision_Action
	}{
		{"pending: nothing to say but EVICT (dropped unless in force)", v1alpha1.WorkloadStatus{}, admitterv1.Decision_ACTION_EVICT},
		{"reserved, waiting for checks: nothing", v1alpha1.WorkloadStatus{Admission: admission}, admitterv1.Decision_ACTION_UNSPECIFIED},
		{"admitted", v1alpha1.WorkloadStatus{Admission: admission, Conditions: []metav1.Condition{cond(v1alpha1.WorkloadAdmitted)},
			PodSetInfos: []v1alpha1.PodSetInfo{{Name: "main"}}}, admitterv1.Decision_ACTION_ADMIT},
		{"finished", v1alpha1.WorkloadStatus{Admission: admission, Conditions: []metav1.Condition{cond(v1alpha1.WorkloadAdmitted), cond(v1alpha1.WorkloadFinished)}},
			admitterv1.Decision_ACTION_FORGET},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wl := &v1alpha1.Workload{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w", UID: "u"}, Status: tc.status}
			d := decisionFor(wl)
			if d.GetAction() != tc.want {
				t.Fatalf("action = %v, want %v", d.GetAction(), tc.want)
			}
			if d.GetAction() == admitterv1.Decision_ACTION_ADMIT && (d.GetClusterQueue() != "cq" || len(d.GetPodSetInfos()) != 1 || d.GetWorkload().GetUid() != "u") {
				t.Fatalf("admit decision = %v", d)
			}
		})
	}
}

func TestRecordSucceededOnlyGrows(t *testing.T) {
	wl := &v1alpha1.Workload{Spec: v1alpha1.WorkloadSpec{PodSets: []v1alpha1.PodSet{{Name: "a", Count: 3}, {Name: "b", Count: 1}}}}
	recordSucceeded(wl, map[string]int32{"a": 2})
	recordSucceeded(wl, map[string]int32{"a": 1, "b": 5, "unknown": 4})
	got := map[string]int32{}
	for _, r := range wl.Status.ReclaimablePods {
		got[r.Name] = r.Count
	}
	if len(got) != 2 || got["a"] != 2 || got["b"] != 1 {
		t.Fatalf("reclaimablePods = %v, want a=2 (never lowered) b=1 (capped at count)", got)
	}
}

func TestWaitingForChecksMessage(t *testing.T) {
	wl := &v1alpha1.Workload{Status: v1alpha1.WorkloadStatus{AdmissionChecks: []v1alpha1.AdmissionCheckState{
		{Name: "budget", State: v1alpha1.CheckStatePending, Message: "over quota until 5pm"},
		{Name: "capacity", State: v1alpha1.CheckStateReady},
		{Name: "approval", State: v1alpha1.CheckStatePending},
	}}}
	want := "waiting for admission checks: approval (Pending: no answer yet); budget (Pending: over quota until 5pm)"
	if got := waitingForChecksMessage(wl); got != want {
		t.Fatalf("message = %q, want %q", got, want)
	}
}
