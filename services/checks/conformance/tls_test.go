package conformance

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluice-dev/sluice/internal/devca"
	"github.com/sluice-dev/sluice/pkg/mtls"
	"github.com/sluice-dev/sluice/services/checks/providers/nodepool"
	"github.com/sluice-dev/sluice/services/checks/sdk"
	"github.com/sluice-dev/sluice/services/checks/sdk/sdktest"
)

// testPKI is a provider's CA, with a server certificate for 127.0.0.1 and
// a client certificate it signs, and a CA that signs neither.
type testPKI struct {
	server, client, stranger string // directories of tls.crt, tls.key, ca.crt
}

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	root := t.TempDir()
	p := testPKI{server: filepath.Join(root, "server"), client: filepath.Join(root, "client"), stranger: filepath.Join(root, "stranger")}
	ca, other := testCA(t, "provider CA"), testCA(t, "another CA")
	for dir, c := range map[string]*devca.CA{p.server: ca, p.client: ca, p.stranger: other} {
		leaf, err := c.Issue(devca.Request{DNSNames: devca.LoopbackNames, IPs: devca.LoopbackIPs(), Life: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if err := devca.WriteIdentity(dir, leaf, c.CertPEM); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

func testCA(t *testing.T, name string) *devca.CA {
	t.Helper()
	ca, err := devca.New(name, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// files names dir's certificate, key and CA bundle.
func files(dir string) mtls.Files {
	return mtls.Files{
		CertFile: filepath.Join(dir, devca.CertFile),
		KeyFile:  filepath.Join(dir, devca.KeyFile),
		CAFile:   filepath.Join(dir, devca.CAFile),
	}
}

// serverTLS serves mutual TLS with the server's certificate when mutual,
// else TLS.
func (p testPKI) serverTLS(mutual bool) mtls.Files {
	f := files(p.server)
	if !mutual {
		f.CAFile = ""
	}
	return f
}

// clientTLS trusts the CA of trustDir and presents certDir's certificate
// ("": none), closed when the test ends.
func clientTLS(t *testing.T, trustDir, certDir string) credentials.TransportCredentials {
	t.Helper()
	f := mtls.Files{CAFile: files(trustDir).CAFile}
	if certDir != "" {
		f.CertFile, f.KeyFile = files(certDir).CertFile, files(certDir).KeyFile
	}
	creds, err := f.TLSClientCredentials("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(creds.Close)
	return creds
}

// startNodepoolTLS serves the nodepool provider through the SDK with
// files (no TLS when nil) and returns its address.
func startNodepoolTLS(t *testing.T, files *mtls.Files) string {
	t.Helper()
	var opts []sdk.Option
	if files != nil {
		opts = append(opts, sdk.WithTLS(*files))
	}
	return sdktest.Start(t, nodepool.Info("test"), nodepool.Checker{}, opts...)
}

func dialCredentials(t *testing.T, addr string, creds credentials.TransportCredentials) *grpc.ClientConn {
	t.Helper()
	conn, err := DialCredentials(addr, creds)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestNodepoolMutualTLS runs the kit over mutual TLS, as sluice calls a
// provider whose AdmissionCheck has spec.tls with a client certificate;
// the soak dials its own connection with the same credentials.
func TestNodepoolMutualTLS(t *testing.T) {
	p := newTestPKI(t)
	server := p.serverTLS(true)
	creds := clientTLS(t, p.server, p.client)
	conn := dialCredentials(t, startNodepoolTLS(t, &server), creds)
	Run(t, conn, Options{CheckName: "pool-a100", Parameters: nodepoolParams(t), Credentials: creds, KeepaliveSoak: time.Second})
}

// TestConnectFailures points the kit at providers it cannot talk to: the
// run is one failed Connect case that names the cause and the flag that
// fixes it.
func TestConnectFailures(t *testing.T) {
	p := newTestPKI(t)
	mutual, oneWay := p.serverTLS(true), p.serverTLS(false)
	tests := []struct {
		name       string
		server     *mtls.Files // nil: plaintext
		creds      func(t *testing.T) credentials.TransportCredentials
		wantDetail []string
	}{
		{name: "wrong CA", server: &oneWay,
			creds:      func(t *testing.T) credentials.TransportCredentials { return clientTLS(t, p.stranger, "") },
			wantDetail: []string{"certificate signed by unknown authority", "does not chain to the CA the kit trusts (--ca-file)"}},
		{name: "no client certificate for mutual TLS", server: &mutual,
			creds:      func(t *testing.T) credentials.TransportCredentials { return clientTLS(t, p.server, "") },
			wantDetail: []string{"requires mutual TLS", "--cert-file and --key-file"}},
		{name: "client certificate of another CA", server: &mutual,
			creds:      func(t *testing.T) credentials.TransportCredentials { return clientTLS(t, p.server, p.stranger) },
			wantDetail: []string{"requires mutual TLS", "--cert-file and --key-file"}},
		{name: "plaintext to TLS", server: &oneWay,
			creds:      func(*testing.T) credentials.TransportCredentials { return nil },
			wantDetail: []string{"if it serves TLS", "--ca-file"}},
		{name: "TLS to plaintext",
			creds:      func(t *testing.T) credentials.TransportCredentials { return clientTLS(t, p.server, "") },
			wantDetail: []string{"first record does not look like a TLS handshake", "the provider serves plaintext"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			creds := tt.creds(t)
			conn := dialCredentials(t, startNodepoolTLS(t, tt.server), creds)
			results := RunAll(t.Context(), conn, Options{Parameters: nodepoolParams(t), Credentials: creds})
			if len(results) != 1 || results[0].Name != "Connect" || results[0].Outcome != Failed {
				t.Fatalf("results = %+v, want one failed Connect case", results)
			}
			t.Logf("Connect: %s", results[0].Detail)
			for _, w := range tt.wantDetail {
				if !strings.Contains(results[0].Detail, w) {
					t.Errorf("Connect detail %q does not say %q", results[0].Detail, w)
				}
			}
		})
	}
}

func TestConnectNothingListening(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	results := RunAll(t.Context(), dialCredentials(t, addr, nil), Options{})
	if len(results) != 1 || results[0].Name != "Connect" || !strings.Contains(results[0].Detail, "nothing listens there") {
		t.Fatalf("results = %+v, want one failed Connect case saying nothing listens", results)
	}
}
