// Package podpatch builds the patches the grouper sends to pods: the one
// patch that ungates an admitted pod with its pod set's info, the removal
// of sluice's finalizer, and the release of everything sluice put on a pod.
//
// Every patch is built from the pod as last seen and guarded so that it
// cannot undo someone else's change: the JSON patches test the pod's uid
// and each list entry before removing it.
package podpatch

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	sluicev1 "github.com/sluice-dev/sluice/gen/sluice/v1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/pkg/podset"
)

// HasGate reports whether pod still carries sluice's admission gate.
func HasGate(pod *corev1.Pod) bool {
	return slices.ContainsFunc(pod.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool {
		return g.Name == podkeys.AdmissionGate
	})
}

// HasFinalizer reports whether pod still carries sluice's finalizer.
func HasFinalizer(pod *corev1.Pod) bool {
	return slices.Contains(pod.Finalizers, podkeys.ManagedFinalizer)
}

// ConflictError says the admission cannot be applied to the pod as it is:
// the API server would refuse the patch, so it is not sent.
type ConflictError struct {
	Field string // e.g. spec.nodeSelector["zone"]
	Pod   string // the pod's value
	Want  string // the admission's value
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("%s: the pod has %q, the admission sets %q; a gated pod's node selector can only be extended",
		e.Field, e.Pod, e.Want)
}

// Ungate returns the JSON patch (RFC 6902) that admits pod with info in
// workload wl: it removes sluice's scheduling gate (other gates stay),
// adds info's node selector entries and tolerations (those the pod lacks),
// and sets info's labels and annotations plus the pod set label and the
// annotations naming the workload, its uid and the reservation. A JSON patch costs the API server
// far less to apply than a strategic merge patch. It tests the pod's uid
// (a newer pod of the same name fails it) and the gate at its index; when
// it adds a whole map or list the pod lacks, it also tests the pod's
// resourceVersion, so it never replaces what someone added meanwhile. A
// failed test fails the patch, and the retry starts from the newer pod. A
// node selector entry that contradicts the pod's own is a *ConflictError.
func Ungate(pod *corev1.Pod, info *sluicev1.PodSetInfo, wl *sluicev1.WorkloadRef, reservation string) ([]byte, error) {
	ops := uidTest(pod)
	ops, gated := appendRemoveGate(ops, pod.Spec.SchedulingGates)
	if !gated {
		return nil, fmt.Errorf("pod %s/%s does not carry the gate %s", pod.Namespace, pod.Name, podkeys.AdmissionGate)
	}
	sel, err := nodeSelector(pod, info.GetNodeSelector())
	if err != nil {
		return nil, err
	}
	whole := false
	ops, w := appendMapAdds(ops, "/spec/nodeSelector", pod.Spec.NodeSelector, sel)
	whole = whole || w
	if add := podset.MissingTolerations(pod.Spec.Tolerations, podset.TolerationsFromProto(info.GetTolerations())); len(add) > 0 {
		if len(pod.Spec.Tolerations) == 0 {
			ops, whole = append(ops, jsonOp{Op: "add", Path: "/spec/tolerations", Value: add}), true
		} else {
			for _, t := range add {
				ops = append(ops, jsonOp{Op: "add", Path: "/spec/tolerations/-", Value: t})
			}
		}
	}

	labels := maps.Clone(info.GetLabels())
	if labels == nil {
		labels = map[string]string{}
	}
	labels[podkeys.PodSetLabel] = info.GetName()
	annotations := maps.Clone(info.GetAnnotations())
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[podkeys.WorkloadAnnotation] = wl.GetName()
	if uid := wl.GetUid(); uid != "" {
		annotations[podkeys.WorkloadUIDAnnotation] = uid
	}
	if reservation != "" {
		annotations[podkeys.ReservationAnnotation] = reservation
	}
	ops, w = appendMapAdds(ops, "/metadata/labels", pod.Labels, labels)
	whole = whole || w
	ops, w = appendMapAdds(ops, "/metadata/annotations", pod.Annotations, annotations)
	whole = whole || w
	if whole {
		ops = append(ops, jsonOp{Op: "test", Path: "/metadata/resourceVersion", Value: pod.ResourceVersion})
	}
	data, _, err := encode(ops)
	if err != nil {
		return nil, fmt.Errorf("encode ungate patch: %w", err)
	}
	return data, nil
}

// appendMapAdds sets the entries of want in the map at path, which holds
// have: one add per entry, or one add of the whole map when have is empty
// (a JSON patch cannot add into a map that does not exist); whole says
// which.
func appendMapAdds(ops []jsonOp, path string, have, want map[string]string) ([]jsonOp, bool) {
	if len(want) == 0 {
		return ops, false
	}
	if len(have) == 0 {
		return append(ops, jsonOp{Op: "add", Path: path, Value: want}), true
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if v, ok := have[k]; ok && v == want[k] {
			continue
		}
		ops = append(ops, jsonOp{Op: "add", Path: path + "/" + pointerEscape.Replace(k), Value: want[k]})
	}
	return ops, false
}

// pointerEscape escapes a map key for a JSON pointer (RFC 6901).
var pointerEscape = strings.NewReplacer("~", "~0", "/", "~1")

// nodeSelector returns the entries of want that pod lacks, or a conflict
// when pod already selects another value for a key.
func nodeSelector(pod *corev1.Pod, want map[string]string) (map[string]string, error) {
	out := map[string]string{}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		v := want[k]
		have, ok := pod.Spec.NodeSelector[k]
		switch {
		case !ok:
			out[k] = v
		case have != v:
			return nil, &ConflictError{Field: "spec.nodeSelector[" + strconv.Quote(k) + "]", Pod: have, Want: v}
		}
	}
	return out, nil
}

// jsonOp is one RFC 6902 operation.
type jsonOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// RemoveFinalizer returns the JSON patch that removes sluice's finalizer
// from pod, and false when pod does not carry it. The patch tests the
// pod's uid and the finalizer at its index, so it fails instead of
// removing another entry when the list changed since pod was read.
func RemoveFinalizer(pod *corev1.Pod) ([]byte, bool, error) {
	ops := uidTest(pod)
	ops, found := appendRemove(ops, "/metadata/finalizers", pod.Finalizers, podkeys.ManagedFinalizer)
	if !found {
		return nil, false, nil
	}
	return encode(ops)
}

// Release returns the JSON patch that removes both sluice's gate and its
// finalizer from pod, and false when it carries neither. It is the
// emergency exit for pods sluice can no longer serve: the pod schedules
// without admission and is deleted without accounting.
func Release(pod *corev1.Pod) ([]byte, bool, error) {
	ops := uidTest(pod)
	ops, gated := appendRemoveGate(ops, pod.Spec.SchedulingGates)
	ops, finalized := appendRemove(ops, "/metadata/finalizers", pod.Finalizers, podkeys.ManagedFinalizer)
	if !gated && !finalized {
		return nil, false, nil
	}
	return encode(ops)
}

func uidTest(pod *corev1.Pod) []jsonOp {
	return []jsonOp{{Op: "test", Path: "/metadata/uid", Value: string(pod.UID)}}
}

// appendRemove tests and removes value from the string list at path.
func appendRemove(ops []jsonOp, path string, list []string, value string) ([]jsonOp, bool) {
	i := slices.Index(list, value)
	if i < 0 {
		return ops, false
	}
	p := path + "/" + strconv.Itoa(i)
	return append(ops, jsonOp{Op: "test", Path: p, Value: value}, jsonOp{Op: "remove", Path: p}), true
}

// appendRemoveGate tests and removes sluice's entry of the gate list.
func appendRemoveGate(ops []jsonOp, gates []corev1.PodSchedulingGate) ([]jsonOp, bool) {
	i := slices.IndexFunc(gates, func(g corev1.PodSchedulingGate) bool { return g.Name == podkeys.AdmissionGate })
	if i < 0 {
		return ops, false
	}
	p := "/spec/schedulingGates/" + strconv.Itoa(i)
	return append(ops,
		jsonOp{Op: "test", Path: p + "/name", Value: podkeys.AdmissionGate},
		jsonOp{Op: "remove", Path: p}), true
}

func encode(ops []jsonOp) ([]byte, bool, error) {
	data, err := json.Marshal(ops)
	if err != nil {
		return nil, false, fmt.Errorf("encode JSON patch: %w", err)
	}
	return data, true, nil
}

// DisruptionTarget returns the strategic merge patch of a pod's status
// that marks it as about to be deleted by sluice, so that its owner (and
// anyone reading the pod) can tell an eviction from a failure.
func DisruptionTarget(reason, message string, now time.Time) ([]byte, error) {
	patch := map[string]any{
		"status": map[string]any{
			"conditions": []map[string]string{{
				"type":               string(corev1.DisruptionTarget),
				"status":             string(corev1.ConditionTrue),
				"reason":             reason,
				"message":            message,
				"lastTransitionTime": now.UTC().Format(time.RFC3339),
			}},
		},
	}
	data, err := json.Marshal(patch)
	if err != nil {
		return nil, fmt.Errorf("encode disruption condition patch: %w", err)
	}
	return data, nil
}
