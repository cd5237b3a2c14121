// Package podgroup reads the keys that make pods one KEP-976 pod group:
// the group name label, the total-count annotation, the pod-group-sets
// declaration with the role label, and the retriable-in-group annotation. The webhook refuses pods whose keys do not
// parse; the grouper assembles groups from the pods whose keys do, with the
// same rules.
package podgroup

import (
	"errors"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/sluice-dev/sluice/pkg/podkeys"
)

// Errors of ParseTotalCount.
var (
	ErrCountNotInteger = errors.New("must be a decimal integer")
	ErrCountTooSmall   = errors.New("group total count should be greater than zero")
)

// ParseTotalCount reads a total-count annotation: a decimal integer of at
// least 1 that fits in 32 bits.
func ParseTotalCount(s string) (int32, error) {
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil {
		return 0, ErrCountNotInteger
	}
	if n < 1 {
		return 0, ErrCountTooSmall
	}
	return int32(n), nil
}

// Name returns the group pod belongs to: the one its group-name label
// names, else the scheduler's PodGroup its spec.schedulingGroup names (its
// gang is one unit of admission too). ok is false for a single pod.
func Name(pod *corev1.Pod) (string, bool) {
	if name := pod.Labels[podkeys.PodGroupNameLabel]; name != "" {
		return name, true
	}
	name := SchedulingGroup(pod)
	return name, name != ""
}

// SchedulingGroup returns the name of the scheduler's PodGroup pod names
// in spec.schedulingGroup; empty when it names none.
func SchedulingGroup(pod *corev1.Pod) string {
	if sg := pod.Spec.SchedulingGroup; sg != nil && sg.PodGroupName != nil {
		return *sg.PodGroupName
	}
	return ""
}

// GangSized reports whether pod's group takes its size from its PodGroup's
// gang: the pod names a PodGroup and no group of its own, or names its
// group's PodGroup, and declares no total count and no pod sets.
func GangSized(pod *corev1.Pod) bool {
	name, ok := Name(pod)
	if !ok || SchedulingGroup(pod) != name || Declared(pod) {
		return false
	}
	_, hasCount := pod.Annotations[podkeys.PodGroupTotalCountAnnotation]
	return !hasCount
}

// TotalCount returns the number of pods pod's group waits for.
func TotalCount(pod *corev1.Pod) (int32, error) {
	return ParseTotalCount(pod.Annotations[podkeys.PodGroupTotalCountAnnotation])
}

// Retriable reports whether a failure of pod may be retried with a
// replacement: unless its retriable-in-group annotation is "false".
func Retriable(pod *corev1.Pod) bool {
	return pod.Annotations[podkeys.RetriableInGroupAnnotation] != "false"
}

// Declared reports whether pod belongs to a group declared by the
// pod-group-sets annotation (KEP-976 Story 3): it carries the declaration,
// or names its role in the group without a total count — a worker created
// after the pod that declared it.
func Declared(pod *corev1.Pod) bool {
	if _, ok := pod.Annotations[podkeys.PodGroupSetsAnnotation]; ok {
		return true
	}
	_, hasRole := pod.Labels[podkeys.PodGroupRoleLabel]
	_, hasCount := pod.Annotations[podkeys.PodGroupTotalCountAnnotation]
	return hasRole && !hasCount
}

// Active reports whether pod counts toward its group: it has not failed,
// and it is not being deleted before it reached a node (such a pod never
// runs).
func Active(pod *corev1.Pod) bool {
	if pod.Status.Phase == corev1.PodFailed {
		return false
	}
	return pod.DeletionTimestamp == nil || pod.Spec.NodeName != ""
}

// Ended reports whether pod terminated: it succeeded or failed.
func Ended(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// Released reports whether pod ended and sluice's finalizer is off it:
// sluice is done with it, and it belongs to a run of its group that is
// over.
func Released(pod *corev1.Pod) bool {
	return Ended(pod) && !slices.Contains(pod.Finalizers, podkeys.ManagedFinalizer)
}
