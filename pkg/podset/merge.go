// Package podset merges what a pod set's pods are ungated with — the node
// labels and tolerations of the flavors the pod set was assigned, sluice's
// own labels and annotations, and every admission check's pod set update —
// into one PodSetInfo, and converts PodSetInfos to and from sluice.v1.
//
// Updates are additive only: a key that a check or flavor sets to a value
// other than the one the pods, sluice, a flavor or an earlier check (in
// check-name order) already gave it is a *ConflictError. Tolerations never
// conflict; equal ones are kept once.
//
// An info lists what the grouper must set on the pods, not everything they
// end up with:
//   - nodeSelector entries and tolerations the pods already carry are left
//     out. Both are part of the role hash, so every pod of the set carries
//     them and leaving them out is safe.
//   - labels and annotations contributed by sluice, flavors or checks are
//     always listed, even when the template (the set's first pod) already
//     carries the same value: metadata is not part of the role hash, so the
//     other pods of the set may lack it. Setting a key to the value a pod
//     already has is a no-op for the patch.
//   - sluice's own labels and annotations (the pod set and workload names)
//     replace whatever the pods carry under those keys; sluice owns them.
package podset

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

// CheckUpdate is one admission check's update for one pod set.
type CheckUpdate struct {
	// CheckName is the AdmissionCheck that asks for the update.
	CheckName string
	// Update is what the check adds; its Name is the pod set's or empty.
	Update v1alpha1.PodSetUpdate
}

// Input is everything merged into one pod set's info.
type Input struct {
	// Name of the pod set.
	Name string
	// Template is what the pods already carry.
	Template v1alpha1.PodSetTemplate
	// Flavors are the distinct flavors of the pod set's assignment, in a
	// deterministic order (MergeWorkload sorts them by name).
	Flavors []*v1alpha1.ResourceFlavor
	// Labels are sluice's own labels for the pods.
	Labels map[string]string
	// Annotations are sluice's own annotations for the pods.
	Annotations map[string]string
	// Updates are the checks' updates for this pod set, in any order; they
	// are applied in check-name order.
	Updates []CheckUpdate
}

// Merge builds the info for one pod set. It returns a *ConflictError when a
// flavor or check contradicts what is already there, and another error for
// malformed input.
func Merge(in Input) (v1alpha1.PodSetInfo, error) {
	if in.Name == "" {
		return v1alpha1.PodSetInfo{}, errors.New("merge pod set: name must not be empty")
	}
	updates, err := sortUpdates(in.Name, in.Updates)
	if err != nil {
		return v1alpha1.PodSetInfo{}, err
	}

	labels := newFieldMerger(in.Name, FieldLabels, in.Template.Labels, true)
	annotations := newFieldMerger(in.Name, FieldAnnotations, in.Template.Annotations, true)
	nodeSelector := newFieldMerger(in.Name, FieldNodeSelector, in.Template.NodeSelector, false)
	tolerations := tolerationMerger{have: in.Template.Tolerations}

	sluice := Source{Kind: SourceSluice}
	labels.override(in.Labels, sluice)
	annotations.override(in.Annotations, sluice)

	for i, f := range in.Flavors {
		if f == nil {
			return v1alpha1.PodSetInfo{}, fmt.Errorf("merge pod set %q: flavors[%d] is nil", in.Name, i)
		}
		if err := nodeSelector.add(f.Spec.NodeLabels, Source{Kind: SourceFlavor, Name: f.Name}); err != nil {
			return v1alpha1.PodSetInfo{}, err
		}
		tolerations.add(f.Spec.Tolerations)
	}

	for _, u := range updates {
		by := Source{Kind: SourceCheck, Name: u.CheckName}
		if err := labels.add(u.Update.Labels, by); err != nil {
			return v1alpha1.PodSetInfo{}, err
		}
		if err := annotations.add(u.Update.Annotations, by); err != nil {
			return v1alpha1.PodSetInfo{}, err
		}
		if err := nodeSelector.add(u.Update.NodeSelector, by); err != nil {
			return v1alpha1.PodSetInfo{}, err
		}
		tolerations.add(u.Update.Tolerations)
	}

	return v1alpha1.PodSetInfo{
		Name:         in.Name,
		Labels:       labels.out,
		Annotations:  annotations.out,
		NodeSelector: nodeSelector.out,
		Tolerations:  tolerations.out,
	}, nil
}

// sortUpdates returns a copy of updates in check-name order, refusing
// unnamed checks, updates for another pod set and a check named twice.
func sortUpdates(podSet string, updates []CheckUpdate) ([]CheckUpdate, error) {
	sorted := slices.Clone(updates)
	for i, u := range sorted {
		if u.CheckName == "" {
			return nil, fmt.Errorf("merge pod set %q: updates[%d].CheckName must not be empty", podSet, i)
		}
		if u.Update.Name != "" && u.Update.Name != podSet {
			return nil, fmt.Errorf("merge pod set %q: update of admission check %q is for pod set %q",
				podSet, u.CheckName, u.Update.Name)
		}
	}
	slices.SortStableFunc(sorted, func(a, b CheckUpdate) int { return strings.Compare(a.CheckName, b.CheckName) })
	for i := 1; i < len(sorted); i++ {
		if sorted[i].CheckName == sorted[i-1].CheckName {
			return nil, fmt.Errorf("merge pod set %q: admission check %q has more than one update for it",
				podSet, sorted[i].CheckName)
		}
	}
	return sorted, nil
}

// sourced is a key's current value and where it came from.
type sourced struct {
	value string
	from  Source
}

// fieldMerger merges one map field (labels, annotations or nodeSelector).
type fieldMerger struct {
	podSet  string
	field   Field
	current map[string]sourced
	// out is what the info sets; nil while empty.
	out map[string]string
	// listPodValues lists contributed entries even when the pods already
	// carry the same value (see the package comment).
	listPodValues bool
}

func newFieldMerger(podSet string, field Field, pods map[string]string, listPodValues bool) *fieldMerger {
	m := &fieldMerger{
		podSet:        podSet,
		field:         field,
		current:       make(map[string]sourced, len(pods)),
		listPodValues: listPodValues,
	}
	for k, v := range pods {
		m.current[k] = sourced{value: v, from: Source{Kind: SourcePods}}
	}
	return m
}

// override sets entries whatever was there.
func (m *fieldMerger) override(entries map[string]string, by Source) {
	for k, v := range entries {
		m.current[k] = sourced{value: v, from: by}
		m.set(k, v)
	}
}

// add sets entries that are new and accepts those already there with the
// same value. Keys are visited in sorted order so the conflict reported is
// always the same one.
func (m *fieldMerger) add(entries map[string]string, by Source) error {
	for _, k := range slices.Sorted(maps.Keys(entries)) {
		v := entries[k]
		cur, ok := m.current[k]
		switch {
		case !ok:
			m.current[k] = sourced{value: v, from: by}
		case cur.value != v:
			return m.conflict(k, cur, v, by)
		case cur.from.Kind == SourcePods && !m.listPodValues:
			continue
		}
		m.set(k, v)
	}
	return nil
}

func (m *fieldMerger) set(k, v string) {
	if m.out == nil {
		m.out = make(map[string]string)
	}
	m.out[k] = v
}

func (m *fieldMerger) conflict(key string, cur sourced, value string, by Source) *ConflictError {
	e := &ConflictError{
		PodSet:       m.podSet,
		Field:        m.field,
		Key:          key,
		Existing:     cur.value,
		New:          value,
		ExistingFrom: cur.from,
	}
	if by.Kind == SourceCheck {
		e.Check = by.Name
	} else {
		e.Flavor = by.Name
	}
	return e
}

// tolerationMerger collects the tolerations to add to pods that carry have.
type tolerationMerger struct {
	have []corev1.Toleration
	out  []corev1.Toleration
}

func (m *tolerationMerger) add(tolerations []corev1.Toleration) {
	for _, t := range tolerations {
		if containsToleration(m.have, t) || containsToleration(m.out, t) {
			continue
		}
		m.out = append(m.out, *t.DeepCopy())
	}
}

// SameToleration reports whether a and b tolerate the same taints for the
// same time: equal key, operator (empty counts as Equal), value, effect and
// tolerationSeconds.
func SameToleration(a, b corev1.Toleration) bool {
	return a.Key == b.Key &&
		normalOperator(a.Operator) == normalOperator(b.Operator) &&
		a.Value == b.Value &&
		a.Effect == b.Effect &&
		equalSeconds(a.TolerationSeconds, b.TolerationSeconds)
}

// MissingTolerations returns, in order, the tolerations of want that have
// does not already hold (by SameToleration), each once: what must be added
// to a pod carrying have.
func MissingTolerations(have, want []corev1.Toleration) []corev1.Toleration {
	m := tolerationMerger{have: have}
	m.add(want)
	return m.out
}

func containsToleration(list []corev1.Toleration, t corev1.Toleration) bool {
	return slices.ContainsFunc(list, func(o corev1.Toleration) bool { return SameToleration(o, t) })
}

func normalOperator(op corev1.TolerationOperator) corev1.TolerationOperator {
	if op == "" {
		return corev1.TolerationOpEqual
	}
	return op
}

func equalSeconds(a, b *int64) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
