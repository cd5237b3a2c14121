package podset

import "fmt"

// Field names the map of a pod set's metadata or spec that two sources
// disagree on.
type Field string

// The fields that can conflict. Tolerations never conflict.
const (
	FieldLabels       Field = "labels"
	FieldAnnotations  Field = "annotations"
	FieldNodeSelector Field = "nodeSelector"
)

// SourceKind tells what contributed a value to a pod set's info.
type SourceKind string

// The contributors, in the order they are merged.
const (
	// SourcePods is what the pod set's pods already carry (the template).
	SourcePods SourceKind = "pods"
	// SourceSluice is sluice's own labels and annotations.
	SourceSluice SourceKind = "sluice"
	// SourceFlavor is a resource flavor's node labels and tolerations.
	SourceFlavor SourceKind = "flavor"
	// SourceCheck is an admission check's pod set update.
	SourceCheck SourceKind = "check"
)

// Source is one contributor to a pod set's info; Name is the flavor or
// check name and empty for the pods and sluice.
type Source struct {
	Kind SourceKind
	Name string
}

// String reads "the pods", "sluice", `flavor "x"` or `check "y"`.
func (s Source) String() string {
	switch s.Kind {
	case SourcePods:
		return "the pods"
	case SourceFlavor, SourceCheck:
		return fmt.Sprintf("%s %q", s.Kind, s.Name)
	default:
		return string(s.Kind)
	}
}

// ConflictError reports a key that an admission check or a resource flavor
// wants to set to a value other than the one already there. Updates are
// additive only, so such a workload must not be admitted until the check
// changes its answer.
type ConflictError struct {
	// PodSet is the pod set the conflict is in.
	PodSet string
	// Check is the admission check whose update conflicts; empty when a
	// flavor's node labels conflict.
	Check string
	// Flavor is the resource flavor whose node labels conflict; set only
	// when Check is empty.
	Flavor string
	// Field is the map the key is in.
	Field Field
	// Key both sides set.
	Key string
	// Existing is the value already there, from ExistingFrom.
	Existing string
	// New is the value the check or flavor wants.
	New string
	// ExistingFrom is where Existing came from.
	ExistingFrom Source
}

// Error reads `in admission check "c": conflict for labels: key=k,
// value1=<existing>, value2=<new>`, or `in resource flavor "f": ...` when a
// flavor conflicts.
func (e *ConflictError) Error() string {
	where := fmt.Sprintf("in admission check %q", e.Check)
	if e.Check == "" {
		where = fmt.Sprintf("in resource flavor %q", e.Flavor)
	}
	return fmt.Sprintf("%s: conflict for %s: key=%s, value1=%s, value2=%s",
		where, e.Field, e.Key, e.Existing, e.New)
}
