// Package workload turns managed pods into the sluice.v1.Workload the
// grouper submits to the admitter: which workload a pod belongs to, its
// deterministic name, and its pod sets.
//
// It knows single pods (one pod, one workload) and pod groups created
// beforehand (KEP-976 Story 2: one workload per group, one pod set per
// role hash); which pods of a group make its workload is decided by the
// group package.
package workload

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	sluicev1 "github.com/sluice-dev/sluice/gen/sluice/v1"
	"github.com/sluice-dev/sluice/pkg/podgroup"
	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/pkg/podset"
	"github.com/sluice-dev/sluice/pkg/rolehash"
)

// SinglePodSetName is the name of the only pod set of a single-pod workload.
const SinglePodSetName = "main"

// singlePodPrefix starts every single-pod workload name.
const singlePodPrefix = "pod-"

// hashLength is the number of hex characters of the name suffix.
const hashLength = 5

// lastAppliedAnnotation is kubectl's copy of the whole object; it can be as
// large as the pod itself and says nothing the admitter needs.
const lastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// Key names a workload: its namespace and its name.
type Key struct {
	Namespace string
	Name      string
}

// String returns "<namespace>/<name>", the form used in indexes, shard
// hashing and logs.
func (k Key) String() string { return k.Namespace + "/" + k.Name }

// KeyFor returns the workload pod belongs to: its group's, named after
// the group, or its own single-pod workload.
func KeyFor(pod *corev1.Pod) (key Key, ok bool) {
	if name, ok := podgroup.Name(pod); ok {
		return Key{Namespace: pod.Namespace, Name: name}, true
	}
	return Key{Namespace: pod.Namespace, Name: SinglePodName(pod.Name, string(pod.UID))}, true
}

// IsGroupMember reports whether pod belongs to a pod group: it names one,
// or names the scheduler's PodGroup it belongs to.
func IsGroupMember(pod *corev1.Pod) bool {
	_, ok := podgroup.Name(pod)
	return ok
}

// SinglePodName returns the workload name of a single pod:
// "pod-<pod name>-<5 hex of sha256(pod name/uid)>". The pod name is cut so
// the result stays a valid DNS subdomain of at most 253 characters; the
// hash keeps cut names of different pods apart.
func SinglePodName(podName, uid string) string {
	sum := sha256.Sum256([]byte(podName + "/" + uid))
	suffix := "-" + hex.EncodeToString(sum[:])[:hashLength]
	room := validation.DNS1123SubdomainMaxLength - len(singlePodPrefix) - len(suffix)
	base := podName
	if len(base) > room {
		base = base[:room]
	}
	// A cut may end a DNS label with '.' or '-', which the suffix's '-'
	// would leave invalid.
	base = strings.TrimRight(base, ".-")
	return singlePodPrefix + base + suffix
}

// ForSinglePod builds the workload of a single pod: one pod set "main" of
// count 1, controlled by the pod, shaped like the pod, queued by the pod's
// queue, priority class and maximum execution time.
func ForSinglePod(pod *corev1.Pod) (*sluicev1.Workload, error) {
	if IsGroupMember(pod) {
		return nil, fmt.Errorf("pod %s/%s belongs to a group (label %s, or spec.schedulingGroup), not a single-pod workload",
			pod.Namespace, pod.Name, podkeys.PodGroupNameLabel)
	}
	queue := pod.Labels[podkeys.QueueNameLabel]
	if queue == "" {
		return nil, fmt.Errorf("pod %s/%s: label %s is empty: a queued pod must name its LocalQueue",
			pod.Namespace, pod.Name, podkeys.QueueNameLabel)
	}
	if pod.UID == "" {
		return nil, fmt.Errorf("pod %s/%s: metadata.uid is empty: the workload name and owner need it", pod.Namespace, pod.Name)
	}
	maxExecTime, err := maxExecTimeOf(pod)
	if err != nil {
		return nil, err
	}
	set, err := podSetFor(SinglePodSetName, 1, pod)
	if err != nil {
		return nil, err
	}
	return &sluicev1.Workload{
		Ref: &sluicev1.WorkloadRef{
			Namespace: pod.Namespace,
			Name:      SinglePodName(pod.Name, string(pod.UID)),
		},
		QueueName:                   queue,
		Priority:                    Priority(pod),
		PriorityClassName:           pod.Spec.PriorityClassName,
		WorkloadPriorityClass:       pod.Labels[podkeys.PriorityClassLabel],
		MaximumExecutionTimeSeconds: maxExecTime,
		PodSets:                     []*sluicev1.PodSet{set},
		Owners:                      []*sluicev1.OwnerReference{{Name: pod.Name, Uid: string(pod.UID), Controller: true}},
		Traceparent:                 pod.Annotations[podkeys.TraceparentAnnotation],
	}, nil
}

// ForGroup builds the workload of pod group name from its pods (the
// active ones the group package keeps, first in line first): one pod set
// per role hash, named by the hash, counting the pods of that role and
// shaped like the first of them, sorted by name. No pod owns the
// workload: its pods come and go (a failed pod replaced, every pod deleted
// by an eviction and created again) while it stays, so sluice deletes it
// itself once the group has no pod and waits for none. The queue,
// priorities, maximum execution time and trace come from the first pod
// (the group package refuses groups whose pods disagree on the queue, the
// priority class or the maximum execution time).
func ForGroup(namespace, name string, pods []*corev1.Pod) (*sluicev1.Workload, error) {
	if len(pods) == 0 {
		return nil, fmt.Errorf("group %s/%s: no pods", namespace, name)
	}
	first := pods[0]
	queue := first.Labels[podkeys.QueueNameLabel]
	if queue == "" {
		return nil, fmt.Errorf("group %s/%s: pod %s: label %s is empty: a queued pod must name its LocalQueue",
			namespace, name, first.Name, podkeys.QueueNameLabel)
	}
	byRole := map[string]*sluicev1.PodSet{}
	var sets []*sluicev1.PodSet
	for _, pod := range pods {
		hash, err := RoleHash(pod)
		if err != nil {
			return nil, err
		}
		if set := byRole[hash]; set != nil {
			set.Count++
			continue
		}
		set, err := podSetFor(hash, 1, pod)
		if err != nil {
			return nil, err
		}
		byRole[hash] = set
		sets = append(sets, set)
	}
	return groupWorkload(namespace, name, first, sets)
}

// groupWorkload is the workload of pod group name, with pod sets sets
// (sorted by name here); the queue, priorities, maximum execution time
// and trace come from first.
func groupWorkload(namespace, name string, first *corev1.Pod, sets []*sluicev1.PodSet) (*sluicev1.Workload, error) {
	maxExecTime, err := maxExecTimeOf(first)
	if err != nil {
		return nil, fmt.Errorf("group %s/%s: %w", namespace, name, err)
	}
	slices.SortFunc(sets, func(a, b *sluicev1.PodSet) int { return strings.Compare(a.GetName(), b.GetName()) })
	return &sluicev1.Workload{
		Ref:                         &sluicev1.WorkloadRef{Namespace: namespace, Name: name},
		QueueName:                   first.Labels[podkeys.QueueNameLabel],
		Priority:                    Priority(first),
		PriorityClassName:           first.Spec.PriorityClassName,
		WorkloadPriorityClass:       first.Labels[podkeys.PriorityClassLabel],
		MaximumExecutionTimeSeconds: maxExecTime,
		PodSets:                     sets,
		Traceparent:                 first.Annotations[podkeys.TraceparentAnnotation],
		PodGroup:                    name,
	}, nil
}

// Priority is the pod's spec.priority, 0 when unset.
func Priority(pod *corev1.Pod) int32 {
	if pod.Spec.Priority == nil {
		return 0
	}
	return *pod.Spec.Priority
}

// maxExecTimeOf is the pod's maximum execution time in seconds, from its
// label podkeys.MaxExecTimeLabel; nil without one. The webhook refuses a
// value that is not a whole number from 1 to 2147483647 (the Workload's
// field is an int32), but a pod it missed may carry any: such a pod is
// not queued, with an error that says why.
func maxExecTimeOf(pod *corev1.Pod) (*int32, error) {
	value, ok := pod.Labels[podkeys.MaxExecTimeLabel]
	if !ok {
		return nil, nil
	}
	seconds, err := strconv.ParseInt(value, 10, 32)
	if err != nil || seconds < 1 {
		return nil, fmt.Errorf("pod %s/%s: label %s is %q: it must be a whole number of seconds from 1 to 2147483647",
			pod.Namespace, pod.Name, podkeys.MaxExecTimeLabel, value)
	}
	limit := int32(seconds)
	return &limit, nil
}

// RoleHash returns the pod's role hash: the webhook's annotation, or, for
// a pod the webhook missed (created while it was being installed), the
// hash computed the same way.
func RoleHash(pod *corev1.Pod) (string, error) {
	if hash := pod.Annotations[podkeys.RoleHashAnnotation]; hash != "" {
		return hash, nil
	}
	hash, err := rolehash.Compute(&pod.Spec)
	if err != nil {
		return "", fmt.Errorf("pod %s/%s: role hash: %w", pod.Namespace, pod.Name, err)
	}
	return hash, nil
}

// currentRoleHash is the role hash of pod's spec as it is now. The
// webhook's annotation is that of the spec it created; a gated pod's node
// selector, tolerations and affinity may have changed since, which the
// API server counts in metadata.generation (1 at creation): only then is
// the hash computed again. An API server that does not count (0) is
// trusted to have the spec the annotation was computed from.
func currentRoleHash(pod *corev1.Pod) (string, error) {
	if pod.Generation <= 1 {
		return RoleHash(pod)
	}
	hash, err := rolehash.Compute(&pod.Spec)
	if err != nil {
		return "", fmt.Errorf("pod %s/%s: role hash: %w", pod.Namespace, pod.Name, err)
	}
	return hash, nil
}

// podSetFor builds a pod set of count pods shaped like pod. Its role hash
// is that of pod's spec as it is now: a pod runs in the set only if it
// hashes the same when it is ungated.
func podSetFor(name string, count int32, pod *corev1.Pod) (*sluicev1.PodSet, error) {
	hash, err := currentRoleHash(pod)
	if err != nil {
		return nil, err
	}
	return &sluicev1.PodSet{
		Name:         name,
		Count:        count,
		RoleHash:     hash,
		Requests:     quantities(PodRequests(pod)),
		NodeSelector: copyMap(pod.Spec.NodeSelector),
		Tolerations:  podset.TolerationsToProto(pod.Spec.Tolerations),
		Labels:       copyMap(pod.Labels),
		Annotations:  annotations(pod.Annotations),
	}, nil
}

// PodRequests returns what one pod reserves, the way the scheduler counts
// it: the sum of the regular containers and of the sidecars (init
// containers with restartPolicy Always), or the largest need during
// initialisation if that is higher (each one-shot init container runs next
// to the sidecars started before it), with pod-level requests replacing the
// container sum for the resources they name, plus the pod overhead.
func PodRequests(pod *corev1.Pod) corev1.ResourceList {
	reqs := corev1.ResourceList{}
	for _, c := range pod.Spec.Containers {
		add(reqs, c.Resources.Requests)
	}
	sidecars := corev1.ResourceList{}
	initPeak := corev1.ResourceList{}
	for _, c := range pod.Spec.InitContainers {
		var during corev1.ResourceList
		if isSidecar(c) {
			add(sidecars, c.Resources.Requests)
			during = sidecars.DeepCopy()
		} else {
			during = c.Resources.Requests.DeepCopy()
			if during == nil {
				during = corev1.ResourceList{}
			}
			add(during, sidecars)
		}
		maxInto(initPeak, during)
	}
	add(reqs, sidecars)
	maxInto(reqs, initPeak)
	if pod.Spec.Resources != nil {
		for name, q := range pod.Spec.Resources.Requests {
			reqs[name] = q.DeepCopy()
		}
	}
	add(reqs, pod.Spec.Overhead)
	return reqs
}

func isSidecar(c corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

// add adds every quantity of more to into.
func add(into, more corev1.ResourceList) {
	for name, q := range more {
		sum := into[name]
		sum.Add(q)
		into[name] = sum
	}
}

// maxInto raises each quantity of into to the one in other when higher.
func maxInto(into, other corev1.ResourceList) {
	for name, q := range other {
		if cur, ok := into[name]; !ok || q.Cmp(cur) > 0 {
			into[name] = q.DeepCopy()
		}
	}
}

// quantities renders a resource list as Kubernetes quantity strings, leaving
// out zero requests (they reserve nothing).
func quantities(list corev1.ResourceList) map[string]string {
	out := make(map[string]string, len(list))
	for name, q := range list {
		if q.IsZero() {
			continue
		}
		out[string(name)] = q.String()
	}
	return out
}

func annotations(in map[string]string) map[string]string {
	out := copyMap(in)
	delete(out, lastAppliedAnnotation)
	return out
}

func copyMap(in map[string]string) map[string]string {
	if len(in) == 0 {
		return nil
	}
	out := make(map[string]string, len(in))
	for k, v := range in {
		out[k] = v
	}
	return out
}
