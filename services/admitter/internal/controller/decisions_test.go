package controller

import (
	"maps"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

// TestAdmitDecisionCarriesWhatPodsMustFit: an admission names the
// Workload's LocalQueue, its priority (0 when unset, still carried: unset
// means an older admitter) and each pod set's role hash, which the grouper
// checks every pod against before ungating it.
func TestAdmitDecisionCarriesWhatPodsMustFit(t *testing.T) {
	admitted := func(priority *int32) *v1alpha1.Workload {
		return &v1alpha1.Workload{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "g", UID: "u"},
			Spec: v1alpha1.WorkloadSpec{
				QueueName: "team-a",
				Priority:  priority,
				PodSets: []v1alpha1.PodSet{
					{Name: "driver", Count: 1, Template: v1alpha1.PodSetTemplate{RoleHash: "0a1b2c3d"}},
					{Name: "worker", Count: 3, Template: v1alpha1.PodSetTemplate{RoleHash: "4e5f6a7b"}},
					{Name: "legacy", Count: 1}, // built without a hash: nothing to check
				},
			},
			Status: v1alpha1.WorkloadStatus{
				Admission:  &v1alpha1.Admission{ClusterQueue: "cq", ReservationID: "r"},
				Conditions: []metav1.Condition{{Type: v1alpha1.WorkloadAdmitted, Status: metav1.ConditionTrue}},
			},
		}
	}
	d := decisionFor(admitted(ptr.To[int32](100)))
	if d.GetQueueName() != "team-a" {
		t.Errorf("queue_name = %q, want team-a", d.GetQueueName())
	}
	if d.Priority == nil || d.GetPriority() != 100 {
		t.Errorf("priority = %v, want 100", d.Priority)
	}
	if want := map[string]string{"driver": "0a1b2c3d", "worker": "4e5f6a7b"}; !maps.Equal(d.GetPodSetRoleHashes(), want) {
		t.Errorf("pod_set_role_hashes = %v, want %v", d.GetPodSetRoleHashes(), want)
	}
	if d := decisionFor(admitted(nil)); d.Priority == nil || d.GetPriority() != 0 {
		t.Errorf("priority of a Workload without one = %v, want 0, set", d.Priority)
	}

	pending := admitted(nil)
	pending.Status = v1alpha1.WorkloadStatus{}
	deleted := admitted(nil)
	deleted.DeletionTimestamp = ptr.To(metav1.Now())
	for _, wl := range []*v1alpha1.Workload{pending, deleted} {
		if d := decisionFor(wl); d != nil && (d.GetQueueName() != "" || d.Priority != nil || d.GetPodSetRoleHashes() != nil) {
			t.Errorf("decision %v carries what only an admission needs", d)
		}
	}
}
