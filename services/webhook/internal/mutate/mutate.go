// Package mutate decides whether sluice queues a new pod and computes the
// JSON patch that holds it for admission: queue label (when defaulted),
// managed label, the role of a pod declaring its group (when not named),
// finalizer, scheduling gate, role hash and trace context; and, when gang
// scheduling is on, the link of a KEP-976 group's pod to the scheduler's
// PodGroup of its group.
// The patch only adds what is missing and replaces what is wrong (a role
// hash the webhook did not compute), so it stays small and is empty for a
// pod that already carries every mark.
package mutate

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/sluice-dev/sluice/pkg/podgroup"
	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/pkg/rolehash"
)

// DefaultQueue is the LocalQueue a pod without a queue-name label goes to,
// in a namespace that opted in to queue defaulting, when a LocalQueue of
// that name exists there.
const DefaultQueue = "default"

// Decision says whether a pod is queued and on which queue.
type Decision struct {
	// Queue is the LocalQueue the pod is submitted to; empty when the pod is
	// not queued.
	Queue string
	// Defaulted is true when the pod had no queue-name label and the webhook
	// chose DefaultQueue.
	Defaulted bool
	// LeftToKueue is true when the pod is not queued because its
	// controller's kind is queued whole by Kueue.
	LeftToKueue bool
}

// Managed reports whether sluice queues the pod.
func (d Decision) Managed() bool { return d.Queue != "" || d.Defaulted }

// KueueOwners are the workload kinds Kueue queues whole (its job
// integrations) when it runs beside sluice: a pod whose controller is one
// of them is Kueue's, not sluice's. A pod controlled by another pod (a
// Spark executor by its driver) is never among them.
var KueueOwners = []schema.GroupKind{
	{Group: "batch", Kind: "Job"},
	{Group: "apps", Kind: "ReplicaSet"},
	{Group: "apps", Kind: "StatefulSet"},
	{Group: "jobset.x-k8s.io", Kind: "JobSet"},
	{Group: "leaderworkerset.x-k8s.io", Kind: "LeaderWorkerSet"},
	{Group: "kubeflow.org", Kind: "MPIJob"},
	{Group: "kubeflow.org", Kind: "PyTorchJob"},
	{Group: "kubeflow.org", Kind: "TFJob"},
	{Group: "kubeflow.org", Kind: "XGBoostJob"},
	{Group: "kubeflow.org", Kind: "PaddleJob"},
	{Group: "kubeflow.org", Kind: "JAXJob"},
	{Group: "trainer.kubeflow.org", Kind: "TrainJob"},
	{Group: "ray.io", Kind: "RayCluster"},
	{Group: "ray.io", Kind: "RayJob"},
	{Group: "workload.codeflare.dev", Kind: "AppWrapper"},
}

// ownerIn returns the controller of pod when its kind is one of kinds.
func ownerIn(pod *corev1.Pod, kinds []schema.GroupKind) (metav1.OwnerReference, bool) {
	ref := metav1.GetControllerOf(pod)
	if ref == nil || len(kinds) == 0 {
		return metav1.OwnerReference{}, false
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return metav1.OwnerReference{}, false
	}
	return *ref, slices.Contains(kinds, schema.GroupKind{Group: gv.Group, Kind: ref.Kind})
}

// Decide returns the decision for a pod in a managed namespace. A pod whose
// controller's kind is in leftToKueue is not queued: Kueue queues its
// controller whole. A pod that carries the queue-name label is queued on
// it (an invalid value is left to validation to reject). Otherwise the
// pod is queued on DefaultQueue only when its namespace opted in to
// defaulting — defaultExists is nil when it did not — and defaultExists
// reports that such a LocalQueue exists. defaultExists is only called when
// needed.
func Decide(pod *corev1.Pod, leftToKueue []schema.GroupKind, defaultExists func() (bool, error)) (Decision, error) {
	if _, ok := ownerIn(pod, leftToKueue); ok {
		return Decision{LeftToKueue: true}, nil
	}
	if queue, ok := pod.Labels[podkeys.QueueNameLabel]; ok {
		return Decision{Queue: queue}, nil
	}
	if defaultExists == nil {
		return Decision{}, nil
	}
	exists, err := defaultExists()
	if err != nil {
		return Decision{}, fmt.Errorf("look up LocalQueue %q: %w", DefaultQueue, err)
	}
	if !exists {
		return Decision{}, nil
	}
	return Decision{Queue: DefaultQueue, Defaulted: true}, nil
}

// Patch returns the JSON patch operations that mark a queued pod. The role
// hash is always the one computed from the pod's spec: pods with equal
// hashes are booked as one pod set shaped like one of them, so a hash the
// user chose could book pods of different sizes as copies of one.
// traceparent is the W3C trace context to stamp on the pod (replacing one
// it carries); empty leaves it out.
func Patch(pod *corev1.Pod, d Decision, traceparent string) ([]jsonpatch.JsonPatchOperation, error) {
	labels := map[string]string{}
	if d.Defaulted {
		labels[podkeys.QueueNameLabel] = d.Queue
	}
	if pod.Labels[podkeys.ManagedLabel] != podkeys.ManagedLabelValue {
		labels[podkeys.ManagedLabel] = podkeys.ManagedLabelValue
	}
	role, err := ownRole(pod)
	if err != nil {
		return nil, err
	}
	if role != "" {
		labels[podkeys.PodGroupRoleLabel] = role
	}

	annotations := map[string]string{}
	hash, err := rolehash.Compute(&pod.Spec)
	if err != nil {
		return nil, fmt.Errorf("compute role hash: %w", err)
	}
	if pod.Annotations[podkeys.RoleHashAnnotation] != hash {
		annotations[podkeys.RoleHashAnnotation] = hash
	}
	if traceparent != "" && pod.Annotations[podkeys.TraceparentAnnotation] != traceparent {
		annotations[podkeys.TraceparentAnnotation] = traceparent
	}

	var ops []jsonpatch.JsonPatchOperation
	ops = append(ops, setInMap("/metadata/labels", pod.Labels, labels)...)
	ops = append(ops, setInMap("/metadata/annotations", pod.Annotations, annotations)...)
	if !slices.Contains(pod.Finalizers, podkeys.ManagedFinalizer) {
		ops = append(ops, addToList("/metadata/finalizers", pod.Finalizers == nil, podkeys.ManagedFinalizer))
	}
	if !gated(pod) {
		gate := corev1.PodSchedulingGate{Name: podkeys.AdmissionGate}
		ops = append(ops, addToList("/spec/schedulingGates", pod.Spec.SchedulingGates == nil, gate))
	}
	return ops, nil
}

// ownRole returns the role to label a pod that declares its group's pod
// sets with, when it does not name one itself: the declared set without a
// template. Every pod of a declared group then names its role the same
// way, by label.
func ownRole(pod *corev1.Pod) (string, error) {
	text, ok := pod.Annotations[podkeys.PodGroupSetsAnnotation]
	if !ok || pod.Labels[podkeys.PodGroupNameLabel] == "" {
		return "", nil
	}
	if _, named := pod.Labels[podkeys.PodGroupRoleLabel]; named {
		return "", nil
	}
	sets, errs := podgroup.ParseSets(text)
	if len(errs) > 0 {
		return "", fmt.Errorf("read %s: %w", podkeys.PodGroupSetsAnnotation, errs.ToAggregate())
	}
	role, ferr := podgroup.OwnRole(pod.Labels, sets)
	if ferr != nil {
		return "", fmt.Errorf("role of the declaring pod: %w", ferr)
	}
	return role, nil
}

// schedulingGroupPath is where a pod names the scheduler's PodGroup it
// belongs to (spec.schedulingGroup, Kubernetes 1.36, GenericWorkload).
const schedulingGroupPath = "/spec/schedulingGroup"

// SchedulingGroup returns the patch that links a pod of a KEP-976 group
// created beforehand (group-name label and total-count annotation) to the
// PodGroup named after its group, which the grouper creates with the
// group's total count as the gang's minCount. It is empty for every other
// pod: a single pod, a pod of a group declared with pod-group-sets (its
// driver alone could never reach the gang's size), and a pod that names a
// scheduling group already, which is the user's choice or an earlier
// invocation's work (the patch is idempotent under reinvocation). The
// group name is a valid PodGroup name: validation requires a DNS-1123
// subdomain.
func SchedulingGroup(pod *corev1.Pod) []jsonpatch.JsonPatchOperation {
	group := pod.Labels[podkeys.PodGroupNameLabel]
	if group == "" || pod.Annotations[podkeys.PodGroupTotalCountAnnotation] == "" || pod.Spec.SchedulingGroup != nil {
		return nil
	}
	link := corev1.PodSchedulingGroup{PodGroupName: &group}
	return []jsonpatch.JsonPatchOperation{jsonpatch.NewOperation("add", schedulingGroupPath, link)}
}

// Runs reports whether pod shows its group admitted and running: it is
// past sluice's gate and not being deleted, and is not a pod of an
// earlier run that ended and that sluice let go of. A pod created for a
// group with such a pod replaces one of its pods.
func Runs(pod *corev1.Pod) bool {
	return !gated(pod) && pod.DeletionTimestamp == nil && !podgroup.Released(pod)
}

// setInMap sets entries in the string map at path: it replaces the value of
// a key the map has and adds a key it lacks. A map that does not exist yet
// is added whole, since JSON patch cannot add a member to a missing object.
func setInMap(path string, existing, entries map[string]string) []jsonpatch.JsonPatchOperation {
	if len(entries) == 0 {
		return nil
	}
	if existing == nil {
		return []jsonpatch.JsonPatchOperation{jsonpatch.NewOperation("add", path, entries)}
	}
	ops := make([]jsonpatch.JsonPatchOperation, 0, len(entries))
	for _, k := range slices.Sorted(maps.Keys(entries)) {
		op := "add"
		if _, ok := existing[k]; ok {
			op = "replace"
		}
		ops = append(ops, jsonpatch.NewOperation(op, path+"/"+escape(k), entries[k]))
	}
	return ops
}

// addToList appends value to the list at path, creating the list if absent.
func addToList(path string, missing bool, value any) jsonpatch.JsonPatchOperation {
	if missing {
		return jsonpatch.NewOperation("add", path, []any{value})
	}
	return jsonpatch.NewOperation("add", path+"/-", value)
}

// escape encodes a map key as a JSON pointer reference token (RFC 6901).
func escape(key string) string {
	return strings.ReplaceAll(strings.ReplaceAll(key, "~", "~0"), "/", "~1")
}

func gated(pod *corev1.Pod) bool {
	return slices.ContainsFunc(pod.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool {
		return g.Name == podkeys.AdmissionGate
	})
}
