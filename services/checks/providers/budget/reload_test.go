package budget

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
)

// TestReloader applies a changed file, keeps the last good budgets when
// the file turns bad, and revokes when the new budgets are lower.
func TestReloader(t *testing.T) {
	path := filepath.Join(t.TempDir(), "budgets.yaml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(`namespaces: {team-a: {hard: {cpu: 10}}}`)
	cfg, data, err := LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c := New(cfg, newClock().now, WithRestartGrace(0))
	n := &notifier{}
	c.SetNotifier(n)
	r := NewReloader(path, c, data, logr.Discard())
	for _, key := range []string{"a", "b"} {
		evaluate(t, c, request(key, "team-a", "4"))
	}

	steps := []struct {
		name        string
		file        string // "" leaves it
		wantApplied bool
		wantErr     string
		// then a new evaluation of 2 cpu in team-a
		want checksv1.State
	}{
		{name: "unchanged", wantApplied: false, want: checksv1.State_STATE_READY},
		{name: "bad file keeps the last good budgets", file: `namespaces: {team-a: {hard: {cpu: ten}}}`,
			wantErr: `namespaces["team-a"].hard["cpu"]: "ten" is not a Kubernetes quantity (such as 500m, 4 or 16Gi); keeping the budgets read last`, want: checksv1.State_STATE_READY},
		{name: "the same bad file again is not news", wantApplied: false, want: checksv1.State_STATE_READY},
		{name: "lowered: revokes b, the newest", file: `namespaces: {team-a: {hard: {cpu: 5}}}`, wantApplied: true, want: checksv1.State_STATE_RETRY},
	}
	for i, s := range steps {
		if s.file != "" {
			write(s.file)
		}
		applied, err := r.Reload()
		if s.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), s.wantErr) {
				t.Fatalf("%s: Reload error = %v, want %q", s.name, err, s.wantErr)
			}
		} else if err != nil {
			t.Fatalf("%s: Reload: %v", s.name, err)
		}
		if applied != s.wantApplied {
			t.Errorf("%s: applied = %v, want %v", s.name, applied, s.wantApplied)
		}
		key := "new-" + string(rune('0'+i))
		if got := evaluate(t, c, request(key, "team-a", "2")); got.GetState() != s.want {
			t.Errorf("%s: a new evaluation = %s (%q), want %s", s.name, got.GetState(), got.GetMessage(), s.want)
		}
		release(t, c, key)
	}
	if want := [][]string{{"b"}}; len(n.pushed) != 1 || !slices.Equal(n.pushed[0], want[0]) {
		t.Errorf("pushed %v, want %v", n.pushed, want)
	}
}

func TestLoadFileNamesThePath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "budgets.yaml")
	if err := os.WriteFile(path, []byte(`namespaces: {team-a: {}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadFile(path); err == nil || !strings.Contains(err.Error(), path+`: namespaces["team-a"].hard: required`) {
		t.Errorf("LoadFile error = %v, want the path and the field", err)
	}
	if _, _, err := LoadFile(path + ".missing"); err == nil {
		t.Error("LoadFile of a missing file succeeded")
	}
}
