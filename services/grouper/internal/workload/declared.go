package workload

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	sluicev1 "github.com/sluice-dev/sluice/gen/sluice/v1"
	"github.com/sluice-dev/sluice/pkg/podgroup"
	"github.com/sluice-dev/sluice/pkg/podkeys"
)

// ForDeclared builds the workload of group name declared by the
// pod-group-sets annotation of pod (KEP-976 Story 3): one pod set per
// declared set, named as declared, counting its declared pods — most of
// which do not exist yet. A set without a template is shaped like pod; the
// others like their template. The queue, priorities, maximum execution
// time and trace come from pod.
func ForDeclared(name string, pod *corev1.Pod) (*sluicev1.Workload, error) {
	queue := pod.Labels[podkeys.QueueNameLabel]
	if queue == "" {
		return nil, fmt.Errorf("group %s/%s: pod %s: label %s is empty: a queued pod must name its LocalQueue",
			pod.Namespace, name, pod.Name, podkeys.QueueNameLabel)
	}
	decl, err := Declaration(pod)
	if err != nil {
		return nil, err
	}
	sets := make([]*sluicev1.PodSet, 0, len(decl))
	for _, d := range decl {
		shape := pod
		if d.Template != nil {
			shape = fromTemplate(pod.Namespace, d.Template)
		}
		set, err := podSetFor(d.Name, d.Count, shape)
		if err != nil {
			return nil, fmt.Errorf("group %s/%s: pod set %s: %w", pod.Namespace, name, d.Name, err)
		}
		sets = append(sets, set)
	}
	return groupWorkload(pod.Namespace, name, pod, sets)
}

// Declaration reads the pod-group-sets annotation of pod.
func Declaration(pod *corev1.Pod) ([]podgroup.Set, error) {
	sets, errs := podgroup.ParseSets(pod.Annotations[podkeys.PodGroupSetsAnnotation])
	if len(errs) > 0 {
		return nil, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, errs.ToAggregate())
	}
	return sets, nil
}

// DeclaredRole returns the pod set a pod of a declared group belongs to:
// the one its pod-group-role label names. The webhook labels the declaring
// pod with its own role; for one it missed, the role is read from its
// declaration.
func DeclaredRole(pod *corev1.Pod) (string, error) {
	if role, ok := pod.Labels[podkeys.PodGroupRoleLabel]; ok {
		return role, nil
	}
	sets, err := Declaration(pod)
	if err != nil {
		return "", err
	}
	role, ferr := podgroup.OwnRole(pod.Labels, sets)
	if ferr != nil {
		return "", fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, ferr)
	}
	return role, nil
}

// fromTemplate is a pod shaped like a declared template, to build its pod
// set the way a real pod's is built. A role hash the template names is
// dropped: the set's is computed from the template's spec, since pods that
// hash like their set run in it without asking to join, and a hash of the
// user's choosing would let pods of another shape pass for the role.
func fromTemplate(namespace string, t *corev1.PodTemplateSpec) *corev1.Pod {
	pod := &corev1.Pod{ObjectMeta: *t.ObjectMeta.DeepCopy(), Spec: *t.Spec.DeepCopy()}
	pod.Namespace = namespace
	delete(pod.Annotations, podkeys.RoleHashAnnotation)
	return pod
}

// Requests renders what one pod reserves the way a pod set's requests are
// rendered, for comparing a pod with the pod set it joins.
func Requests(pod *corev1.Pod) map[string]string {
	return quantities(PodRequests(pod))
}
