package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/services/checks/providers/nodepool"
	"github.com/sluice-dev/sluice/services/checks/sdk"
)

func startNodepool(t *testing.T) string {
	srv, err := sdk.NewServer(nodepool.Info("test"), nodepool.Checker{})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return lis.Addr().String()
}

// writeFile writes content to name in a fresh directory and returns its
// path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestRun(t *testing.T) {
	target := startNodepool(t)
	pool := []string{"--target", target, "--check-name", "pool", "--parameters", `{"nodeLabels": {"pool": "a100"}}`, "--timeout", "5s"}
	good := writeFile(t, "good.json", `{"fixtures": [
	  {"name": "a100", "expect": {"state": "STATE_READY", "reason": "NodePoolAssigned",
	   "podSetUpdates": [{"name": "main", "labels": {"nodepool.sluice.dev/pool": "a100"}, "nodeSelector": {"pool": "a100"}}]}},
	  {"name": "no-node-labels", "parameters": {}, "expect": {"code": "INVALID_ARGUMENT"}}]}`)
	wrong := writeFile(t, "wrong.json", `{"fixtures": [
	  {"name": "v100", "expect": {"state": "STATE_READY", "podSetUpdates": [{"name": "main", "labels": {"nodepool.sluice.dev/pool": "a100"}, "nodeSelector": {"pool": "v100"}}]}}]}`)
	malformed := writeFile(t, "malformed.json", `{"fixtures": [{"name": "a100", "expect": {"state": "READY"}}]}`)
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  []string
		wantErr  string
	}{
		{
			name:     "conformant",
			args:     append(pool[:len(pool):len(pool)], "--fixtures", good, "--keepalive-soak", "1s"),
			wantCode: 0,
			wantOut: []string{
				"PASS  Identity/GetProviderInfo", "PASS  Evaluate/Repeatable", "PASS  Evaluate/TwoChecksOneProvider",
				"PASS  Evaluate/DuplicatePodSet", "PASS  Release/MissingEvaluationKey", "PASS  Release/Twice",
				"SKIP  Release/ThenNewReservation: provider does not advertise CAPABILITY_RELEASE",
				"PASS  Fixture/a100", "PASS  Fixture/no-node-labels", "PASS  Keepalive/Soak",
				"21 passed, 0 failed, 1 skipped",
			},
		},
		{
			name:     "soak off",
			args:     pool,
			wantCode: 0,
			wantOut:  []string{"SKIP  Keepalive/Soak: the keepalive soak is off; --keepalive-soak 100s", "18 passed, 0 failed, 2 skipped"},
		},
		{
			name:     "fixture not met",
			args:     append(pool[:len(pool):len(pool)], "--fixtures", wrong),
			wantCode: 1,
			wantOut:  []string{"FAIL  Fixture/v100", `pod_set_updates["main"].node_selector["pool"]: want "v100", got "a100"`, "1 failed"},
		},
		{
			name:     "missing parameters fail",
			args:     []string{"--target", target},
			wantCode: 1,
			wantOut:  []string{"FAIL  Evaluate/ValidAnswer", "parameters.nodeLabels: required", "failed"},
		},
		{name: "no target", args: nil, wantCode: 2, wantErr: "--target is required"},
		{name: "bad parameters", args: []string{"--target", target, "--parameters", "[1]"}, wantCode: 2, wantErr: "--parameters must be a JSON object"},
		{name: "unknown flag", args: []string{"--nope"}, wantCode: 2, wantErr: "flag provided but not defined"},
		{name: "stray argument", args: []string{"--target", target, "fixtures.json"}, wantCode: 2, wantErr: `unexpected arguments ["fixtures.json"]`},
		{name: "malformed fixtures", args: []string{"--target", target, "--fixtures", malformed}, wantCode: 2,
			wantErr: `--fixtures: ` + malformed + `: fixtures[0] ("a100"): expect.state: "READY" is not an answer`},
		{name: "missing fixtures file", args: []string{"--target", target, "--fixtures", filepath.Join(t.TempDir(), "none.json")}, wantCode: 2, wantErr: "--fixtures: read fixtures"},
		{name: "negative soak", args: []string{"--target", target, "--keepalive-soak", "-1s"}, wantCode: 2, wantErr: "--keepalive-soak must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(t.Context(), tt.args, &stdout, &stderr)
			if code != tt.wantCode {
				t.Fatalf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.wantCode, &stdout, &stderr)
			}
			for _, w := range tt.wantOut {
				if !strings.Contains(stdout.String(), w) {
					t.Errorf("stdout does not contain %q:\n%s", w, &stdout)
				}
			}
			if tt.wantErr != "" && !strings.Contains(stderr.String(), tt.wantErr) {
				t.Errorf("stderr does not contain %q:\n%s", tt.wantErr, &stderr)
			}
			if tt.wantCode == 2 && stdout.Len() > 0 {
				t.Errorf("exit 2 after running cases:\n%s", &stdout)
			}
		})
	}
}
