package budget

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// Config is the budget of every namespace that has one. A namespace
// without an entry is not limited.
type Config struct {
	Namespaces map[string]Budget
}

// Budget is one namespace's limits.
type Budget struct {
	// Hard is what the namespace may use and spend in all; a workload
	// that would go over waits (RETRY), one that alone is over is
	// REJECTED.
	Hard Resources
	// Soft, at most Hard, marks the pods of workloads that go over it.
	Soft Resources
	// Window is how long released spend still counts.
	Window time.Duration
}

// fileConfig is the file's layout, before validation.
type fileConfig struct {
	Namespaces map[string]fileBudget `json:"namespaces"`
}

type fileBudget struct {
	Hard   map[string]quantityText `json:"hard"`
	Soft   map[string]quantityText `json:"soft,omitempty"`
	Window string                  `json:"window,omitempty"`
}

// quantityText is a quantity as written: YAML turns `cpu: 100` into a
// number and `cpu: 500m` into a string, and both are meant.
type quantityText string

func (q *quantityText) UnmarshalJSON(raw []byte) error {
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return err
		}
		*q = quantityText(s)
		return nil
	}
	*q = quantityText(raw)
	return nil
}

// LoadFile reads and parses the config file at path. It returns the
// file's contents too, so that a reload can tell whether they changed.
func LoadFile(path string) (*Config, []byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	cfg, err := Parse(data)
	if err != nil {
		return nil, data, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, data, nil
}

// Parse parses and validates a config in YAML (or JSON). Unknown fields
// are refused, so a typo does not go unnoticed; errors name the field.
func Parse(data []byte) (*Config, error) {
	var fc fileConfig
	if err := yaml.UnmarshalStrict(data, &fc); err != nil {
		return nil, err
	}
	cfg := &Config{Namespaces: make(map[string]Budget, len(fc.Namespaces))}
	for _, ns := range slices.Sorted(maps.Keys(fc.Namespaces)) {
		field := fmt.Sprintf("namespaces[%q]", ns)
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return nil, fmt.Errorf("%s: not a namespace name: %s", field, errs[0])
		}
		b, err := fc.Namespaces[ns].parse()
		if err != nil {
			return nil, fmt.Errorf("%s.%w", field, err)
		}
		cfg.Namespaces[ns] = b
	}
	return cfg, nil
}

// parse validates one budget; errors start with the field below the
// namespace.
func (fb fileBudget) parse() (Budget, error) {
	var b Budget
	var err error
	if len(fb.Hard) == 0 {
		return b, fmt.Errorf("hard: required: the resources the namespace may use, such as {cpu: \"100\"}")
	}
	if b.Hard, err = parseResources("hard", fb.Hard); err != nil {
		return b, err
	}
	if b.Soft, err = parseResources("soft", fb.Soft); err != nil {
		return b, err
	}
	for _, r := range slices.Sorted(maps.Keys(b.Soft)) {
		hard, ok := b.Hard[r]
		soft := b.Soft[r]
		switch {
		case !ok:
			return b, fmt.Errorf("soft[%q]: no hard limit for %s; a soft limit needs one", r, r)
		case soft.Cmp(hard) > 0:
			return b, fmt.Errorf("soft[%q]: %s is more than hard[%q] %s", r, soft.String(), r, hard.String())
		}
	}
	if fb.Window != "" {
		if b.Window, err = time.ParseDuration(fb.Window); err != nil {
			return b, fmt.Errorf("window: %w", err)
		}
		if b.Window < 0 {
			return b, fmt.Errorf("window: %s is negative", fb.Window)
		}
	}
	return b, nil
}

// parseResources parses a map of resource names to quantities.
func parseResources(field string, in map[string]quantityText) (Resources, error) {
	out := make(Resources, len(in))
	for _, name := range slices.Sorted(maps.Keys(in)) {
		if errs := validation.IsQualifiedName(name); len(errs) > 0 {
			return nil, fmt.Errorf("%s[%q]: not a resource name: %s", field, name, errs[0])
		}
		q, err := resource.ParseQuantity(string(in[name])) // its error is a regular expression
		if err != nil {
			return nil, fmt.Errorf("%s[%q]: %q is not a Kubernetes quantity (such as 500m, 4 or 16Gi)", field, name, in[name])
		}
		if q.Sign() < 0 {
			return nil, fmt.Errorf("%s[%q]: %s is negative", field, name, in[name])
		}
		out[name] = q
	}
	return out, nil
}

// window is ns's window, 0 without a budget.
func (c *Config) window(ns string) time.Duration {
	return c.Namespaces[ns].Window
}
