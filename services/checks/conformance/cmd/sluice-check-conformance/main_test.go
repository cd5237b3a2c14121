package main

import (
	"bytes"
	"context"
	"net"
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

func TestRun(t *testing.T) {
	target := startNodepool(t)
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  []string
		wantErr  string
	}{
		{
			name:     "conformant",
			args:     []string{"--target", target, "--check-name", "pool", "--parameters", `{"nodeLabels": {"pool": "a100"}}`, "--timeout", "5s"},
			wantCode: 0,
			wantOut: []string{
				"PASS  Identity/GetProviderInfo", "PASS  Evaluate/Repeatable", "PASS  Release/Twice",
				"SKIP  Release/ThenNewReservation: provider does not advertise CAPABILITY_RELEASE",
				"12 passed, 0 failed, 1 skipped",
			},
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
		})
	}
}
