package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/services/checks/conformance"
	"github.com/sluice-dev/sluice/services/checks/providers/approval"
)

// unreachableKubeconfig writes a kubeconfig for an API server nothing
// listens on.
func unreachableKubeconfig(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	const kc = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestApprovalFlags(t *testing.T) {
	tests := []struct {
		args    []string
		wantErr string
	}{
		{args: []string{"--provider", "approval", "--kubeconfig", filepath.Join(t.TempDir(), "none")}, wantErr: "--provider=approval: kube client flags:"},
		{args: []string{"--provider", "approval", "--kubeconfig", unreachableKubeconfig(t), "--kube-api-qps", "0"}, wantErr: "kube API QPS 0 is not valid"},
		{args: []string{"--provider", "quota"}, wantErr: "nodepool, budget, approval"},
	}
	for _, tt := range tests {
		err := run(context.Background(), append(tt.args, "--http-addr", "127.0.0.1:0"), io.Discard, nil)
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("run(%v) = %v, want an error containing %q", tt.args, err, tt.wantErr)
		}
	}
}

// TestServesApproval serves --provider=approval with an API server that
// cannot be reached: it identifies itself, and is not ready (Probe) nor
// answers (FAILED_PRECONDITION) while its Workload cache has not synced.
func TestServesApproval(t *testing.T) {
	svc := start(t, "--provider", "approval", "--kubeconfig", unreachableKubeconfig(t))
	conn, err := conformance.Dial(svc.grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := t.Context()
	info, err := checksv1.NewIdentityServiceClient(conn).GetProviderInfo(ctx, &checksv1.GetProviderInfoRequest{})
	if err != nil || info.GetName() != approval.ProviderName {
		t.Fatalf("GetProviderInfo = %v, %v; want %s", info, err, approval.ProviderName)
	}
	probe, err := checksv1.NewIdentityServiceClient(conn).Probe(ctx, &checksv1.ProbeRequest{})
	if err != nil || probe.GetReady() {
		t.Errorf("Probe = %v, %v; want not ready", probe, err)
	}
	_, err = checksv1.NewCheckServiceClient(conn).Evaluate(ctx, &checksv1.EvaluateRequest{
		CheckName:     "approval",
		EvaluationKey: "k",
		Workload:      &checksv1.Workload{Namespace: "team-a", Name: "train-1", PodSets: []*checksv1.PodSet{{Name: "main", Count: 1}}},
	})
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("Evaluate = %v, want FAILED_PRECONDITION", err)
	}
	svc.stop(t)
}
