package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/services/checks/conformance"
	"github.com/sluice-dev/sluice/services/checks/providers/budget"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestProviderFlags(t *testing.T) {
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.yaml"), filepath.Join(dir, "bad.yaml")
	writeFile(t, good, `namespaces: {team-a: {hard: {cpu: 10}}}`)
	writeFile(t, bad, `namespaces: {team-a: {hard: {cpu: 10}, soft: {cpu: 11}}}`)
	tests := []struct {
		args    []string
		wantErr string
	}{
		{args: []string{"--provider", "quota"}, wantErr: `--provider: "quota" is not one of nodepool, budget`},
		{args: []string{"--provider", "budget"}, wantErr: "--budget-config: required with --provider=budget"},
		{args: []string{"--budget-config", good}, wantErr: "--budget-config: only with --provider=budget"},
		{args: []string{"--provider", "budget", "--budget-config", filepath.Join(dir, "none.yaml")}, wantErr: "--budget-config: open"},
		{args: []string{"--provider", "budget", "--budget-config", bad}, wantErr: `--budget-config: ` + bad + `: namespaces["team-a"].soft["cpu"]: 11 is more than hard["cpu"] 10`},
		{args: []string{"--provider", "budget", "--budget-config", good, "--budget-reload-interval", "0s"}, wantErr: "--budget-reload-interval: 0s is not positive"},
		{args: []string{"--provider", "budget", "--budget-config", good, "--budget-restart-grace", "-1s"}, wantErr: "--budget-restart-grace: -1s is negative"},
	}
	for _, tt := range tests {
		err := run(context.Background(), append(tt.args, "--http-addr", "127.0.0.1:0"), io.Discard, nil)
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("run(%v) = %v, want an error containing %q", tt.args, err, tt.wantErr)
		}
	}
}

// TestServesBudget serves --provider=budget: the kit passes, and a lower
// budget written to --budget-config is read again and revokes the newest
// admission, whose key arrives on WatchChanges.
func TestServesBudget(t *testing.T) {
	path := filepath.Join(t.TempDir(), "budgets.yaml")
	writeFile(t, path, `
namespaces:
  conformance: {hard: {cpu: 100, memory: 100Gi}, soft: {cpu: 1}, window: 1h}
  team-a: {hard: {cpu: 10}}
`)
	// No restart warm-up: the test asks about waiting workloads at once.
	svc := start(t, "--provider", "budget", "--budget-config", path, "--budget-reload-interval", "100ms", "--budget-restart-grace", "0")
	conn, err := conformance.Dial(svc.grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Run("conformance", func(t *testing.T) {
		conformance.Run(t, conn, conformance.Options{CheckName: "budget", WatchIdle: 500 * time.Millisecond})
	})

	t.Run("reload revokes", func(t *testing.T) {
		client := checksv1.NewCheckServiceClient(conn)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		info, err := checksv1.NewIdentityServiceClient(conn).GetProviderInfo(ctx, &checksv1.GetProviderInfoRequest{})
		if err != nil || info.GetName() != budget.ProviderName {
			t.Fatalf("GetProviderInfo = %v, %v; want %s", info, err, budget.ProviderName)
		}
		stream, err := client.WatchChanges(ctx, &checksv1.WatchChangesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Header(); err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"old", "new"} {
			req := &checksv1.EvaluateRequest{CheckName: "budget", EvaluationKey: key, Workload: &checksv1.Workload{
				Namespace: "team-a", Name: key, PodSets: []*checksv1.PodSet{{Name: "main", Count: 1, Requests: map[string]string{"cpu": "4"}}},
			}}
			if resp, err := client.Evaluate(ctx, req); err != nil || resp.GetState() != checksv1.State_STATE_READY {
				t.Fatalf("Evaluate(%s) = %v, %v; want READY", key, resp, err)
			}
		}
		writeFile(t, path, `namespaces: {team-a: {hard: {cpu: 5}}}`)
		msg, err := stream.Recv() // the reloader reads the file within 100ms
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(msg.GetEvaluationKeys(), []string{"new"}) {
			t.Errorf("pushed %v, want [new]", msg.GetEvaluationKeys())
		}
	})
	svc.stop(t)
}
