// Package fit says whether a gated pod may run on its workload's admission
// in the pod set it is counted in. Kubernetes lets a gated pod's node
// selector, tolerations and affinity change, and a pod may name a role it
// is not shaped for; a pod set was admitted (quota, flavors, checks) for
// pods shaped like the one it was built from. So before a pod is ungated
// its queue and priority are compared with the workload's, and the role
// hash of its spec, computed then, with the one its pod set was built
// with.
//
// Check is on the hot path: one role hash per pod, nothing read. Explain,
// which names what changed, runs only for a pod that does not fit.
package fit

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/pkg/podshape"
	"github.com/sluice-dev/sluice/pkg/rolehash"
	"github.com/sluice-dev/sluice/services/grouper/internal/workload"
)

// Verdict is how a gated pod stands against the pod set it is to run in.
type Verdict struct {
	// PodSet is the set's name.
	PodSet string
	// Hash is the pod's role hash, computed from its spec now; SetHash is
	// the one its pod set was built with, from the decision (empty when
	// the decision carries none: an older admitter).
	Hash, SetHash string
	// Problem, when set, keeps the pod gated whatever its shape: its queue
	// (or, for a single pod, its priority) differs from the workload's.
	Problem *podshape.Difference
}

// SameShape reports whether the pod hashes like the pod its set was built
// from: it is one of the pods the set was admitted for.
func (v Verdict) SameShape() bool { return v.SetHash != "" && v.Hash == v.SetHash }

// Fits reports whether the pod may be ungated without asking anyone: it
// has no problem and is shaped like its set, or the decision carries no
// hash to compare with.
func (v Verdict) Fits() bool { return v.Problem == nil && (v.SetHash == "" || v.SameShape()) }

// QueueMoved reports whether the pod names another LocalQueue than its
// workload: the workload is to follow it there, not to run it here.
func (v Verdict) QueueMoved() bool {
	return v.Problem != nil && v.Problem.Field == podkeys.QueueNameLabel
}

// Key identifies the problem, to tell it once: equal keys are the same
// problem. Empty for a pod that fits.
func (v Verdict) Key() string {
	switch {
	case v.Problem != nil:
		return v.Problem.String()
	case v.Fits():
		return ""
	default:
		return "hash " + v.PodSet + " " + v.Hash + " " + v.SetHash
	}
}

// Check compares pod with pod set podSet of admission d: the pod's queue
// label with the workload's LocalQueue, with priority its spec.priority (0
// when unset) with the workload's, and its role hash with the set's. Each
// is compared only when d carries it. priority is false for a group, whose
// roles may differ in priority (each role's is in its hash). The pod's
// hash is computed unless its queue or priority already keeps it gated.
func Check(pod *corev1.Pod, d *admitterv1.Decision, podSet string, priority bool) (Verdict, error) {
	v := Verdict{PodSet: podSet, SetHash: d.GetPodSetRoleHashes()[podSet]}
	if want := d.GetQueueName(); want != "" {
		if got := pod.Labels[podkeys.QueueNameLabel]; got != want {
			v.Problem = &podshape.Difference{Field: podkeys.QueueNameLabel, Pod: got, Want: want, Of: "workload"}
			return v, nil
		}
	}
	if priority && d.Priority != nil {
		if diff := podshape.Priority(workload.Priority(pod), d.GetPriority()); diff != nil {
			v.Problem = diff
			return v, nil
		}
	}
	// Computed even when there is no set hash to compare it with: a pod of
	// a declared group that asks to join is known by it.
	hash, err := rolehash.Compute(&pod.Spec)
	if err != nil {
		return v, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	v.Hash = hash
	return v, nil
}

// Explain says why pod does not fit as v says. For a pod shaped otherwise
// than its set, tmpl is the set's template as the Workload records it (nil
// when it could not be read): the requests, node selector and tolerations
// that differ are named with both values; when none does, the difference
// is in a field the Workload does not record.
func Explain(pod *corev1.Pod, v Verdict, tmpl *v1alpha1.PodSetTemplate) string {
	if v.Problem != nil {
		return v.Problem.String()
	}
	hashes := fmt.Sprintf("the pod's role hash %s is not pod set %s's %s", v.Hash, v.PodSet, v.SetHash)
	if tmpl == nil {
		return hashes + ": its requests, node selector, tolerations, affinity, priority or another scheduling field changed since the pod set was built"
	}
	var diffs []podshape.Difference
	for _, d := range []*podshape.Difference{
		podshape.Requests(workload.PodRequests(pod), tmpl.Requests),
		podshape.NodeSelector(pod.Spec.NodeSelector, tmpl.NodeSelector),
		podshape.Tolerations(pod.Spec.Tolerations, tmpl.Tolerations),
	} {
		if d != nil {
			diffs = append(diffs, *d)
		}
	}
	if len(diffs) > 0 {
		return podshape.Join(diffs) + " (" + hashes + ")"
	}
	return hashes + ": its affinity, priority or another scheduling field (ports, topology spread, runtime class, resource claims) changed since the pod set was built"
}
