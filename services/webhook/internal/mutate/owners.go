package mutate

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Preset names which pods sluice queues by their controller's kind.
type Preset string

// The presets of the webhook's --owners flag.
const (
	// PresetAlone: sluice is the only queueing system; a pod is queued
	// whatever controls it.
	PresetAlone Preset = "alone"
	// PresetBesideKueue: Kueue queues the kinds it integrates whole; their
	// pods are left to it.
	PresetBesideKueue Preset = "beside-kueue"
	// PresetAuto is PresetBesideKueue while Kueue is installed (its
	// Workload CRD exists) and PresetAlone otherwise.
	PresetAuto Preset = "auto"
)

// Presets lists the valid values of --owners.
var Presets = []Preset{PresetAuto, PresetAlone, PresetBesideKueue}

// ParsePreset reads a --owners value.
func ParsePreset(s string) (Preset, error) {
	for _, p := range Presets {
		if string(p) == s {
			return p, nil
		}
	}
	return "", fmt.Errorf("--owners %q: must be one of %q", s, Presets)
}

// InEffect returns the preset that applies given whether Kueue is
// installed: never PresetAuto.
func (p Preset) InEffect(kueueInstalled bool) Preset {
	if p != PresetAuto {
		return p
	}
	if kueueInstalled {
		return PresetBesideKueue
	}
	return PresetAlone
}

// ParseKinds reads a comma-separated list of group/Kind (e.g.
// "batch/Job,apps/ReplicaSet"); a kind of the core group is written
// "/Kind". Empty text gives an empty list.
func ParseKinds(text string) ([]schema.GroupKind, error) {
	var kinds []schema.GroupKind
	for _, item := range strings.Split(text, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		i := strings.LastIndex(item, "/")
		if i < 0 || item[i+1:] == "" {
			return nil, fmt.Errorf("%q: must be group/Kind, e.g. batch/Job (\"/Kind\" for the core group)", item)
		}
		kinds = append(kinds, schema.GroupKind{Group: item[:i], Kind: item[i+1:]})
	}
	return kinds, nil
}

// FormatKinds writes kinds as ParseKinds reads them.
func FormatKinds(kinds []schema.GroupKind) string {
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = k.Group + "/" + k.Kind
	}
	return strings.Join(parts, ",")
}
