package mtls_test

import (
	"context"
	"flag"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluice-dev/sluice/internal/devca"
	"github.com/sluice-dev/sluice/pkg/mtls"
)

// tlsPKI is two CAs and identities they issued, each in its own directory
// as tls.crt, tls.key and ca.crt (the bundle of the CA that issued it).
type tlsPKI struct {
	server      string // 127.0.0.1 and provider.example, from the first CA
	client      string // a client of the first CA
	otherClient string // a client of the second CA
	otherServer string // 127.0.0.1, from the second CA
}

func newTLSPKI(t *testing.T) tlsPKI {
	t.Helper()
	ca := newTestCA(t, "first CA")
	other := newTestCA(t, "second CA")
	root := t.TempDir()
	p := tlsPKI{
		server:      filepath.Join(root, "server"),
		client:      filepath.Join(root, "client"),
		otherClient: filepath.Join(root, "other-client"),
		otherServer: filepath.Join(root, "other-server"),
	}
	serverReq := devca.Request{DNSNames: []string{"provider.example"}, IPs: devca.LoopbackIPs(), Life: time.Hour}
	clientReq := devca.Request{URIs: []string{"spiffe://cluster.local/ns/sluice-system/sa/sluice-admitter"}, Life: time.Hour}
	writeTestIdentity(t, ca, p.server, serverReq)
	writeTestIdentity(t, ca, p.client, clientReq)
	writeTestIdentity(t, other, p.otherClient, clientReq)
	writeTestIdentity(t, other, p.otherServer, serverReq)
	return p
}

func newTestCA(t *testing.T, name string) *devca.CA {
	t.Helper()
	ca, err := devca.New(name, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func writeTestIdentity(t *testing.T, ca *devca.CA, dir string, r devca.Request) {
	t.Helper()
	leaf, err := ca.Issue(r)
	if err != nil {
		t.Fatal(err)
	}
	if err := devca.WriteIdentity(dir, leaf, ca.CertPEM); err != nil {
		t.Fatal(err)
	}
}

func crt(dir string) string    { return filepath.Join(dir, devca.CertFile) }
func key(dir string) string    { return filepath.Join(dir, devca.KeyFile) }
func caFile(dir string) string { return filepath.Join(dir, devca.CAFile) }

// parseFiles binds flags to a fresh FlagSet and parses args, so that the
// errors name the flags as a command line would.
func parseFiles(t *testing.T, bind func(*flag.FlagSet) *mtls.Files, args ...string) *mtls.Files {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	f := bind(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestValidateServer(t *testing.T) {
	p := newTLSPKI(t)
	empty := filepath.Join(t.TempDir(), "empty.pem")
	if err := os.WriteFile(empty, []byte("not PEM\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "missing.pem")
	mismatched := t.TempDir()
	copyFile(t, crt(p.server), crt(mismatched))
	copyFile(t, key(p.client), key(mismatched))
	tests := []struct {
		name    string
		args    []string
		wantErr []string // all must appear; none: valid
	}{
		{name: "TLS", args: []string{"--tls-cert-file", crt(p.server), "--tls-key-file", key(p.server)}},
		{name: "mutual TLS", args: []string{"--tls-cert-file", crt(p.server), "--tls-key-file", key(p.server), "--tls-ca-file", caFile(p.server)}},
		{name: "key without cert", args: []string{"--tls-key-file", key(p.server)},
			wantErr: []string{"--tls-cert-file is required to serve TLS"}},
		{name: "cert without key", args: []string{"--tls-cert-file", crt(p.server)},
			wantErr: []string{"--tls-key-file is required to serve TLS"}},
		{name: "CA alone", args: []string{"--tls-ca-file", caFile(p.server)},
			wantErr: []string{"--tls-cert-file is required", "--tls-key-file is required"}},
		{name: "key of another certificate", args: []string{"--tls-cert-file", crt(p.server), "--tls-key-file", key(p.client)},
			wantErr: []string{"must be in the same directory"}},
		{name: "key of another certificate in the same directory", args: []string{"--tls-cert-file", crt(mismatched), "--tls-key-file", key(mismatched)},
			wantErr: []string{"--tls-cert-file and --tls-key-file:", "private key does not match public key"}},
		{name: "unreadable cert", args: []string{"--tls-cert-file", missing, "--tls-key-file", filepath.Join(filepath.Dir(missing), "key.pem")},
			wantErr: []string{"--tls-cert-file and --tls-key-file:", "no such file"}},
		{name: "unreadable CA", args: []string{"--tls-cert-file", crt(p.server), "--tls-key-file", key(p.server), "--tls-ca-file", missing},
			wantErr: []string{"--tls-ca-file:", "no such file"}},
		{name: "CA without certificates", args: []string{"--tls-cert-file", crt(p.server), "--tls-key-file", key(p.server), "--tls-ca-file", empty},
			wantErr: []string{"--tls-ca-file " + empty + ": holds no PEM certificate"}},
		{name: "negative refresh", args: []string{"--tls-cert-file", crt(p.server), "--tls-key-file", key(p.server), "--tls-refresh-interval", "-1s"},
			wantErr: []string{"--tls-refresh-interval must not be negative"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := parseFiles(t, func(fs *flag.FlagSet) *mtls.Files {
				return mtls.BindServerFlags(fs, "the admitter's client certificates")
			}, tt.args...)
			checkErr(t, f.ValidateServer(), tt.wantErr)
		})
	}
}

func TestValidateClient(t *testing.T) {
	p := newTLSPKI(t)
	missing := filepath.Join(t.TempDir(), "missing.pem")
	tests := []struct {
		name    string
		args    []string
		wantErr []string
	}{
		{name: "TLS", args: []string{"--ca-file", caFile(p.client)}},
		{name: "mutual TLS", args: []string{"--ca-file", caFile(p.client), "--cert-file", crt(p.client), "--key-file", key(p.client)}},
		{name: "nothing", wantErr: []string{"--ca-file is required for TLS"}},
		{name: "certificate without CA", args: []string{"--cert-file", crt(p.client), "--key-file", key(p.client)},
			wantErr: []string{"--ca-file is required for TLS"}},
		{name: "cert without key", args: []string{"--ca-file", caFile(p.client), "--cert-file", crt(p.client)},
			wantErr: []string{"--cert-file and --key-file go together"}},
		{name: "key without cert", args: []string{"--ca-file", caFile(p.client), "--key-file", key(p.client)},
			wantErr: []string{"--cert-file and --key-file go together"}},
		{name: "unreadable CA", args: []string{"--ca-file", missing}, wantErr: []string{"--ca-file:", "no such file"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := parseFiles(t, func(fs *flag.FlagSet) *mtls.Files { return mtls.BindClientFlags(fs, "", "the provider") }, tt.args...)
			checkErr(t, f.ValidateClient(), tt.wantErr)
		})
	}
}

// TestExistingValidateStillMutual keeps Validate as strict as it was: the
// server-side relaxation is ValidateServer's alone.
func TestExistingValidateStillMutual(t *testing.T) {
	p := newTLSPKI(t)
	f := mtls.Files{CertFile: crt(p.server), KeyFile: key(p.server)}
	checkErr(t, f.Validate(), []string{"ca-file is required with mutual TLS"})
	if _, err := f.ServerCredentials(); err == nil {
		t.Error("ServerCredentials without a CA file succeeded; it serves mutual TLS only")
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func checkErr(t *testing.T, err error, want []string) {
	t.Helper()
	if len(want) == 0 {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("no error, want one saying %q", want)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
}

// TestTLSCredentials calls grpc.health.v1 through TLSServerCredentials and
// TLSClientCredentials in every combination that matters.
func TestTLSCredentials(t *testing.T) {
	p := newTLSPKI(t)
	tlsServer := mtls.Files{CertFile: crt(p.server), KeyFile: key(p.server)}
	mutualServer := mtls.Files{CertFile: crt(p.server), KeyFile: key(p.server), CAFile: caFile(p.server)}
	tests := []struct {
		name       string
		server     mtls.Files
		client     mtls.Files
		serverName string
		target     string // default the listener's 127.0.0.1 address
		wantOK     bool
	}{
		{name: "TLS", server: tlsServer, client: mtls.Files{CAFile: caFile(p.client)}, wantOK: true},
		{name: "TLS, client certificate not asked for", server: tlsServer,
			client: mtls.Files{CAFile: caFile(p.client), CertFile: crt(p.otherClient), KeyFile: key(p.otherClient)}, wantOK: true},
		{name: "TLS, server of another CA", server: mtls.Files{CertFile: crt(p.otherServer), KeyFile: key(p.otherServer)},
			client: mtls.Files{CAFile: caFile(p.client)}},
		{name: "mutual TLS", server: mutualServer,
			client: mtls.Files{CAFile: caFile(p.client), CertFile: crt(p.client), KeyFile: key(p.client)}, wantOK: true},
		{name: "mutual TLS, no client certificate", server: mutualServer, client: mtls.Files{CAFile: caFile(p.client)}},
		{name: "mutual TLS, client of another CA", server: mutualServer,
			client: mtls.Files{CAFile: caFile(p.client), CertFile: crt(p.otherClient), KeyFile: key(p.otherClient)}},
		{name: "server name", server: tlsServer, client: mtls.Files{CAFile: caFile(p.client)}, serverName: "provider.example", wantOK: true},
		{name: "server name the certificate lacks", server: tlsServer, client: mtls.Files{CAFile: caFile(p.client)}, serverName: "other.example"},
		{name: "host the certificate lacks", server: tlsServer, client: mtls.Files{CAFile: caFile(p.client)}, target: "passthrough:///checks.example"},
		{name: "server name for a host the certificate lacks", server: tlsServer, client: mtls.Files{CAFile: caFile(p.client)},
			target: "passthrough:///checks.example", serverName: "provider.example", wantOK: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := serveHealth(t, tt.server)
			target := addr
			var opts []grpc.DialOption
			if tt.target != "" {
				// Dial addr under another name, as DNS would resolve it.
				target = tt.target
				opts = append(opts, grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
					return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
				}))
			}
			creds, err := tt.client.TLSClientCredentials(tt.serverName)
			if err != nil {
				t.Fatal(err)
			}
			defer creds.Close()
			err = checkHealth(t, target, creds, opts...)
			if tt.wantOK && err != nil {
				t.Fatalf("health check failed: %v", err)
			}
			if !tt.wantOK {
				if err == nil {
					t.Fatal("health check succeeded; want the connection refused")
				}
				t.Logf("refused: %v", err)
			}
		})
	}
}

// serveHealth serves grpc.health.v1 with f's TLSServerCredentials on a
// loopback port until the test ends.
func serveHealth(t *testing.T, f mtls.Files) string {
	t.Helper()
	creds, err := f.TLSServerCredentials()
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.Creds(creds))
	healthpb.RegisterHealthServer(gs, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(func() {
		gs.Stop()
		creds.Close()
	})
	return lis.Addr().String()
}

func checkHealth(t *testing.T, target string, creds credentials.TransportCredentials, opts ...grpc.DialOption) error {
	t.Helper()
	conn, err := grpc.NewClient(target, append(opts, grpc.WithTransportCredentials(creds))...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}
