// Package gang decides which KEP-976 groups get a scheduler gang and
// builds it: a scheduling.k8s.io/v1alpha2 PodGroup named after the group,
// whose gang minCount is the group's total count, owned by the group's
// sluice Workload so that garbage collection removes it with the
// Workload. It also tells whether a PodGroup found under that name is the
// one of the current run.
package gang

import (
	corev1 "k8s.io/api/core/v1"
	schedulingv1alpha2 "k8s.io/api/scheduling/v1alpha2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/podgroup"
)

// workloadKind is the kind of the PodGroup's owner.
const workloadKind = "Workload"

// MinCount returns the gang size of pod's group when the pod asks for a
// gang: it names the PodGroup of its own group (the webhook sets that
// with --gang-scheduling) and carries a valid total count. A pod that
// names another PodGroup, or none, or belongs to a group declared with
// pod sets (no total count) gets no gang from sluice.
func MinCount(pod *corev1.Pod, group string) (int32, bool) {
	sg := pod.Spec.SchedulingGroup
	if group == "" || sg == nil || sg.PodGroupName == nil || *sg.PodGroupName != group {
		return 0, false
	}
	n, err := podgroup.TotalCount(pod)
	if err != nil {
		return 0, false
	}
	return n, true
}

// Owner is the sluice Workload a PodGroup belongs to.
type Owner struct {
	Name string
	UID  types.UID
}

// PodGroup builds the PodGroup of group in namespace: a gang of minCount,
// labelled with the group's name, owned by the Workload. The reference
// neither blocks the Workload's deletion (the Workload goes at once and
// the PodGroup after it, in the background: nothing waits on the
// PodGroup, and blocking would need the right to update the Workload's
// finalizers) nor claims to control the PodGroup (the Workload does not
// manage it). It names no podGroupTemplateRef: the PodGroup stands alone.
func PodGroup(namespace, group string, minCount int32, owner Owner) *schedulingv1alpha2.PodGroup {
	return &schedulingv1alpha2.PodGroup{
		TypeMeta: metav1.TypeMeta{APIVersion: schedulingv1alpha2.SchemeGroupVersion.String(), Kind: "PodGroup"},
		ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace,
			Name:      group,
			Labels:    map[string]string{v1alpha1.PodGroupLabel: group},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion:         v1alpha1.GroupVersion.String(),
				Kind:               workloadKind,
				Name:               owner.Name,
				UID:                owner.UID,
				Controller:         ptr.To(false),
				BlockOwnerDeletion: ptr.To(false),
			}},
		},
		Spec: schedulingv1alpha2.PodGroupSpec{
			SchedulingPolicy: schedulingv1alpha2.PodGroupSchedulingPolicy{
				Gang: &schedulingv1alpha2.GangSchedulingPolicy{MinCount: minCount},
			},
		},
	}
}

// Standing says what an existing PodGroup of a group's name is to the
// group's current run.
type Standing int

const (
	// Current: owned by the run's Workload; the gang is in place.
	Current Standing = iota
	// Earlier: owned by another sluice Workload of that name (an earlier
	// run, now deleted) or being deleted. It cannot be replaced while the
	// run's pods name it (kube-controller-manager keeps a PodGroup that
	// active pods name), so the run uses it until it goes.
	Earlier
	// Foreign: not owned by a sluice Workload. Someone else made it; the
	// pods use it as it is.
	Foreign
)

// String names the standing, as a metric label value.
func (s Standing) String() string {
	switch s {
	case Current:
		return "existing"
	case Earlier:
		return "earlier"
	default:
		return "foreign"
	}
}

// StandingOf classifies existing against the run's Workload.
func StandingOf(existing *schedulingv1alpha2.PodGroup, owner Owner) Standing {
	if existing.DeletionTimestamp != nil {
		return Earlier
	}
	standing := Foreign
	for _, ref := range existing.OwnerReferences {
		if ref.APIVersion != v1alpha1.GroupVersion.String() || ref.Kind != workloadKind || ref.Name != owner.Name {
			continue
		}
		if ref.UID == owner.UID {
			return Current
		}
		standing = Earlier
	}
	return standing
}

// MinCountOf is the gang size of pg; 0 when it is no gang.
func MinCountOf(pg *schedulingv1alpha2.PodGroup) int32 {
	if g := pg.Spec.SchedulingPolicy.Gang; g != nil {
		return g.MinCount
	}
	return 0
}
