package budget

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

func TestParse(t *testing.T) {
	cfg := mustParse(t, `
namespaces:
  team-a:
    hard: {cpu: 100, memory: 400Gi, nvidia.com/gpu: "8"}
    soft: {cpu: "80"}
    window: 24h
  team-b:
    hard: {cpu: 500m}
`)
	a, b := cfg.Namespaces["team-a"], cfg.Namespaces["team-b"]
	for _, c := range []struct {
		name string
		got  Resources
		res  string
		want string
	}{
		{"team-a hard cpu (a YAML number)", a.Hard, "cpu", "100"},
		{"team-a hard memory", a.Hard, "memory", "400Gi"},
		{"team-a hard gpu", a.Hard, "nvidia.com/gpu", "8"},
		{"team-a soft cpu", a.Soft, "cpu", "80"},
		{"team-b hard cpu", b.Hard, "cpu", "500m"},
	} {
		q, ok := c.got[c.res]
		if !ok || q.String() != c.want {
			t.Errorf("%s = %v (set: %v), want %s", c.name, q.String(), ok, c.want)
		}
	}
	if a.Window != 24*time.Hour || b.Window != 0 {
		t.Errorf("windows = %v, %v; want 24h and 0 (the default)", a.Window, b.Window)
	}
	if len(cfg.Namespaces) != 2 || len(b.Soft) != 0 {
		t.Errorf("config = %+v, want two namespaces, team-b without soft limits", cfg)
	}
	if empty := mustParse(t, ""); len(empty.Namespaces) != 0 {
		t.Errorf("empty file = %+v, want no budgets", empty)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{"unknown field", `namespaces: {team-a: {hard: {cpu: 1}, windw: 1h}}`, `unknown field "windw"`},
		{"unknown top-level field", `budgets: {}`, `unknown field "budgets"`},
		{"hard missing", `namespaces: {team-a: {soft: {cpu: 1}}}`, `namespaces["team-a"].hard: required`},
		{"bad quantity", `namespaces: {team-a: {hard: {cpu: lots}}}`, `namespaces["team-a"].hard["cpu"]: "lots" is not a Kubernetes quantity`},
		{"negative quantity", `namespaces: {team-a: {hard: {cpu: -1}}}`, `namespaces["team-a"].hard["cpu"]: -1 is negative`},
		{"bad resource name", `namespaces: {team-a: {hard: {"a b": 1}}}`, `namespaces["team-a"].hard["a b"]: not a resource name`},
		{"soft over hard", `namespaces: {team-a: {hard: {cpu: 4}, soft: {cpu: 5}}}`, `namespaces["team-a"].soft["cpu"]: 5 is more than hard["cpu"] 4`},
		{"soft without hard", `namespaces: {team-a: {hard: {cpu: 4}, soft: {memory: 1Gi}}}`, `namespaces["team-a"].soft["memory"]: no hard limit for memory`},
		{"bad window", `namespaces: {team-a: {hard: {cpu: 4}, window: a day}}`, `namespaces["team-a"].window: time: invalid duration`},
		{"negative window", `namespaces: {team-a: {hard: {cpu: 4}, window: -1h}}`, `namespaces["team-a"].window: -1h is negative`},
		{"bad namespace", `namespaces: {Team_A: {hard: {cpu: 4}}}`, `namespaces["Team_A"]: not a namespace name`},
		{"not YAML", `namespaces: [`, `yaml`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Parse error = %v, want one with %q", err, tt.want)
			}
		})
	}
}

// TestShippedConfigMapParses keeps deploy/checks-budget's example budgets
// valid.
func TestShippedConfigMapParses(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "deploy", "checks-budget", "configmap.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal(raw, &cm); err != nil {
		t.Fatal(err)
	}
	cfg, err := Parse([]byte(cm.Data["budgets.yaml"]))
	if err != nil {
		t.Fatalf("deploy/checks-budget/configmap.yaml: budgets.yaml: %v", err)
	}
	if len(cfg.Namespaces) == 0 {
		t.Error("deploy/checks-budget/configmap.yaml: budgets.yaml has no budgets")
	}
}
