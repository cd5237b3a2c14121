package podgroup

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/pkg/podkeys"
)

// MaxPodSets is the most pod sets a Workload may have, and so the most
// roles a group may have, declared or found.
const MaxPodSets = 18

// MaxSetsSize is the largest pod-group-sets annotation accepted, in bytes.
// The API server's own limit is 256 KiB for all of a pod's annotations
// together; a declaration needs a fraction of that (list only what matters
// for admission in the templates).
const MaxSetsSize = 64 << 10

// Set is one role of a group declared by the pod-group-sets annotation
// (KEP-976 Story 3): a pod set of the group's workload, known before its
// pods exist.
type Set struct {
	// Name is the pod set's name; the pods of the role carry it in their
	// kueue.x-k8s.io/pod-group-role label.
	Name string
	// Count is how many pods the role has.
	Count int32
	// Template is the shape of the role's pods. Nil means "like the pod
	// that declares the group": the role of the declaring pod itself.
	Template *corev1.PodTemplateSpec
}

// setFields are the keys a declared set may have.
var setFields = []string{"name", "count", "template"}

// SetsPath is the field path errors about the annotation start with.
var SetsPath = field.NewPath("metadata", "annotations").Key(podkeys.PodGroupSetsAnnotation)

// ParseSets reads a pod-group-sets annotation: a JSON or YAML list of pod
// sets, each with a name, a count and an optional pod template, in the
// shape of a Workload's pod sets. Every problem is reported, under
// SetsPath, naming the set and the field.
func ParseSets(text string) ([]Set, field.ErrorList) {
	if len(text) > MaxSetsSize {
		return nil, field.ErrorList{field.TooLong(SetsPath, "", MaxSetsSize)}
	}
	data, err := yaml.YAMLToJSONStrict([]byte(text))
	if err != nil {
		return nil, field.ErrorList{field.Invalid(SetsPath, field.OmitValueType{}, "not valid JSON or YAML: "+err.Error())}
	}
	var raw []map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil || raw == nil {
		return nil, field.ErrorList{field.Invalid(SetsPath, text,
			"must be a list of pod sets, each an object with name, count and an optional template")}
	}
	var errs field.ErrorList
	switch {
	case len(raw) == 0:
		errs = append(errs, field.Required(SetsPath, "at least one pod set must be declared"))
	case len(raw) > MaxPodSets:
		errs = append(errs, field.TooMany(SetsPath, len(raw), MaxPodSets))
	}
	sets := make([]Set, 0, len(raw))
	seen := map[string]bool{}
	var total int64
	for i, fields := range raw {
		path := SetsPath.Index(i)
		set, setErrs := parseSet(path, fields)
		errs = append(errs, setErrs...)
		if set.Name != "" {
			if seen[set.Name] {
				errs = append(errs, field.Duplicate(path.Child("name"), set.Name))
			}
			seen[set.Name] = true
		}
		total += int64(set.Count)
		sets = append(sets, set)
	}
	if total > math.MaxInt32 {
		errs = append(errs, field.Invalid(SetsPath, total, "the counts must add up to at most 2147483647 pods"))
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return sets, nil
}

// parseSet reads one declared set.
func parseSet(path *field.Path, fields map[string]json.RawMessage) (Set, field.ErrorList) {
	var set Set
	var errs field.ErrorList
	for _, key := range slices.Sorted(maps.Keys(fields)) {
		if !slices.Contains(setFields, key) {
			errs = append(errs, field.NotSupported(path.Child(key), key, setFields))
		}
	}
	if err := json.Unmarshal(fields["name"], &set.Name); fields["name"] == nil || err != nil {
		errs = append(errs, field.Required(path.Child("name"), "a string naming the role"))
	} else if problems := validation.IsDNS1123Label(set.Name); len(problems) > 0 {
		errs = append(errs, field.Invalid(path.Child("name"), set.Name, "must be a DNS-1123 label ("+problems[0]+")"))
	}
	if err := json.Unmarshal(fields["count"], &set.Count); fields["count"] == nil || err != nil {
		errs = append(errs, field.Required(path.Child("count"), "a whole number of pods, at least 1"))
	} else if set.Count < 1 {
		errs = append(errs, field.Invalid(path.Child("count"), set.Count, "must be at least 1"))
	}
	if tmpl, ok := fields["template"]; ok && string(tmpl) != "null" {
		set.Template = &corev1.PodTemplateSpec{}
		errs = append(errs, parseTemplate(path.Child("template"), tmpl, set.Template)...)
	}
	return set, errs
}

// parseTemplate decodes a pod template strictly: a field a pod template
// does not have (a misplaced "requests", say) is an error, not silently
// dropped, since it would change what the role reserves.
func parseTemplate(path *field.Path, data []byte, into *corev1.PodTemplateSpec) field.ErrorList {
	strict, err := kjson.UnmarshalStrict(data, into, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return field.ErrorList{field.Invalid(path, field.OmitValueType{}, "not a pod template: "+err.Error())}
	}
	var errs field.ErrorList
	for _, e := range strict {
		errs = append(errs, field.Invalid(path, field.OmitValueType{}, "not a pod template: "+e.Error()))
	}
	if len(errs) == 0 && len(into.Spec.Containers) == 0 {
		errs = append(errs, field.Required(path.Child("spec", "containers"),
			"a template lists the role's containers with their resource requests; leave the template out for pods shaped like the declaring pod"))
	}
	return errs
}

// OwnRole returns the role of the pod that declares sets: the one its
// pod-group-role label names, else the only set without a template. The
// declaring pod's own role must have no template: its pods are shaped like
// the declaring pod.
func OwnRole(labels map[string]string, sets []Set) (string, *field.Error) {
	rolePath := field.NewPath("metadata", "labels").Key(podkeys.PodGroupRoleLabel)
	if role, ok := labels[podkeys.PodGroupRoleLabel]; ok {
		i := slices.IndexFunc(sets, func(s Set) bool { return s.Name == role })
		switch {
		case i < 0:
			return "", field.NotSupported(rolePath, role, SetNames(sets))
		case sets[i].Template != nil:
			return "", field.Invalid(rolePath, role,
				"the declaring pod's own role must have no template in "+podkeys.PodGroupSetsAnnotation+": its pods are shaped like this pod")
		}
		return role, nil
	}
	var own []string
	for _, s := range sets {
		if s.Template == nil {
			own = append(own, s.Name)
		}
	}
	switch len(own) {
	case 1:
		return own[0], nil
	case 0:
		return "", field.Required(SetsPath,
			"one pod set must have no template: the role of this pod, whose pods are shaped like it")
	default:
		return "", field.Required(rolePath, fmt.Sprintf(
			"pod sets %v have no template; name the one this pod belongs to in this label", own))
	}
}

// SetNames lists the names of sets, in order.
func SetNames(sets []Set) []string {
	names := make([]string, len(sets))
	for i, s := range sets {
		names[i] = s.Name
	}
	return names
}

// DeclaredCount adds up the pods sets declare.
func DeclaredCount(sets []Set) int32 {
	var n int32
	for _, s := range sets {
		n += s.Count
	}
	return n
}
