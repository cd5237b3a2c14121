package sdk

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/internal/devca"
	"github.com/sluice-dev/sluice/pkg/mtls"
)

// identity is a directory holding tls.crt, tls.key and ca.crt, as devca
// and cert-manager write them.
type identity string

func (d identity) cert() string { return filepath.Join(string(d), devca.CertFile) }
func (d identity) key() string  { return filepath.Join(string(d), devca.KeyFile) }
func (d identity) ca() string   { return filepath.Join(string(d), devca.CAFile) }

// serverFiles serves with d's certificate and, when mutual, requires
// client certificates from d's CA.
func (d identity) serverFiles(mutual bool, refresh time.Duration) mtls.Files {
	f := mtls.Files{CertFile: d.cert(), KeyFile: d.key(), Refresh: refresh}
	if mutual {
		f.CAFile = d.ca()
	}
	return f
}

// clientFiles trusts d's CA and, when withCert, presents d's certificate.
func (d identity) clientFiles(withCert bool) mtls.Files {
	f := mtls.Files{CAFile: d.ca()}
	if withCert {
		f.CertFile, f.KeyFile = d.cert(), d.key()
	}
	return f
}

// admitterIdentity is the URI SAN of every test certificate.
const admitterIdentity = "spiffe://cluster.local/ns/sluice-system/sa/sluice-admitter"

func newCA(t *testing.T, name string) *devca.CA {
	t.Helper()
	ca, err := devca.New(name, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// issue writes a certificate of ca for the loopback names and the
// admitter's identity, with ca's bundle, to dir (replacing what is there)
// and returns dir.
func issue(t *testing.T, ca *devca.CA, dir string) identity {
	t.Helper()
	return issueAs(t, ca, dir, admitterIdentity)
}

// issueAs is issue for a certificate that names uris (none: no URI SAN).
func issueAs(t *testing.T, ca *devca.CA, dir string, uris ...string) identity {
	t.Helper()
	leaf, err := ca.Issue(devca.Request{
		URIs:     uris,
		DNSNames: devca.LoopbackNames,
		IPs:      devca.LoopbackIPs(),
		Life:     time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := devca.WriteIdentity(dir, leaf, ca.CertPEM); err != nil {
		t.Fatal(err)
	}
	return identity(dir)
}

// serveOn runs a Server for c on 127.0.0.1:0 until the test ends and
// returns its address.
func serveOn(t *testing.T, c Checker, opts ...Option) string {
	t.Helper()
	srv, err := NewServer(testInfo, c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return runOnLoopback(t, srv)
}

// clientCreds are f's TLS client credentials, closed when the test ends.
func clientCreds(t *testing.T, f mtls.Files) credentials.TransportCredentials {
	t.Helper()
	creds, err := f.TLSClientCredentials("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(creds.Close)
	return creds
}

// dialWith opens a connection to addr, closed when the test ends.
func dialWith(t *testing.T, addr string, creds credentials.TransportCredentials) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// evaluate makes one Evaluate call on conn, failing fast when the
// connection cannot be made.
func evaluate(ctx context.Context, conn *grpc.ClientConn) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := checksv1.NewCheckServiceClient(conn).Evaluate(ctx, request())
	return err
}

func readyChecker() *scripted {
	return &scripted{answer: func(context.Context, *checksv1.EvaluateRequest) (*checksv1.EvaluateResponse, error) {
		return Ready(), nil
	}}
}

// TestTLS serves TLS and mutual TLS and calls Evaluate with clients that
// must get through and clients that must be refused before the Checker
// sees their call.
func TestTLS(t *testing.T) {
	root := t.TempDir()
	ca := newCA(t, "provider CA")
	server := issue(t, ca, filepath.Join(root, "server"))
	client := issue(t, ca, filepath.Join(root, "client"))
	stranger := issue(t, newCA(t, "another CA"), filepath.Join(root, "stranger"))

	tests := []struct {
		name   string
		mutual bool
		client func(t *testing.T) credentials.TransportCredentials
		wantOK bool
	}{
		{name: "mutual TLS, certificate from the CA", mutual: true, wantOK: true,
			client: func(t *testing.T) credentials.TransportCredentials { return clientCreds(t, client.clientFiles(true)) }},
		{name: "mutual TLS, no certificate", mutual: true,
			client: func(t *testing.T) credentials.TransportCredentials { return clientCreds(t, client.clientFiles(false)) }},
		{name: "mutual TLS, certificate from another CA", mutual: true,
			client: func(t *testing.T) credentials.TransportCredentials {
				return clientCreds(t, mtls.Files{CAFile: client.ca(), CertFile: stranger.cert(), KeyFile: stranger.key()})
			}},
		{name: "mutual TLS, plaintext client", mutual: true,
			client: func(*testing.T) credentials.TransportCredentials { return insecure.NewCredentials() }},
		{name: "TLS, no certificate", wantOK: true,
			client: func(t *testing.T) credentials.TransportCredentials { return clientCreds(t, client.clientFiles(false)) }},
		{name: "TLS, client that trusts another CA",
			client: func(t *testing.T) credentials.TransportCredentials {
				return clientCreds(t, stranger.clientFiles(false))
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The Checker records the identities the caller's verified certificate carries.
			var peers []string
			checker := &scripted{}
			checker.answer = func(ctx context.Context, _ *checksv1.EvaluateRequest) (*checksv1.EvaluateResponse, error) {
				checker.mu.Lock()
				defer checker.mu.Unlock()
				peers, _ = mtls.PeerIdentities(ctx)
				return Ready(), nil
			}
			addr := serveOn(t, checker, WithTLS(server.serverFiles(tt.mutual, 0)))
			err := evaluate(t.Context(), dialWith(t, addr, tt.client(t)))
			checker.mu.Lock()
			defer checker.mu.Unlock()
			if tt.wantOK {
				if err != nil {
					t.Fatalf("Evaluate: %v", err)
				}
				if tt.mutual && !slices.Equal(peers, []string{admitterIdentity}) {
					t.Errorf("the Checker saw the caller as %q, want %q", peers, admitterIdentity)
				}
				return
			}
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("Evaluate = %v, want the connection refused (UNAVAILABLE)", err)
			}
			if checker.evals != 0 {
				t.Errorf("the Checker saw %d calls of a refused client", checker.evals)
			}
		})
	}
}

// TestTLSReload rotates the server's files to a new CA while it runs: a
// client of the new CA gets through once the files are read again (polled
// for, with a short refresh interval), a new connection of the old CA no
// longer does, and a connection opened before the rotation keeps working:
// TLS authenticates a connection once, when it is made.
func TestTLSReload(t *testing.T) {
	root := t.TempDir()
	oldCA, newCA := newCA(t, "old CA"), newCA(t, "new CA")
	server := issue(t, oldCA, filepath.Join(root, "server"))
	oldClient := issue(t, oldCA, filepath.Join(root, "old-client"))
	newClient := issue(t, newCA, filepath.Join(root, "new-client"))

	addr := serveOn(t, readyChecker(), WithTLS(server.serverFiles(true, 20*time.Millisecond)))
	before := dialWith(t, addr, clientCreds(t, oldClient.clientFiles(true)))
	if err := evaluate(t.Context(), before); err != nil {
		t.Fatalf("Evaluate before the rotation: %v", err)
	}

	issue(t, newCA, string(server))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	newCreds := clientCreds(t, newClient.clientFiles(true))
	for {
		// A connection of its own each time: a failed handshake is not retried at once.
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(newCreds))
		if err != nil {
			t.Fatal(err)
		}
		err = evaluate(ctx, conn)
		conn.Close()
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("a client of the new CA was still refused 10s after the rotation: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}

	after := dialWith(t, addr, clientCreds(t, oldClient.clientFiles(true)))
	if err := evaluate(t.Context(), after); status.Code(err) != codes.Unavailable {
		t.Errorf("new connection of the old CA after the rotation: Evaluate = %v, want it refused", err)
	}
	if err := evaluate(t.Context(), before); err != nil {
		t.Errorf("connection opened before the rotation: Evaluate = %v, want it to keep working", err)
	}
}

func TestNewServerRefusesBadTLSFiles(t *testing.T) {
	server := issue(t, newCA(t, "CA"), t.TempDir())
	missing := filepath.Join(t.TempDir(), "ca.crt")
	tests := []struct {
		name    string
		files   mtls.Files
		wantErr string
	}{
		{name: "key without certificate", files: mtls.Files{KeyFile: server.key()}, wantErr: "cert-file is required to serve TLS"},
		{name: "certificate without key", files: mtls.Files{CertFile: server.cert()}, wantErr: "key-file is required to serve TLS"},
		{name: "unreadable CA", files: mtls.Files{CertFile: server.cert(), KeyFile: server.key(), CAFile: missing}, wantErr: "ca-file: open " + missing},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewServer(testInfo, readyChecker(), WithTLS(tt.files))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "sdk.NewServer: TLS:") {
				t.Fatalf("NewServer error = %v, want one saying %q", err, tt.wantErr)
			}
		})
	}
}
