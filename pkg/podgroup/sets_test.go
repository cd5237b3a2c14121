package podgroup

import (
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/sluice-dev/sluice/pkg/podkeys"
)

// sparkSets is a Story 3 declaration in YAML: the driver's own role and
// ten workers of one CPU each.
const sparkSets = `
- name: driver
  count: 1
- name: worker
  count: 10
  template:
    spec:
      containers:
      - name: worker
        resources:
          requests:
            cpu: "1"
`

func TestParseSets(t *testing.T) {
	tests := []struct {
		name string
		in   string
		// want is "name:count:templated" per set; empty when refused.
		want []string
		// errs are substrings of the error list, each naming a field.
		errs []string
	}{
		{name: "yaml", in: sparkSets, want: []string{"driver:1:false", "worker:10:true"}},
		{name: "json", in: `[{"name":"driver","count":1},{"name":"worker","count":3,"template":{"spec":{"containers":[{"name":"w"}]}}}]`,
			want: []string{"driver:1:false", "worker:3:true"}},
		{name: "yaml flow style", in: `[{name: driver, count: 1}, {name: exec, count: 2}]`, want: []string{"driver:1:false", "exec:2:false"}},
		{name: "null template is no template", in: `[{"name":"a","count":1,"template":null}]`, want: []string{"a:1:false"}},
		{name: "not yaml", in: "[1,", errs: []string{SetsPath.String() + ": Invalid value: not valid JSON or YAML"}},
		{name: "not a list", in: `{"name":"a","count":1}`, errs: []string{"must be a list of pod sets"}},
		{name: "empty list", in: `[]`, errs: []string{"at least one pod set"}},
		{name: "too many", in: "[" + strings.TrimSuffix(strings.Repeat(`{"name":"a","count":1},`, MaxPodSets+1), ",") + "]",
			errs: []string{"Too many: 19: must have at most 18 items"}},
		{name: "missing name and count", in: `[{}]`, errs: []string{"[0].name: Required value", "[0].count: Required value"}},
		{name: "bad name", in: `[{"name":"Driver_1","count":1}]`, errs: []string{"[0].name: Invalid value: \"Driver_1\": must be a DNS-1123 label"}},
		{name: "zero count", in: `[{"name":"a","count":0}]`, errs: []string{"[0].count: Invalid value: 0: must be at least 1"}},
		{name: "count not a number", in: `[{"name":"a","count":"two"}]`, errs: []string{"[0].count: Required value"}},
		{name: "duplicate name", in: `[{"name":"a","count":1},{"name":"a","count":2}]`, errs: []string{"[1].name: Duplicate value: \"a\""}},
		{name: "duplicate key", in: "- name: a\n  name: b\n  count: 1\n", errs: []string{"not valid JSON or YAML"}},
		{name: "unknown key", in: `[{"name":"a","count":1,"replicas":3}]`, errs: []string{"[0].replicas: Unsupported value: \"replicas\""}},
		{name: "misplaced requests", in: `[{"name":"w","count":1,"template":{"spec":{"containers":[{"name":"w","requests":{"cpu":"1"}}]}}}]`,
			errs: []string{"[0].template: Invalid value", `unknown field "spec.containers[0].requests"`}},
		{name: "bad quantity", in: `[{"name":"w","count":1,"template":{"spec":{"containers":[{"name":"w","resources":{"requests":{"cpu":"lots"}}}]}}}]`,
			errs: []string{"[0].template: Invalid value", "quantities must match"}},
		{name: "template without containers", in: `[{"name":"w","count":1,"template":{"spec":{}}}]`,
			errs: []string{"[0].template.spec.containers: Required value"}},
		{name: "counts overflow", in: `[{"name":"a","count":2147483647},{"name":"b","count":1}]`, errs: []string{"add up to at most 2147483647"}},
		{name: "too large", in: strings.Repeat(" ", MaxSetsSize+1), errs: []string{"Too long"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sets, errs := ParseSets(tt.in)
			if len(tt.errs) > 0 {
				if len(errs) == 0 || sets != nil {
					t.Fatalf("ParseSets = %v, no error; want errors %q", sets, tt.errs)
				}
				all := errs.ToAggregate().Error()
				for _, want := range tt.errs {
					if !strings.Contains(all, want) {
						t.Errorf("errors %q do not contain %q", all, want)
					}
				}
				return
			}
			if len(errs) > 0 {
				t.Fatalf("ParseSets: %v", errs)
			}
			var got []string
			for _, s := range sets {
				got = append(got, s.Name+":"+itoa(s.Count)+":"+map[bool]string{true: "true", false: "false"}[s.Template != nil])
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("sets = %v, want %v", got, tt.want)
			}
		})
	}
}

func itoa(n int32) string { b, _ := json.Marshal(n); return string(b) }

func TestParseSetsReadsTemplate(t *testing.T) {
	sets, errs := ParseSets(sparkSets)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	got := sets[1].Template.Spec.Containers[0].Resources.Requests["cpu"]
	if got.Cmp(resource.MustParse("1")) != 0 {
		t.Errorf("worker cpu request = %s, want 1", got.String())
	}
	if DeclaredCount(sets) != 11 {
		t.Errorf("DeclaredCount = %d, want 11", DeclaredCount(sets))
	}
}

func TestOwnRole(t *testing.T) {
	tmpl, _ := ParseSets(`[{"name":"w","count":1,"template":{"spec":{"containers":[{"name":"w"}]}}}]`)
	two, _ := ParseSets(`[{"name":"a","count":1},{"name":"b","count":1}]`)
	spark, _ := ParseSets(sparkSets)
	role := func(r string) map[string]string { return map[string]string{podkeys.PodGroupRoleLabel: r} }
	tests := []struct {
		name   string
		labels map[string]string
		sets   []Set
		want   string
		err    field.ErrorType
	}{
		{"the only set without a template", nil, spark, "driver", ""},
		{"named by the label", role("driver"), spark, "driver", ""},
		{"label names a templated set", role("worker"), spark, "", field.ErrorTypeInvalid},
		{"label names no set", role("executor"), spark, "", field.ErrorTypeNotSupported},
		{"no set without a template", nil, tmpl, "", field.ErrorTypeRequired},
		{"two sets without a template", nil, two, "", field.ErrorTypeRequired},
		{"two sets, label chooses", role("b"), two, "b", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := OwnRole(tt.labels, tt.sets)
			switch {
			case tt.err != "" && (err == nil || err.Type != tt.err):
				t.Fatalf("OwnRole = %q, %v; want error type %s", got, err, tt.err)
			case tt.err == "" && (err != nil || got != tt.want):
				t.Fatalf("OwnRole = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// FuzzParseSets: whatever the input, the parser either refuses it with
// errors under the annotation's path or returns 1 to MaxPodSets sets with
// unique DNS-label names, counts of at least 1 adding up within int32,
// and templates that have containers.
func FuzzParseSets(f *testing.F) {
	for _, seed := range []string{sparkSets, `[{"name":"a","count":1}]`, `[{name: a, count: 2}]`, "[1,", "", "null", `[{}]`,
		`[{"name":"w","count":1,"template":{"spec":{"containers":[{"name":"w"}]}}}]`, "- name: a\n  count: 1\n  template: {}\n"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sets, errs := ParseSets(s)
		if len(errs) > 0 {
			if sets != nil {
				t.Fatalf("ParseSets(%q) returned sets with errors", s)
			}
			for _, e := range errs {
				if !strings.HasPrefix(e.Field, SetsPath.String()) {
					t.Fatalf("ParseSets(%q): error %v is not under %s", s, e, SetsPath)
				}
			}
			return
		}
		if len(sets) < 1 || len(sets) > MaxPodSets {
			t.Fatalf("ParseSets(%q) = %d sets", s, len(sets))
		}
		seen := map[string]bool{}
		var total int64
		for _, set := range sets {
			if set.Name == "" || seen[set.Name] || set.Count < 1 {
				t.Fatalf("ParseSets(%q): bad set %+v", s, set)
			}
			if set.Template != nil && len(set.Template.Spec.Containers) == 0 {
				t.Fatalf("ParseSets(%q): set %s has a template without containers", s, set.Name)
			}
			seen[set.Name] = true
			total += int64(set.Count)
		}
		if total != int64(DeclaredCount(sets)) {
			t.Fatalf("ParseSets(%q): counts overflow", s)
		}
	})
}
