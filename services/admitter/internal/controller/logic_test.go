package controller

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

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
			if d.GetAction() == admitterv1.Decision_ACTION_DELETE && d.GetFinished() {
				t.Fatalf("a single pod's delete decision says finished: its gated pod is its own")
			}
			// The same Workload as a pod group's: finished says whether it
			// had finished.
			wl.Labels = map[string]string{v1alpha1.PodGroupLabel: "w"}
			group := decisionFor(wl)
			if finished := meta.IsStatusConditionTrue(tc.status.Conditions, v1alpha1.WorkloadFinished); group.GetAction() == admitterv1.Decision_ACTION_DELETE && group.GetFinished() != finished {
				t.Fatalf("a group's delete decision says finished=%v, want %v", group.GetFinished(), finished)
			}
		})
	}
}

func TestAdmitDecisionCarriesPodSetCountsAndAdmissionTime(t *testing.T) {
	admittedAt := metav1.NewTime(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	wl := &v1alpha1.Workload{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "g", UID: "u"},
		Spec:       v1alpha1.WorkloadSpec{PodSets: []v1alpha1.PodSet{{Name: "aaaa", Count: 1}, {Name: "bbbb", Count: 4}}},
		Status: v1alpha1.WorkloadStatus{
			Admission:   &v1alpha1.Admission{ClusterQueue: "cq", ReservationID: "r"},
			Conditions:  []metav1.Condition{{Type: v1alpha1.WorkloadAdmitted, Status: metav1.ConditionTrue, LastTransitionTime: admittedAt}},
			PodSetInfos: []v1alpha1.PodSetInfo{{Name: "aaaa"}, {Name: "bbbb"}},
		},
	}
	d := decisionFor(wl)
	got := d.GetPodSetCounts()
	if len(got) != 2 || got["aaaa"] != 1 || got["bbbb"] != 4 {
		t.Fatalf("pod_set_counts = %v, want aaaa=1 bbbb=4", got)
	}
	if !d.GetAdmittedAt().AsTime().Equal(admittedAt.Time) {
		t.Fatalf("admitted_at = %v, want the Admitted condition's transition %v", d.GetAdmittedAt().AsTime(), admittedAt)
	}
}
