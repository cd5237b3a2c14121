package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluice-dev/sluice/services/checks/conformance"
)

// TestServes runs the binary's run on free ports, checks /readyz and
// /metrics, passes the conformance kit, and shuts down on cancel.
func TestServes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrs := make(chan [2]net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--log-level", "error"}, io.Discard,
			func(g, h net.Addr) { addrs <- [2]net.Addr{g, h} })
	}()
	var grpcAddr, httpAddr net.Addr
	select {
	case a := <-addrs:
		grpcAddr, httpAddr = a[0], a[1]
	case err := <-done:
		t.Fatalf("run returned early: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("not listening within 10s")
	}

	base := "http://" + httpAddr.String()
	waitOK(t, base+"/readyz")
	body := get(t, base+"/metrics")
	if !strings.Contains(body, `grpc_server_started_total{grpc_method="Evaluate",grpc_service="sluice.checks.v1.CheckService"`) {
		t.Errorf("/metrics has no gRPC server metrics for Evaluate")
	}

	conn, err := conformance.Dial(grpcAddr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	params, err := structpb.NewStruct(map[string]any{"nodeLabels": map[string]any{"pool": "a100"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("conformance", func(t *testing.T) {
		conformance.Run(t, conn, conformance.Options{CheckName: "pool", Parameters: params})
	})

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run = %v after cancel, want nil", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("run did not return within 15s of cancel")
	}
}

func TestBadFlags(t *testing.T) {
	tests := []struct {
		args    []string
		wantErr string
	}{
		{args: []string{"--grpc-addr", "not an address"}, wantErr: "--grpc-addr"},
		{args: []string{"--log-level", "loud"}, wantErr: "--log-level"},
		{args: []string{"--nope"}, wantErr: "flag provided but not defined"},
	}
	for _, tt := range tests {
		err := run(context.Background(), append(tt.args, "--http-addr", "127.0.0.1:0"), io.Discard, nil)
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("run(%v) = %v, want an error containing %q", tt.args, err, tt.wantErr)
		}
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// waitOK polls url until it answers 200, for at most 10s.
func waitOK(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not OK within 10s (last: %v)", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
