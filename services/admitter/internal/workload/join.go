package workload

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

// ErrJoinRefused wraps the reasons a pod may not join a pod set.
var ErrJoinRefused = errors.New("refused to join")

// CheckJoin says whether a pod that requests requests may join pod set
// podSet of wl: the set must exist, and the pod may reserve no more of
// any resource than each of the set's pods does, since the quota held is
// the set's. Nothing about the pod is counted: the grouper keeps a role
// within its count.
func CheckJoin(wl *v1alpha1.Workload, pod, podSet string, requests corev1.ResourceList) error {
	if IsFinished(wl) || IsDeleting(wl) {
		return fmt.Errorf("%w: workload %s has ended", ErrJoinRefused, wl.Name)
	}
	i := slices.IndexFunc(wl.Spec.PodSets, func(ps v1alpha1.PodSet) bool { return ps.Name == podSet })
	if i < 0 {
		names := make([]string, len(wl.Spec.PodSets))
		for j, ps := range wl.Spec.PodSets {
			names[j] = ps.Name
		}
		return fmt.Errorf("%w: workload %s has no pod set %q (it has %v)", ErrJoinRefused, wl.Name, podSet, names)
	}
	reserved := wl.Spec.PodSets[i].Template.Requests
	var over []string
	for _, name := range slices.Sorted(maps.Keys(requests)) {
		q := requests[name]
		have, ok := reserved[name]
		if q.IsZero() || (ok && q.Cmp(have) <= 0) {
			continue
		}
		if !ok {
			over = append(over, fmt.Sprintf("%s %s (the pod set reserves none)", name, q.String()))
			continue
		}
		over = append(over, fmt.Sprintf("%s %s (the pod set reserves %s per pod)", name, q.String(), have.String()))
	}
	if len(over) > 0 {
		return fmt.Errorf("%w: pod %s requests more than pod set %s of workload %s reserves: %v",
			ErrJoinRefused, pod, podSet, wl.Name, over)
	}
	return nil
}

// JoinFromProto reads what a pod asking to join a pod set requests.
// Errors name the request field and the rule it breaks.
func JoinFromProto(j *admitterv1.PodJoin) (corev1.ResourceList, error) {
	if j.GetPodName() == "" {
		return nil, errors.New("join.pod_name is required")
	}
	if errs := validation.IsDNS1123Label(j.GetPodSet()); len(errs) > 0 {
		return nil, fmt.Errorf("join.pod_set %q: %s", j.GetPodSet(), errs[0])
	}
	requests := corev1.ResourceList{}
	for _, name := range slices.Sorted(maps.Keys(j.GetRequests())) {
		q, err := resource.ParseQuantity(j.GetRequests()[name])
		if err != nil {
			return nil, fmt.Errorf("join.requests[%q] %q: not a quantity: %w", name, j.GetRequests()[name], err)
		}
		if q.Sign() < 0 {
			return nil, fmt.Errorf("join.requests[%q] %q: must not be negative", name, j.GetRequests()[name])
		}
		requests[corev1.ResourceName(name)] = q
	}
	return requests, nil
}
