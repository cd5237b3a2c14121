package workload

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/podset"
	"github.com/sluice-dev/sluice/pkg/podshape"
)

// ErrJoinRefused wraps the reasons a pod may not join a pod set.
var ErrJoinRefused = errors.New("refused to join")

// Join is a pod asking to join a pod set of its workload although it is
// not shaped like the pod the set was built from.
type Join struct {
	// Pod names the pod, for messages; PodSet the set it joins.
	Pod, PodSet string
	// Requests is what the pod reserves.
	Requests corev1.ResourceList
	// Scheduling is nil when the grouper sent requests only (it predates
	// the other rules): then only requests are compared.
	Scheduling *JoinScheduling
}

// JoinScheduling is what of a joining pod, beyond its requests, must
// match its pod set and workload. Affinity is not compared: a Workload
// keeps none.
type JoinScheduling struct {
	NodeSelector map[string]string
	Tolerations  []corev1.Toleration
	Priority     int32
}

// CheckJoin says whether pod j may join pod set j.PodSet of wl: the set
// must exist; the pod may reserve no more of any resource than each of
// the set's pods does, since the quota held is the set's; and, when j
// carries its scheduling, its node selector and tolerations (apart from
// the API server's defaults) must equal the set's and its priority the
// workload's, since the set was admitted (flavors, checks, preemption)
// for those. Nothing about the pod is counted: the grouper keeps a role
// within its count. A refusal names every field that differs, with both
// values.
func CheckJoin(wl *v1alpha1.Workload, j Join) error {
	if IsFinished(wl) || IsDeleting(wl) {
		return fmt.Errorf("%w: workload %s has ended", ErrJoinRefused, wl.Name)
	}
	i := slices.IndexFunc(wl.Spec.PodSets, func(ps v1alpha1.PodSet) bool { return ps.Name == j.PodSet })
	if i < 0 {
		names := make([]string, len(wl.Spec.PodSets))
		for k, ps := range wl.Spec.PodSets {
			names[k] = ps.Name
		}
		return fmt.Errorf("%w: workload %s has no pod set %q (it has %v)", ErrJoinRefused, wl.Name, j.PodSet, names)
	}
	tmpl := &wl.Spec.PodSets[i].Template
	var problems []string
	if over := overRequests(j.Requests, tmpl.Requests); len(over) > 0 {
		problems = append(problems, fmt.Sprintf("pod %s requests more than pod set %s of workload %s reserves: %v",
			j.Pod, j.PodSet, wl.Name, over))
	}
	if s := j.Scheduling; s != nil {
		var diffs []podshape.Difference
		checks := []*podshape.Difference{
			podshape.NodeSelector(s.NodeSelector, tmpl.NodeSelector),
			podshape.Tolerations(s.Tolerations, tmpl.Tolerations),
		}
		// Under a WorkloadPriorityClass the workload's priority is the
		// class's, not any pod's; the pods agree on the class instead.
		if WorkloadPriorityClass(wl) == "" {
			checks = append(checks, podshape.Priority(s.Priority, Priority(wl)))
		}
		for _, d := range checks {
			if d != nil {
				diffs = append(diffs, *d)
			}
		}
		if len(diffs) > 0 {
			problems = append(problems, fmt.Sprintf("pod %s does not match pod set %s of workload %s: %s",
				j.Pod, j.PodSet, wl.Name, podshape.Join(diffs)))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrJoinRefused, strings.Join(problems, "; "))
	}
	return nil
}

// overRequests lists the resources of requests above what reserved holds,
// each with both quantities.
func overRequests(requests, reserved corev1.ResourceList) []string {
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
	return over
}

// JoinFromProto reads a pod asking to join a pod set. Errors name the
// request field and the rule it breaks.
func JoinFromProto(j *admitterv1.PodJoin) (Join, error) {
	if j.GetPodName() == "" {
		return Join{}, errors.New("join.pod_name is required")
	}
	if errs := validation.IsDNS1123Label(j.GetPodSet()); len(errs) > 0 {
		return Join{}, fmt.Errorf("join.pod_set %q: %s", j.GetPodSet(), errs[0])
	}
	requests := corev1.ResourceList{}
	for _, name := range slices.Sorted(maps.Keys(j.GetRequests())) {
		q, err := resource.ParseQuantity(j.GetRequests()[name])
		if err != nil {
			return Join{}, fmt.Errorf("join.requests[%q] %q: not a quantity: %w", name, j.GetRequests()[name], err)
		}
		if q.Sign() < 0 {
			return Join{}, fmt.Errorf("join.requests[%q] %q: must not be negative", name, j.GetRequests()[name])
		}
		requests[corev1.ResourceName(name)] = q
	}
	out := Join{Pod: j.GetPodName(), PodSet: j.GetPodSet(), Requests: requests}
	if s := j.GetScheduling(); s != nil {
		out.Scheduling = &JoinScheduling{
			NodeSelector: s.GetNodeSelector(),
			Tolerations:  podset.TolerationsFromProto(s.GetTolerations()),
			Priority:     s.GetPriority(),
		}
	}
	return out, nil
}
