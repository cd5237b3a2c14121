// Package podshape compares the scheduling fields of a pod with those of
// the pod set it is to run in — requests, node selector, tolerations and
// priority, as a Workload's pod set template and spec record them — and
// names each difference with both values. The admitter answers a join with
// it; the grouper explains with it why a pod is not ungated.
package podshape

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/sluice-dev/sluice/pkg/podset"
)

// Field names, as they appear in messages.
const (
	FieldRequests     = "requests"
	FieldNodeSelector = "nodeSelector"
	FieldTolerations  = "tolerations"
	FieldPriority     = "priority"
)

// Difference is one field in which a pod differs from what it must match.
type Difference struct {
	// Field is the pod's field, e.g. FieldNodeSelector.
	Field string
	// Pod is the pod's value and Want the one it must match, printed.
	Pod, Want string
	// Of names whose Want is: "pod set" or "workload".
	Of string
}

// String reads "nodeSelector: pod {disk=hdd}, pod set {disk=ssd}".
func (d Difference) String() string {
	return fmt.Sprintf("%s: pod %s, %s %s", d.Field, d.Pod, d.Of, d.Want)
}

// Join prints differences in one line, separated by "; ".
func Join(diffs []Difference) string {
	parts := make([]string, len(diffs))
	for i, d := range diffs {
		parts[i] = d.String()
	}
	return strings.Join(parts, "; ")
}

// NodeSelector compares a pod's node selector with its pod set's; an
// empty selector equals an absent one.
func NodeSelector(pod, set map[string]string) *Difference {
	if maps.Equal(pod, set) {
		return nil
	}
	return &Difference{Field: FieldNodeSelector, Pod: formatMap(pod), Want: formatMap(set), Of: "pod set"}
}

// Tolerations compares a pod's tolerations with its pod set's as sets (in
// any order, a repeated one counted once), leaving out the ones the API
// server adds to every pod (see APIServerDefault): a pod set built from a
// template lacks them, and a pod may or may not have been given them.
func Tolerations(pod, set []corev1.Toleration) *Difference {
	p, s := WithoutAPIServerDefaults(pod), WithoutAPIServerDefaults(set)
	if covers(p, s) && covers(s, p) {
		return nil
	}
	return &Difference{Field: FieldTolerations, Pod: formatTolerations(p), Want: formatTolerations(s), Of: "pod set"}
}

// covers reports whether every toleration of b is in a.
func covers(a, b []corev1.Toleration) bool {
	for _, t := range b {
		if !slices.ContainsFunc(a, func(o corev1.Toleration) bool { return podset.SameToleration(o, t) }) {
			return false
		}
	}
	return true
}

// Priority compares a pod's priority with its workload's.
func Priority(pod, workload int32) *Difference {
	if pod == workload {
		return nil
	}
	return &Difference{Field: FieldPriority, Pod: fmt.Sprint(pod), Want: fmt.Sprint(workload), Of: "workload"}
}

// Requests compares what a pod reserves with what its pod set reserves
// per pod, resource by resource; a zero request equals none.
func Requests(pod, set corev1.ResourceList) *Difference {
	if sameQuantities(pod, set) {
		return nil
	}
	return &Difference{Field: FieldRequests, Pod: FormatResources(pod), Want: FormatResources(set), Of: "pod set"}
}

func sameQuantities(a, b corev1.ResourceList) bool {
	for name, q := range a {
		if o := b[name]; q.Cmp(o) != 0 {
			return false
		}
	}
	for name, q := range b {
		if o := a[name]; q.Cmp(o) != 0 {
			return false
		}
	}
	return true
}

// APIServerDefault reports whether t is one of the two tolerations the
// API server (its DefaultTolerationSeconds admission plugin) gives every
// pod that has none for the key: NoExecute for 300 s of
// node.kubernetes.io/not-ready and node.kubernetes.io/unreachable.
func APIServerDefault(t corev1.Toleration) bool {
	return (t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable) &&
		t.Operator == corev1.TolerationOpExists && t.Value == "" &&
		t.Effect == corev1.TaintEffectNoExecute &&
		t.TolerationSeconds != nil && *t.TolerationSeconds == 300
}

// WithoutAPIServerDefaults returns ts without the tolerations
// APIServerDefault names; ts itself is not changed.
func WithoutAPIServerDefaults(ts []corev1.Toleration) []corev1.Toleration {
	if !slices.ContainsFunc(ts, APIServerDefault) {
		return ts
	}
	return slices.DeleteFunc(slices.Clone(ts), APIServerDefault)
}

// formatMap prints a map as {k=v, ...} in key order, or "none".
func formatMap(m map[string]string) string {
	if len(m) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// FormatResources prints a resource list as {cpu=1, memory=1Gi} in name
// order, leaving out zero quantities, or "none".
func FormatResources(list corev1.ResourceList) string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(list)) {
		if q := list[name]; !q.IsZero() {
			parts = append(parts, string(name)+"="+q.String())
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// formatTolerations prints tolerations in a stable order, each as
// key[=value][:effect] with " exists" for the Exists operator and
// " for Ns" for a time limit, or "none".
func formatTolerations(ts []corev1.Toleration) string {
	if len(ts) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(ts))
	for _, t := range ts {
		s := t.Key
		if t.Key == "" {
			s = "*"
		}
		if t.Value != "" {
			s += "=" + t.Value
		}
		if t.Effect != "" {
			s += ":" + string(t.Effect)
		}
		if t.Operator == corev1.TolerationOpExists {
			s += " exists"
		}
		if t.TolerationSeconds != nil {
			s += fmt.Sprintf(" for %ds", *t.TolerationSeconds)
		}
		parts = append(parts, s)
	}
	slices.Sort(parts)
	return "[" + strings.Join(slices.Compact(parts), ", ") + "]"
}
