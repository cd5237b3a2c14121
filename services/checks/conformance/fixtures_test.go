package conformance

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
)

func TestParseFixtures(t *testing.T) {
	fs, err := ParseFixtures([]byte(`{"fixtures": [
	  {"name": "gpu-pool", "checkName": "pool", "parameters": {"nodeLabels": {"pool": "a100"}},
	   "workload": {"namespace": "ml", "pod_sets": [{"name": "main", "count": 2}]},
	   "expect": {"state": "STATE_READY", "reason": "", "podSetUpdates": [{"name": "main", "nodeSelector": {"pool": "a100"}}]}},
	  {"name": "no-updates", "expect": {"state": "STATE_READY", "podSetUpdates": []}},
	  {"name": "anything", "expect": {"state": "STATE_REJECTED"}},
	  {"name": "bad", "expect": {"code": "FAILED_PRECONDITION"}}
	]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := len(fs); got != 4 {
		t.Fatalf("%d fixtures, want 4", got)
	}
	gpu := fs[0]
	if gpu.Name != "gpu-pool" || gpu.CheckName != "pool" || gpu.Workload.GetNamespace() != "ml" || gpu.Workload.GetPodSets()[0].GetCount() != 2 {
		t.Errorf("gpu-pool = %+v", gpu)
	}
	if got := gpu.Parameters.GetFields()["nodeLabels"].GetStructValue().GetFields()["pool"].GetStringValue(); got != "a100" {
		t.Errorf("gpu-pool parameters.nodeLabels.pool = %q, want a100", got)
	}
	if gpu.Expect.State != checksv1.State_STATE_READY || gpu.Expect.Reason == nil || *gpu.Expect.Reason != "" {
		t.Errorf("gpu-pool expect = %+v, want READY with an empty reason to compare", gpu.Expect)
	}
	want := &checksv1.PodSetUpdate{Name: "main", NodeSelector: map[string]string{"pool": "a100"}}
	if len(gpu.Expect.PodSetUpdates) != 1 || !proto.Equal(gpu.Expect.PodSetUpdates[0], want) {
		t.Errorf("gpu-pool podSetUpdates = %v, want [%v]", gpu.Expect.PodSetUpdates, want)
	}
	if u := fs[1].Expect.PodSetUpdates; u == nil || len(u) != 0 {
		t.Errorf("no-updates podSetUpdates = %#v, want empty and not nil (compared)", u)
	}
	if e := fs[2].Expect; e.PodSetUpdates != nil || e.Reason != nil || fs[2].Parameters != nil || fs[2].Workload != nil {
		t.Errorf("anything = %+v, want nothing but the state", fs[2])
	}
	if c := fs[3].Expect.Code; c != codes.FailedPrecondition {
		t.Errorf("bad expect.code = %v, want FailedPrecondition", c)
	}
}

func TestParseFixturesErrors(t *testing.T) {
	fixture := func(body string) string { return `{"fixtures": [` + body + `]}` }
	tests := []struct {
		name, file string
		want       []string
	}{
		{"not JSON", `{"fixtures": [`, []string{"invalid JSON"}},
		{"trailing data", `{"fixtures": [{"name": "a", "expect": {"state": "STATE_READY"}}]} {}`, []string{"unexpected data after the JSON value"}},
		{"unknown top-level field", `{"fixture": []}`, []string{`unknown field "fixture"`}},
		{"no fixtures", `{"fixtures": []}`, []string{"fixtures: required"}},
		{"file not an object", `[]`, []string{"must be an object, got a JSON array"}},
		{"fixtures not a list", `{"fixtures": {}}`, []string{"fixtures: must be an array, got a JSON object"}},
		{"fixture not an object", `{"fixtures": [1]}`, []string{"fixtures[0]: must be an object, got a JSON number"}},
		{"name of the wrong type", fixture(`{"name": 7}`), []string{"fixtures[0]: name: must be a string, got a JSON number"}},
		{"no name", fixture(`{"expect": {"state": "STATE_READY"}}`), []string{"fixtures[0]: name:"}},
		{"name with a space", fixture(`{"name": "gpu pool", "expect": {"state": "STATE_READY"}}`), []string{`fixtures[0] ("gpu pool"): name:`}},
		{"duplicate name", fixture(`{"name": "a", "expect": {"state": "STATE_READY"}}, {"name": "a", "expect": {"state": "STATE_READY"}}`),
			[]string{`fixtures[1] ("a"): name: also the name of fixtures[0]`}},
		{"unknown fixture field", fixture(`{"name": "a", "expected": {}}`), []string{`fixtures[0]: invalid JSON`, `unknown field "expected"`}},
		{"no expect", fixture(`{"name": "a"}`), []string{`fixtures[0] ("a"): expect: required`}},
		{"expect nothing", fixture(`{"name": "a", "expect": {"reason": "X"}}`), []string{`fixtures[0] ("a"): expect: a state`}},
		{"state not a name", fixture(`{"name": "a", "expect": {"state": "READY"}}`), []string{`fixtures[0] ("a"): expect.state: "READY" is not an answer`, "STATE_READY"}},
		{"unspecified state", fixture(`{"name": "a", "expect": {"state": "STATE_UNSPECIFIED"}}`), []string{`expect.state: "STATE_UNSPECIFIED" is not an answer`}},
		{"state and code", fixture(`{"name": "a", "expect": {"state": "STATE_READY", "code": "INTERNAL"}}`), []string{"expect: code stands alone"}},
		{"unknown code", fixture(`{"name": "a", "expect": {"code": "INVALID"}}`), []string{`expect.code: "INVALID" is not a gRPC code`}},
		{"code OK", fixture(`{"name": "a", "expect": {"code": "OK"}}`), []string{`expect.code: "OK" is not a failure`}},
		{"parameters not an object", fixture(`{"name": "a", "parameters": [1], "expect": {"state": "STATE_READY"}}`), []string{`fixtures[0] ("a"): parameters: must be a JSON object`}},
		{"unknown workload field", fixture(`{"name": "a", "workload": {"podset": []}, "expect": {"state": "STATE_READY"}}`), []string{`fixtures[0] ("a"): workload:`, "podset"}},
		{"malformed workload expecting an answer", fixture(`{"name": "a", "workload": {"podSets": [{"name": "x"}, {"name": "x"}]}, "expect": {"state": "STATE_READY"}}`),
			[]string{`fixtures[0] ("a"): workload.pod_sets[1].name:`, "expect that code instead"}},
		{"updates not an array", fixture(`{"name": "a", "expect": {"state": "STATE_READY", "podSetUpdates": {}}}`), []string{"expect.podSetUpdates: must be a JSON array"}},
		{"update with an unknown field", fixture(`{"name": "a", "expect": {"state": "STATE_READY", "podSetUpdates": [{"nodeSelectors": {}}]}}`), []string{"expect.podSetUpdates[0]:", "nodeSelectors"}},
		{"update no provider may send", fixture(`{"name": "a", "expect": {"state": "STATE_READY", "podSetUpdates": [{"name": "main", "labels": {"sluice.dev/x": "y"}}]}}`),
			[]string{`expect.podSetUpdates: no provider may answer this: pod_set_updates[0].labels["sluice.dev/x"]`}},
		{"updates with PENDING", fixture(`{"name": "a", "expect": {"state": "STATE_PENDING", "podSetUpdates": [{"name": "main"}]}}`), []string{"only READY answers carry updates"}},
		{"reason with a code", fixture(`{"name": "a", "expect": {"code": "INTERNAL", "reason": "X"}}`), []string{"expect: code stands alone"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs, err := ParseFixtures([]byte(tt.file))
			if err == nil {
				t.Fatalf("parsed %v, want an error", fs)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestLoadFixtures(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(good, []byte(`{"fixtures": [{"name": "a", "expect": {"state": "STATE_READY"}}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte(`{"fixtures": [{"name": "a"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if fs, err := LoadFixtures(good); err != nil || len(fs) != 1 || fs[0].Name != "a" {
		t.Errorf("LoadFixtures(good) = %v, %v", fs, err)
	}
	if _, err := LoadFixtures(bad); err == nil || !strings.Contains(err.Error(), bad+`: fixtures[0] ("a"): expect: required`) {
		t.Errorf("LoadFixtures(bad) = %v, want an error naming the file, the fixture and the field", err)
	}
	if _, err := LoadFixtures(filepath.Join(dir, "missing.json")); err == nil || !strings.Contains(err.Error(), "read fixtures") {
		t.Errorf("LoadFixtures(missing) = %v, want a read error", err)
	}
}

// TestFixtureBuiltInGo checks that a fixture built in Go, which skips
// ParseFixtures, is held to the same rules when it runs.
func TestFixtureBuiltInGo(t *testing.T) {
	fixtures := []Fixture{
		{Name: "no-expectation"},
		{Name: "updates-for-another-pod-set", Expect: Expectation{State: checksv1.State_STATE_READY, PodSetUpdates: []*checksv1.PodSetUpdate{{Name: "launcher"}}}},
	}
	results := RunAll(t.Context(), startRaw(t, defects{}), Options{Fixtures: fixtures})
	got := details(results)
	for name, want := range map[string]string{
		"Fixture/no-expectation":              "the fixture is invalid: expect.state: STATE_UNSPECIFIED is not an answer",
		"Fixture/updates-for-another-pod-set": `the fixture is invalid: it expects an update for pod set "launcher", which its workload does not have`,
	} {
		if !strings.Contains(got[name], want) {
			t.Errorf("%s detail %q does not contain %q", name, got[name], want)
		}
	}
	if f := outcomes(results, Failed); !slices.Equal(f, []string{"Fixture/no-expectation", "Fixture/updates-for-another-pod-set"}) {
		t.Errorf("failed = %v, want only the two fixtures", f)
	}
}

func TestDiffUpdates(t *testing.T) {
	tol := func(op checksv1.TolerationOperator) *checksv1.Toleration {
		return &checksv1.Toleration{Key: "gpu", Operator: op, Value: "yes", Effect: checksv1.TaintEffect_TAINT_EFFECT_NO_SCHEDULE}
	}
	u := func(name string, labels map[string]string, tols ...*checksv1.Toleration) *checksv1.PodSetUpdate {
		return &checksv1.PodSetUpdate{Name: name, Labels: labels, Tolerations: tols}
	}
	tests := []struct {
		name      string
		want, got []*checksv1.PodSetUpdate
		diffs     []string
	}{
		{"equal", []*checksv1.PodSetUpdate{u("a", map[string]string{"k": "v"})}, []*checksv1.PodSetUpdate{u("a", map[string]string{"k": "v"})}, nil},
		{"none expected, none got", []*checksv1.PodSetUpdate{}, nil, nil},
		{"unspecified operator is EQUAL", []*checksv1.PodSetUpdate{u("a", nil, tol(checksv1.TolerationOperator_TOLERATION_OPERATOR_EQUAL))},
			[]*checksv1.PodSetUpdate{u("a", nil, tol(checksv1.TolerationOperator_TOLERATION_OPERATOR_UNSPECIFIED))}, nil},
		{"entries missing, extra and other", []*checksv1.PodSetUpdate{u("a", map[string]string{"gone": "1", "same": "x", "other": "2"})},
			[]*checksv1.PodSetUpdate{u("a", map[string]string{"same": "x", "other": "3", "extra": "4"})},
			[]string{`pod_set_updates["a"].labels["extra"]: want none, got "4"`, `pod_set_updates["a"].labels["gone"]: want "1", got missing`, `pod_set_updates["a"].labels["other"]: want "2", got "3"`}},
		{"update missing and extra", []*checksv1.PodSetUpdate{u("a", nil)}, []*checksv1.PodSetUpdate{u("b", nil)},
			[]string{`pod_set_updates["a"]: want an update, got missing`, `pod_set_updates["b"]: want none, got an update`}},
		{"tolerations differ", []*checksv1.PodSetUpdate{u("a", nil, tol(checksv1.TolerationOperator_TOLERATION_OPERATOR_EXISTS))}, []*checksv1.PodSetUpdate{u("a", nil)},
			[]string{`pod_set_updates["a"].tolerations: want [{key:"gpu" operator:TOLERATION_OPERATOR_EXISTS value:"yes" effect:TAINT_EFFECT_NO_SCHEDULE}], got []`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := diffUpdates(tt.want, tt.got); !slices.Equal(got, tt.diffs) {
				t.Errorf("diffUpdates = %q, want %q", got, tt.diffs)
			}
		})
	}
}
