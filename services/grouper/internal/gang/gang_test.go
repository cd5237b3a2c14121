package gang

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	schedulingv1alpha2 "k8s.io/api/scheduling/v1alpha2"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
)

func groupPod(total, podGroupName string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Namespace: "ns", Name: "p",
		Labels:      map[string]string{podkeys.PodGroupNameLabel: "train"},
		Annotations: map[string]string{},
	}}
	if total != "" {
		p.Annotations[podkeys.PodGroupTotalCountAnnotation] = total
	}
	if podGroupName != "" {
		p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: &podGroupName}
	}
	return p
}

func TestMinCount(t *testing.T) {
	tests := []struct {
		name   string
		pod    *corev1.Pod
		group  string
		want   int32
		wantOK bool
	}{
		{name: "linked to its group, with a total count", pod: groupPod("3", "train"), group: "train", want: 3, wantOK: true},
		{name: "not linked (webhook flag off, or feature gate off)", pod: groupPod("3", ""), group: "train"},
		{name: "linked to another PodGroup", pod: groupPod("3", "mine"), group: "train"},
		{name: "declared group without a total count", pod: groupPod("", "train"), group: "train"},
		{name: "unreadable total count", pod: groupPod("three", "train"), group: "train"},
		{name: "no group", pod: groupPod("3", "train"), group: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := MinCount(tc.pod, tc.group)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("MinCount = %d, %v; want %d, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestPodGroup(t *testing.T) {
	got := PodGroup("ns", "train", 3, Owner{Name: "train", UID: "uid-1"})
	want := &schedulingv1alpha2.PodGroup{
		TypeMeta: metav1.TypeMeta{APIVersion: "scheduling.k8s.io/v1alpha2", Kind: "PodGroup"},
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: "train",
			Labels: map[string]string{v1alpha1.PodGroupLabel: "train"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "sluice.dev/v1alpha1", Kind: "Workload", Name: "train", UID: "uid-1",
				Controller: ptr.To(false), BlockOwnerDeletion: ptr.To(false),
			}},
		},
		Spec: schedulingv1alpha2.PodGroupSpec{SchedulingPolicy: schedulingv1alpha2.PodGroupSchedulingPolicy{
			Gang: &schedulingv1alpha2.GangSchedulingPolicy{MinCount: 3},
		}},
	}
	if !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("PodGroup =\n%+v\nwant\n%+v", got, want)
	}
}

func TestStandingOf(t *testing.T) {
	owner := Owner{Name: "train", UID: "new"}
	owned := func(apiVersion, kind, name, uid string) *schedulingv1alpha2.PodGroup {
		pg := PodGroup("ns", "train", 3, Owner{Name: name, UID: types.UID(uid)})
		pg.OwnerReferences[0].APIVersion, pg.OwnerReferences[0].Kind = apiVersion, kind
		return pg
	}
	deleting := PodGroup("ns", "train", 3, owner)
	deleting.DeletionTimestamp = ptr.To(metav1.Now())
	noOwner := PodGroup("ns", "train", 3, owner)
	noOwner.OwnerReferences = nil
	tests := []struct {
		name string
		pg   *schedulingv1alpha2.PodGroup
		want Standing
	}{
		{"owned by the run's Workload", PodGroup("ns", "train", 3, owner), Current},
		{"owned by an earlier run's Workload", owned("sluice.dev/v1alpha1", "Workload", "train", "old"), Earlier},
		{"the run's, but being deleted", deleting, Earlier},
		{"made by someone else", noOwner, Foreign},
		{"owned by another kind of the same name", owned("batch/v1", "Job", "train", "new"), Foreign},
		{"owned by another Workload", owned("sluice.dev/v1alpha1", "Workload", "other", "new"), Foreign},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := StandingOf(tc.pg, owner); got != tc.want {
				t.Errorf("StandingOf = %v, want %v", got, tc.want)
			}
		})
	}
}
