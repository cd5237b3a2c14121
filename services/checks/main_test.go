package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
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
	dirs := issueServices(t)
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

// TestServesOnlyTheAdmitter serves mutual TLS and calls it with
// certificates of one CA, each naming its service's identity, as in
// deploy/: the admitter is served, any other identity gets
// PERMISSION_DENIED naming the identities allowed and the one presented,
// yet is served health; --admitter-identity changes whom it serves.
func TestServesOnlyTheAdmitter(t *testing.T) {
	dirs := issueServices(t)
	grouperID := mtls.ServiceIdentity(mtls.DefaultTrustDomain, "sluice-system", "sluice-grouper")
	tests := []struct {
		name       string
		args       []string // besides the flags of mutual TLS
		client     string   // whose certificate the client presents
		call       func(context.Context, *grpc.ClientConn) error
		want       codes.Code
		wantText   []string
		wantMetric string // a line of /metrics after the call
	}{
		{name: "the admitter evaluates", client: "admitter", call: evaluate, want: codes.OK},
		{name: "the grouper evaluates", client: "grouper", call: evaluate, want: codes.PermissionDenied,
			wantText: []string{"/sluice.checks.v1.CheckService/Evaluate may be called only by a client whose certificate names " + defaultAdmitterIdentity +
				"; the caller's certificate names " + grouperID},
			wantMetric: `grpc_server_handled_total{grpc_code="PermissionDenied",grpc_method="Evaluate",grpc_service="sluice.checks.v1.CheckService",grpc_type="unary"} 1`},
		{name: "the grouper releases", client: "grouper", call: release, want: codes.PermissionDenied, wantText: []string{"Release", grouperID}},
		{name: "the grouper asks who the provider is", client: "grouper", call: providerInfo, want: codes.PermissionDenied, wantText: []string{grouperID}},
		{name: "the grouper checks health", client: "grouper", call: checkHealth, want: codes.OK},
		{name: "the grouper, allowed", args: []string{"--admitter-identity", grouperID}, client: "grouper", call: evaluate, want: codes.OK},
		{name: "the admitter, when another is allowed", args: []string{"--admitter-identity", grouperID}, client: "admitter", call: evaluate,
			want: codes.PermissionDenied, wantText: []string{"names " + grouperID + "; the caller's certificate names " + defaultAdmitterIdentity}},
		{name: "the admitter, among two allowed", args: []string{"--admitter-identity", grouperID, "--admitter-identity", defaultAdmitterIdentity},
			client: "admitter", call: evaluate, want: codes.OK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			server := filepath.Join(dirs, "checks")
			svc := start(t, append([]string{"--tls-cert-file", filepath.Join(server, devca.CertFile), "--tls-key-file", filepath.Join(server, devca.KeyFile),
				"--tls-ca-file", filepath.Join(server, devca.CAFile)}, tt.args...)...)
			client := filepath.Join(dirs, tt.client)
			creds := tlsCreds(t, mtls.Files{CAFile: filepath.Join(client, devca.CAFile),
				CertFile: filepath.Join(client, devca.CertFile), KeyFile: filepath.Join(client, devca.KeyFile)})
			err := tt.call(t.Context(), dial(t, svc.grpcAddr, creds))
			if got := status.Code(err); got != tt.want {
				t.Fatalf("call as %s = %v, want code %v", tt.client, err, tt.want)
			}
			for _, w := range tt.wantText {
				if !strings.Contains(status.Convert(err).Message(), w) {
					t.Errorf("message %q does not say %q", status.Convert(err).Message(), w)
				}
			}
			if metrics := get(t, "http://"+svc.httpAddr+"/metrics"); !strings.Contains(metrics, tt.wantMetric) {
				t.Errorf("/metrics has no line %s", tt.wantMetric)
			}
			svc.stop(t)
		})
	}
}

func evaluate(ctx context.Context, conn *grpc.ClientConn) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	params, err := structpb.NewStruct(map[string]any{"nodeLabels": map[string]any{"pool": "a100"}})
	if err != nil {
		return err
	}
	_, err = checksv1.NewCheckServiceClient(conn).Evaluate(ctx, &checksv1.EvaluateRequest{
		CheckName: "pool", Parameters: params, EvaluationKey: "uid-1/res-1",
		Workload: &checksv1.Workload{Namespace: "team-a", Name: "w", PodSets: []*checksv1.PodSet{{Name: "main", Count: 1}}},
	})
	return err
}

func release(ctx context.Context, conn *grpc.ClientConn) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := checksv1.NewCheckServiceClient(conn).Release(ctx, &checksv1.ReleaseRequest{EvaluationKey: "uid-1/res-1"})
	return err
}

func providerInfo(ctx context.Context, conn *grpc.ClientConn) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := checksv1.NewIdentityServiceClient(conn).GetProviderInfo(ctx, &checksv1.GetProviderInfoRequest{})
	return err
}

func checkHealth(ctx context.Context, conn *grpc.ClientConn) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err == nil && resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return status.Errorf(codes.Unavailable, "health: %s", resp.GetStatus())
	}
	return err
}

// issueServices issues each sluice service a certificate of a new CA
// naming its identity in sluice-system, as deploy/ and make run do, into
// dir/<service>, and returns dir.
func issueServices(t *testing.T) string {
	t.Helper()
	ca, err := devca.New("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := ca.IssueServices(dir, mtls.DefaultTrustDomain, "sluice-system", time.Hour); err != nil {
		t.Fatal(err)
	}
	return dir
}

// syncBuffer is a bytes.Buffer safe for the service's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// service is run running in the background.
type service struct {
	grpcAddr, httpAddr string
	cancel             context.CancelFunc
	done               chan error
	log                syncBuffer // its JSON log, from warnings up unless args say otherwise
}

// start runs run with args on free loopback ports until the test ends;
// args may replace the address flags.
func start(t *testing.T, args ...string) *service {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	svc := &service{cancel: cancel, done: make(chan error, 1)}
	t.Cleanup(cancel)
	addrs := make(chan [2]net.Addr, 1)
	go func() {
		args := append([]string{"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--log-level", "warn"}, args...)
		svc.done <- run(ctx, args, &svc.log, func(g, h net.Addr) { addrs <- [2]net.Addr{g, h} })
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

// TestBadFlags runs run with flags it must refuse before serving. Its
// context ends after a few seconds, so a service that serves anyway fails
// the test (nil) instead of hanging it.
func TestBadFlags(t *testing.T) {
	server := filepath.Join(issueServices(t), "checks")
	serverTLS := []string{"--tls-cert-file", filepath.Join(server, devca.CertFile), "--tls-key-file", filepath.Join(server, devca.KeyFile)}
	mutualTLS := append([]string{"--tls-ca-file", filepath.Join(server, devca.CAFile)}, serverTLS...)
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
		{args: []string{"--grpc-addr", "0.0.0.0:0"},
			wantErr: "--grpc-addr 0.0.0.0:0 is not a loopback address, and the checks service serves it without TLS only on loopback: " +
				"set --tls-cert-file, --tls-key-file and --tls-ca-file, or --insecure-plaintext to serve plaintext on purpose"},
		{args: []string{"--grpc-addr", ":0"}, wantErr: "--grpc-addr :0 is not a loopback address"},
		{args: append([]string{"--grpc-addr", "0.0.0.0:0", "--insecure-plaintext"}, mutualTLS...),
			wantErr: "--insecure-plaintext allows plaintext, and the --tls-* flags serve TLS: choose one"},
		{args: []string{"--admitter-identity", defaultAdmitterIdentity}, wantErr: "--admitter-identity needs mutual TLS"},
		{args: append([]string{"--admitter-identity", defaultAdmitterIdentity}, serverTLS...), wantErr: "--admitter-identity needs mutual TLS: --tls-ca-file"},
		{args: append([]string{"--admitter-identity", "sluice-admitter"}, mutualTLS...),
			wantErr: `invalid value "sluice-admitter" for flag -admitter-identity: identity "sluice-admitter" is not an absolute URI`},
	}
	for _, tt := range tests {
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		err := run(ctx, append(tt.args, "--http-addr", "127.0.0.1:0"), io.Discard, nil)
		cancel()
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("run(%v) = %v, want an error containing %q", tt.args, err, tt.wantErr)
		}
	}
}

// TestServesInsecurePlaintext serves plaintext on every interface with
// --insecure-plaintext: the kit passes through loopback, and the log
// warns.
func TestServesInsecurePlaintext(t *testing.T) {
	svc := start(t, "--grpc-addr", "0.0.0.0:0", "--insecure-plaintext")
	_, port, err := net.SplitHostPort(svc.grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := conformance.Dial(net.JoinHostPort("127.0.0.1", port))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Run("conformance", func(t *testing.T) {
		conformance.Run(t, conn, conformance.Options{CheckName: "pool", Parameters: poolParams(t)})
	})
	svc.stop(t)
	if want := `"level":"WARN","msg":"serving plaintext on an address that is not loopback`; !strings.Contains(svc.log.String(), want) {
		t.Errorf("log does not contain %s:\n%s", want, svc.log.String())
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
