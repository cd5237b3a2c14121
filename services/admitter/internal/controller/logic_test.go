package controller

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
	conds := func(types ...string) []metav1.Condition {
		var out []metav1.Condition
		for _, t := range types {
			out = append(out, cond(t))
		}
		return out
	}
	deleted := metav1.Now()
	none := admitterv1.Decision_ACTION_UNSPECIFIED
	tests := []struct {
		name     string
		deleting bool
		status   v1alpha1.WorkloadStatus
		want     admitterv1.Decision_Action
	}{
		{"pending: nothing in force", false, v1alpha1.WorkloadStatus{}, none},
		{"reserved, waiting for checks: nothing in force", false, v1alpha1.WorkloadStatus{Admission: admission}, none},
		{"admitted", false, v1alpha1.WorkloadStatus{Admission: admission, Conditions: conds(v1alpha1.WorkloadAdmitted),
			PodSetInfos: []v1alpha1.PodSetInfo{{Name: "main"}}}, admitterv1.Decision_ACTION_ADMIT},
		{"evicting: quota still held, pods must stop", false,
			v1alpha1.WorkloadStatus{Admission: admission, Conditions: conds(v1alpha1.WorkloadEvicted)}, admitterv1.Decision_ACTION_EVICT},
		{"evicted and released: nothing in force", false,
			v1alpha1.WorkloadStatus{Conditions: conds(v1alpha1.WorkloadEvicted)}, none},
		{"finished", false, v1alpha1.WorkloadStatus{Admission: admission, Conditions: conds(v1alpha1.WorkloadAdmitted, v1alpha1.WorkloadFinished)}, none},
		{"deleted while pending: every pod must go", true, v1alpha1.WorkloadStatus{}, admitterv1.Decision_ACTION_DELETE},
		{"deleted while admitted", true, v1alpha1.WorkloadStatus{Admission: admission, Conditions: conds(v1alpha1.WorkloadAdmitted)},
			admitterv1.Decision_ACTION_DELETE},
		{"deleted after it finished: the grouper still confirms its pods are gone", true,
			v1alpha1.WorkloadStatus{Conditions: conds(v1alpha1.WorkloadFinished)}, admitterv1.Decision_ACTION_DELETE},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wl := &v1alpha1.Workload{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w", UID: "u"}, Status: tc.status}
			if tc.deleting {
				wl.DeletionTimestamp = &deleted
			}
			d := decisionFor(wl)
			if d.GetAction() != tc.want {
				t.Fatalf("action = %v, want %v", d.GetAction(), tc.want)
			}
			if d.GetAction() == admitterv1.Decision_ACTION_ADMIT && (d.GetClusterQueue() != "cq" || len(d.GetPodSetInfos()) != 1 || d.GetWorkload().GetUid() != "u") {
				t.Fatalf("admit decision = %v", d)
			}
			if d.GetAction() == admitterv1.Decision_ACTION_EVICT && d.GetReservationId() != "r" {
				t.Fatalf("evict decision carries reservation %q, want r", d.GetReservationId())
			}
		})
	}
}

func TestTruncateKeepsUTF8(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"abcdef", 3, "abc"},
		{"aé", 2, "a"},  // é is two bytes: never cut in half
		{"日本", 4, "日"},  // three-byte characters
		{"日本", 2, ""},   // no whole character fits
		{"a😀b", 4, "a"}, // four-byte character
		{"a😀b", 5, "a😀"},
	}
	for _, tc := range tests {
		got := truncate(tc.in, tc.n)
		if got != tc.want || !utf8.ValidString(got) {
			t.Errorf("truncate(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

func TestOweAddsOneReleasePerCheckOnce(t *testing.T) {
	wl := &v1alpha1.Workload{Status: v1alpha1.WorkloadStatus{
		Admission:       &v1alpha1.Admission{ReservationID: "r2"},
		AdmissionChecks: []v1alpha1.AdmissionCheckState{{Name: "a"}, {Name: "b"}},
		PendingReleases: []v1alpha1.PendingRelease{{Name: "a", ReservationID: "r1", Reason: v1alpha1.ReleaseEvicted}},
	}}
	owe(wl, v1alpha1.ReleaseFinished)
	owe(wl, v1alpha1.ReleaseFinished)
	got := fmt.Sprint(wl.Status.PendingReleases)
	want := fmt.Sprint([]v1alpha1.PendingRelease{
		{Name: "a", ReservationID: "r1", Reason: v1alpha1.ReleaseEvicted},
		{Name: "a", ReservationID: "r2", Reason: v1alpha1.ReleaseFinished},
		{Name: "b", ReservationID: "r2", Reason: v1alpha1.ReleaseFinished},
	})
	if got != want {
		t.Fatalf("pendingReleases = %s, want %s", got, want)
	}
	noReservation := &v1alpha1.Workload{Status: v1alpha1.WorkloadStatus{AdmissionChecks: []v1alpha1.AdmissionCheckState{{Name: "a"}}}}
	owe(noReservation, v1alpha1.ReleaseEvicted)
	if len(noReservation.Status.PendingReleases) != 0 {
		t.Fatalf("a workload without a reservation owes %v, want nothing", noReservation.Status.PendingReleases)
	}
}

func TestReleasesPruneOnlyAcknowledged(t *testing.T) {
	wl := &v1alpha1.Workload{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w", UID: "u"}, Status: v1alpha1.WorkloadStatus{
		PendingReleases: []v1alpha1.PendingRelease{
			{Name: "a", ReservationID: "r1", Reason: v1alpha1.ReleaseEvicted},
			{Name: "b", ReservationID: "r1", Reason: v1alpha1.ReleaseEvicted},
		},
	}}
	r := newReleases()
	defer r.q.ShutDown()
	if !r.outstanding(wl) {
		t.Fatal("nothing acknowledged yet, want outstanding")
	}
	items := itemsOf(wl)
	r.ack(items[0])
	status := wl.Status.DeepCopy()
	r.prune(status, wl)
	if len(status.PendingReleases) != 1 || status.PendingReleases[0].Name != "b" {
		t.Fatalf("after acknowledging a: %v, want only b", status.PendingReleases)
	}
	r.ack(items[1])
	if r.outstanding(wl) {
		t.Fatal("both acknowledged, want none outstanding")
	}
	r.forget(types.NamespacedName{Namespace: "ns", Name: "w"})
	if !r.outstanding(wl) {
		t.Fatal("after forget the acknowledgements are gone, want outstanding again")
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
