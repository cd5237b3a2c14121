package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluice-dev/sluice/internal/devca"
	"github.com/sluice-dev/sluice/pkg/mtls"
	"github.com/sluice-dev/sluice/services/checks/conformance"
)

// TestServes runs the binary's run on free ports, checks /readyz and
// /metrics, passes the conformance kit, and shuts down on cancel.
func TestServes(t *testing.T) {
	svc := start(t)
	base := "http://" + svc.httpAddr
	waitOK(t, base+"/readyz")
	body := get(t, base+"/metrics")
	if !strings.Contains(body, `grpc_server_started_total{grpc_method="Evaluate",grpc_service="sluice.checks.v1.CheckService"`) {
		t.Errorf("/metrics has no gRPC server metrics for Evaluate")
	}

	conn, err := conformance.Dial(svc.grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Run("conformance", func(t *testing.T) {
		conformance.Run(t, conn, conformance.Options{CheckName: "pool", Parameters: poolParams(t)})
	})
	svc.stop(t)
}

// TestServesMutualTLS serves gRPC with --tls-* flags from a devca CA: the
// kit, dialling with a client certificate of that CA, passes; a plaintext
// client and a client without a certificate are refused; the probes stay
// plaintext HTTP.
func TestServesMutualTLS(t *testing.T) {
	ca, err := devca.New("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dirs := t.TempDir()
	if err := ca.IssueServices(dirs, mtls.DefaultTrustDomain, "sluice-system", time.Hour); err != nil {
		t.Fatal(err)
	}
	server, admitter := filepath.Join(dirs, "checks"), filepath.Join(dirs, "admitter")
	svc := start(t, "--tls-cert-file", filepath.Join(server, devca.CertFile), "--tls-key-file", filepath.Join(server, devca.KeyFile),
		"--tls-ca-file", filepath.Join(server, devca.CAFile), "--tls-refresh-interval", "1s")
	waitOK(t, "http://"+svc.httpAddr+"/readyz")

	client := mtls.Files{CAFile: filepath.Join(admitter, devca.CAFile)}
	refused := map[string]credentials.TransportCredentials{"plaintext": insecure.NewCredentials(), "no client certificate": tlsCreds(t, client)}
	client.CertFile, client.KeyFile = filepath.Join(admitter, devca.CertFile), filepath.Join(admitter, devca.KeyFile)
	creds := tlsCreds(t, client)
	conn, err := conformance.DialCredentials(svc.grpcAddr, creds)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Run("conformance", func(t *testing.T) {
		conformance.Run(t, conn, conformance.Options{CheckName: "pool", Parameters: poolParams(t), Credentials: creds})
	})
	for name, c := range refused {
		t.Run(name, func(t *testing.T) {
			results := conformance.RunAll(t.Context(), dial(t, svc.grpcAddr, c), conformance.Options{CheckName: "pool", Parameters: poolParams(t), Credentials: c})
			if len(results) != 1 || results[0].Name != "Connect" || results[0].Outcome != conformance.Failed {
				t.Errorf("results = %+v, want the connection refused", results)
			}
		})
	}
	svc.stop(t)
}

// service is run running in the background.
type service struct {
	grpcAddr, httpAddr string
	cancel             context.CancelFunc
	done               chan error
}

// start runs run with args on free loopback ports until the test ends.
func start(t *testing.T, args ...string) *service {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	svc := &service{cancel: cancel, done: make(chan error, 1)}
	t.Cleanup(cancel)
	addrs := make(chan [2]net.Addr, 1)
	go func() {
		args := append([]string{"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--log-level", "error"}, args...)
		svc.done <- run(ctx, args, io.Discard, func(g, h net.Addr) { addrs <- [2]net.Addr{g, h} })
	}()
	select {
	case a := <-addrs:
		svc.grpcAddr, svc.httpAddr = a[0].String(), a[1].String()
	case err := <-svc.done:
		t.Fatalf("run returned early: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("not listening within 10s")
	}
	return svc
}

// stop cancels run and checks that it returns nil in time.
func (s *service) stop(t *testing.T) {
	t.Helper()
	s.cancel()
	select {
	case err := <-s.done:
		if err != nil {
			t.Fatalf("run = %v after cancel, want nil", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("run did not return within 15s of cancel")
	}
}

func poolParams(t *testing.T) *structpb.Struct {
	t.Helper()
	params, err := structpb.NewStruct(map[string]any{"nodeLabels": map[string]any{"pool": "a100"}})
	if err != nil {
		t.Fatal(err)
	}
	return params
}

func tlsCreds(t *testing.T, f mtls.Files) credentials.TransportCredentials {
	t.Helper()
	creds, err := f.TLSClientCredentials("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(creds.Close)
	return creds
}

func dial(t *testing.T, addr string, creds credentials.TransportCredentials) *grpc.ClientConn {
	t.Helper()
	conn, err := conformance.DialCredentials(addr, creds)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func TestBadFlags(t *testing.T) {
	tests := []struct {
		args    []string
		wantErr string
	}{
		{args: []string{"--grpc-addr", "not an address"}, wantErr: "--grpc-addr"},
		{args: []string{"--log-level", "loud"}, wantErr: "--log-level"},
		{args: []string{"--nope"}, wantErr: "flag provided but not defined"},
		{args: []string{"--tls-key-file", "tls.key"}, wantErr: "--tls-cert-file is required to serve TLS"},
		{args: []string{"--tls-cert-file", "tls.crt", "--tls-ca-file", "ca.crt"}, wantErr: "--tls-key-file is required to serve TLS"},
		{args: []string{"--tls-cert-file", "none/tls.crt", "--tls-key-file", "none/tls.key"}, wantErr: "--tls-cert-file and --tls-key-file: open none/tls.crt"},
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
