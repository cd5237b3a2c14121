package sdk

import (
	"context"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/pkg/mtls"
)

// otherIdentity is a caller that is not sluice's admitter.
const otherIdentity = "spiffe://cluster.local/ns/team-a/sa/curious"

// TestServePlaintextOnlyOnLoopback serves on listeners of every kind and
// calls Evaluate through them: plaintext is served on loopback and unix
// sockets, refused elsewhere (the listener closed, the error naming the
// option) unless WithInsecurePlaintext says so, and then with a warning.
func TestServePlaintextOnlyOnLoopback(t *testing.T) {
	server := issue(t, newCA(t, "CA"), t.TempDir())
	plaintext := func(*testing.T) credentials.TransportCredentials { return insecure.NewCredentials() }
	tlsClient := func(t *testing.T) credentials.TransportCredentials { return clientCreds(t, server.clientFiles(false)) }
	tests := []struct {
		name     string
		network  string
		addr     string // to listen on; for "unix", a file name in a temporary directory
		opts     []Option
		client   func(*testing.T) credentials.TransportCredentials
		wantErr  []string // Serve's error, all of these; none: it serves
		wantWarn bool
	}{
		{name: "plaintext on loopback", network: "tcp", addr: "127.0.0.1:0", client: plaintext},
		{name: "plaintext on IPv6 loopback", network: "tcp", addr: "[::1]:0", client: plaintext},
		{name: "plaintext on a unix socket", network: "unix", addr: "provider.sock", client: plaintext},
		{name: "plaintext on every interface", network: "tcp", addr: "0.0.0.0:0",
			wantErr: []string{"refusing to serve plaintext on", "not a loopback address", "WithTLS", "WithInsecurePlaintext"}},
		{name: "plaintext on every interface, on purpose", network: "tcp", addr: "0.0.0.0:0", opts: []Option{WithInsecurePlaintext()},
			client: plaintext, wantWarn: true},
		{name: "insecure plaintext on loopback", network: "tcp", addr: "127.0.0.1:0", opts: []Option{WithInsecurePlaintext()}, client: plaintext},
		{name: "TLS on every interface", network: "tcp", addr: "0.0.0.0:0", opts: []Option{WithTLS(server.serverFiles(false, 0))}, client: tlsClient},
		{name: "own credentials on every interface", network: "tcp", addr: "0.0.0.0:0",
			opts: []Option{WithTransportCredentials(ownServerCreds(t, server))}, client: tlsClient},
		{name: "credentials the SDK cannot see, on every interface", network: "tcp", addr: "0.0.0.0:0",
			opts:    []Option{WithServerOptions(grpc.Creds(ownServerCreds(t, server)))},
			wantErr: []string{"not a loopback address", "credentials passed in WithServerOptions are not seen"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lis := listen(t, tt.network, tt.addr)
			var logs syncBuffer
			log := logr.FromSlogHandler(slog.NewJSONHandler(&logs, nil))
			srv, err := NewServer(testInfo, readyChecker(), append([]Option{WithLogger(log)}, tt.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- srv.Serve(ctx, lis) }()

			if len(tt.wantErr) > 0 {
				checkServeRefused(t, done, lis, tt.wantErr)
				return
			}
			if err := evaluate(t.Context(), dialWith(t, dialAddr(lis.Addr()), tt.client(t))); err != nil {
				t.Fatalf("Evaluate over %s: %v", lis.Addr(), err)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("Serve = %v after shutdown, want nil", err)
			}
			warned := strings.Contains(logs.String(), `"level":"WARN"`) && strings.Contains(logs.String(), "not loopback")
			if warned != tt.wantWarn {
				t.Errorf("warned about plaintext off loopback: %v, want %v; log:\n%s", warned, tt.wantWarn, logs.String())
			}
		})
	}
}

// checkServeRefused waits for Serve to return an error saying all of
// want and naming the listener's address, and checks that it closed the
// listener.
func checkServeRefused(t *testing.T, done <-chan error, lis net.Listener, want []string) {
	t.Helper()
	want = append(want, lis.Addr().String())
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Serve returned nil; want it to refuse")
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("Serve error %q does not say %q", err, w)
			}
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("Serve still serving %s after 10s; want it to refuse", lis.Addr())
	}
	if conn, err := net.DialTimeout(lis.Addr().Network(), dialAddr(lis.Addr()), time.Second); err == nil {
		conn.Close()
		t.Errorf("the refused listener %s still accepts connections", lis.Addr())
	}
}

// listen opens a real listener; a unix socket goes in a temporary
// directory.
func listen(t *testing.T, network, addr string) net.Listener {
	t.Helper()
	if network == "unix" {
		addr = filepath.Join(t.TempDir(), addr)
	}
	lis, err := net.Listen(network, addr)
	if err != nil {
		t.Skipf("cannot listen on %s %s here: %v", network, addr, err)
	}
	t.Cleanup(func() { lis.Close() })
	return lis
}

// dialAddr is how a client on this machine reaches a listener: a
// listener on every interface through loopback.
func dialAddr(a net.Addr) string {
	if a.Network() == "unix" {
		return "unix://" + a.String()
	}
	host, port, _ := net.SplitHostPort(a.String())
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// ownServerCreds are TLS server credentials built without the SDK, as a
// vendor with a certificate source of its own would.
func ownServerCreds(t *testing.T, d identity) credentials.TransportCredentials {
	t.Helper()
	f := d.serverFiles(false, 0)
	creds, err := f.TLSServerCredentials()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(creds.Close)
	return creds
}

func TestNewServerRefusesTransportThatDoesNotFit(t *testing.T) {
	server := issue(t, newCA(t, "CA"), t.TempDir())
	own := ownServerCreds(t, server)
	tests := []struct {
		name    string
		opts    []Option
		wantErr string
	}{
		{name: "TLS and insecure plaintext", opts: []Option{WithTLS(server.serverFiles(true, 0)), WithInsecurePlaintext()},
			wantErr: "WithInsecurePlaintext allows plaintext, and WithTLS or WithTransportCredentials secure the port"},
		{name: "own credentials and insecure plaintext", opts: []Option{WithTransportCredentials(own), WithInsecurePlaintext()},
			wantErr: "WithInsecurePlaintext allows plaintext"},
		{name: "TLS twice", opts: []Option{WithTLS(server.serverFiles(true, 0)), WithTransportCredentials(own)},
			wantErr: "WithTLS and WithTransportCredentials both set the server's credentials"},
		{name: "client identities in plaintext", opts: []Option{WithClientIdentities(admitterIdentity)},
			wantErr: "WithClientIdentities tells clients apart by their certificates, so it needs mutual TLS"},
		{name: "client identities without a client CA", opts: []Option{WithTLS(server.serverFiles(false, 0)), WithClientIdentities(admitterIdentity)},
			wantErr: "needs mutual TLS: WithTLS with a CAFile"},
		{name: "client identity that is no URI", opts: []Option{WithTLS(server.serverFiles(true, 0)), WithClientIdentities("sluice-admitter")},
			wantErr: `WithClientIdentities: identity "sluice-admitter" is not an absolute URI`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewServer(testInfo, readyChecker(), tt.opts...)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("NewServer error = %v, want one saying %q", err, tt.wantErr)
			}
		})
	}
}

// TestClientIdentities serves mutual TLS to the admitter's identity alone
// and calls it with certificates of the same CA: the admitter is served
// every method, another identity gets PERMISSION_DENIED naming both
// identities (on a stream too) and is still served health, a client
// without a certificate is refused at the handshake. Without
// WithClientIdentities any certificate of the CA is served.
func TestClientIdentities(t *testing.T) {
	root := t.TempDir()
	ca := newCA(t, "provider CA")
	server := issue(t, ca, filepath.Join(root, "server"))
	admitter := issue(t, ca, filepath.Join(root, "admitter"))
	other := issueAs(t, ca, filepath.Join(root, "other"), otherIdentity)
	anonymous := issueAs(t, ca, filepath.Join(root, "anonymous"))

	onlyAdmitter := []Option{WithTLS(server.serverFiles(true, 0)), WithClientIdentities(admitterIdentity)}
	anyCertificate := []Option{WithTLS(server.serverFiles(true, 0))}
	tests := []struct {
		name     string
		opts     []Option
		client   mtls.Files
		call     func(context.Context, *grpc.ClientConn) error
		want     codes.Code
		wantText []string
	}{
		{name: "admitter evaluates", opts: onlyAdmitter, client: admitter.clientFiles(true), call: evaluate, want: codes.OK},
		{name: "admitter asks who the provider is", opts: onlyAdmitter, client: admitter.clientFiles(true), call: providerInfo, want: codes.OK},
		{name: "admitter watches", opts: onlyAdmitter, client: admitter.clientFiles(true), call: watchChanges, want: codes.OK},
		{name: "another identity evaluates", opts: onlyAdmitter, client: other.clientFiles(true), call: evaluate, want: codes.PermissionDenied,
			wantText: []string{"/sluice.checks.v1.CheckService/Evaluate may be called only by a client whose certificate names " + admitterIdentity,
				"the caller's certificate names " + otherIdentity}},
		{name: "another identity asks who the provider is", opts: onlyAdmitter, client: other.clientFiles(true), call: providerInfo,
			want: codes.PermissionDenied, wantText: []string{otherIdentity}},
		{name: "another identity watches", opts: onlyAdmitter, client: other.clientFiles(true), call: watchChanges,
			want: codes.PermissionDenied, wantText: []string{"WatchChanges", otherIdentity}},
		{name: "a certificate without identity", opts: onlyAdmitter, client: anonymous.clientFiles(true), call: evaluate,
			want: codes.PermissionDenied, wantText: []string{"no identity (URI SAN)"}},
		{name: "another identity checks health", opts: onlyAdmitter, client: other.clientFiles(true), call: checkHealth, want: codes.OK},
		{name: "no certificate", opts: onlyAdmitter, client: admitter.clientFiles(false), call: evaluate, want: codes.Unavailable},
		{name: "any certificate of the CA by default", opts: anyCertificate, client: other.clientFiles(true), call: evaluate, want: codes.OK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checker := readyChecker()
			srv, err := NewServer(watchInfo, checker, tt.opts...)
			if err != nil {
				t.Fatal(err)
			}
			conn := dialWith(t, runOnLoopback(t, srv), clientCreds(t, tt.client))
			err = tt.call(t.Context(), conn)
			if got := status.Code(err); got != tt.want {
				t.Fatalf("call = %v, want code %v", err, tt.want)
			}
			for _, w := range tt.wantText {
				if !strings.Contains(status.Convert(err).Message(), w) {
					t.Errorf("message %q does not say %q", status.Convert(err).Message(), w)
				}
			}
			checker.mu.Lock()
			defer checker.mu.Unlock()
			if tt.want == codes.PermissionDenied && checker.evals != 0 {
				t.Errorf("the Checker saw %d calls of a caller it does not serve", checker.evals)
			}
		})
	}
}

func providerInfo(ctx context.Context, conn *grpc.ClientConn) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := checksv1.NewIdentityServiceClient(conn).GetProviderInfo(ctx, &checksv1.GetProviderInfoRequest{})
	return err
}

// watchChanges opens a WatchChanges stream and returns how the server
// answered the open: nil once it sends the headers of an open stream
// (the SDK sends them at once), else the status it ended the stream with.
func watchChanges(ctx context.Context, conn *grpc.ClientConn) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	stream, err := checksv1.NewCheckServiceClient(conn).WatchChanges(ctx, &checksv1.WatchChangesRequest{})
	if err != nil {
		return err
	}
	md, err := stream.Header()
	if err != nil || md != nil {
		return err
	}
	_, err = stream.Recv() // no headers: the stream ended; Recv has its status
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
