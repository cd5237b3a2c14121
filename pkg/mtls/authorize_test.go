package mtls_test

import (
	"context"
	"flag"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sluice-dev/sluice/internal/devca"
	"github.com/sluice-dev/sluice/pkg/mtls"
)

const (
	admitterID = "spiffe://cluster.local/ns/sluice-system/sa/sluice-admitter"
	grouperID  = "spiffe://cluster.local/ns/sluice-system/sa/sluice-grouper"
)

// TestCallersAuthorize calls a mutual-TLS server that authorises every
// call with Callers, over real connections, with certificates of its CA
// that name various identities.
func TestCallersAuthorize(t *testing.T) {
	ca := newTestCA(t, "CA")
	root := t.TempDir()
	server := filepath.Join(root, "server")
	writeTestIdentity(t, ca, server, devca.Request{IPs: devca.LoopbackIPs(), Life: time.Hour})
	client := func(name string, uris ...string) mtls.Files {
		dir := filepath.Join(root, name)
		writeTestIdentity(t, ca, dir, devca.Request{URIs: uris, Life: time.Hour})
		return mtls.Files{CAFile: caFile(dir), CertFile: crt(dir), KeyFile: key(dir)}
	}
	admitter, grouper := client("admitter", admitterID), client("grouper", grouperID)
	both, anonymous := client("both", grouperID, admitterID), client("anonymous")
	method := healthpb.Health_Check_FullMethodName

	tests := []struct {
		name     string
		callers  mtls.Callers
		client   mtls.Files
		want     codes.Code
		wantText string
	}{
		{name: "allowed identity", callers: mtls.Callers{Identities: []string{admitterID}}, client: admitter, want: codes.OK},
		{name: "allowed among several", callers: mtls.Callers{Identities: []string{grouperID, admitterID}}, client: admitter, want: codes.OK},
		{name: "certificate with several identities", callers: mtls.Callers{Identities: []string{admitterID}}, client: both, want: codes.OK},
		{name: "another identity", callers: mtls.Callers{Identities: []string{admitterID}}, client: grouper, want: codes.PermissionDenied,
			wantText: method + " may be called only by a client whose certificate names " + admitterID + "; the caller's certificate names " + grouperID},
		{name: "another identity, callers named", callers: mtls.Callers{Who: "the admitter", Identities: []string{admitterID}}, client: grouper,
			want: codes.PermissionDenied, wantText: "may be called only by the admitter (" + admitterID + "); the caller's certificate names " + grouperID},
		{name: "no identity", callers: mtls.Callers{Identities: []string{admitterID}}, client: anonymous, want: codes.PermissionDenied,
			wantText: "the caller's certificate names no identity (URI SAN)"},
		{name: "nobody allowed", callers: mtls.Callers{}, client: admitter, want: codes.PermissionDenied},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			serverFiles := mtls.Files{CertFile: crt(server), KeyFile: key(server), CAFile: caFile(server)}
			addr := serveAuthorized(t, serverCreds(t, serverFiles), tt.callers)
			err := checkHealth(t, addr, clientCreds(t, tt.client))
			if got := status.Code(err); got != tt.want {
				t.Fatalf("Check = %v, want code %v", err, tt.want)
			}
			if msg := status.Convert(err).Message(); !strings.Contains(msg, tt.wantText) {
				t.Errorf("message %q does not say %q", msg, tt.wantText)
			}
		})
	}
}

// TestCallersNeedACertificate: over plaintext, or TLS without a client
// certificate, the caller is Unauthenticated.
func TestCallersNeedACertificate(t *testing.T) {
	p := newTLSPKI(t)
	callers := mtls.Callers{Identities: []string{admitterID}}
	tests := []struct {
		name   string
		server credentials.TransportCredentials
		client credentials.TransportCredentials
	}{
		{name: "plaintext", server: insecure.NewCredentials(), client: insecure.NewCredentials()},
		{name: "TLS without client certificates", server: serverCreds(t, mtls.Files{CertFile: crt(p.server), KeyFile: key(p.server)}),
			client: clientCreds(t, mtls.Files{CAFile: caFile(p.client), CertFile: crt(p.client), KeyFile: key(p.client)})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkHealth(t, serveAuthorized(t, tt.server, callers), tt.client)
			if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "needs a client certificate signed by the server's CA") {
				t.Fatalf("Check = %v, want Unauthenticated asking for a client certificate", err)
			}
		})
	}
}

// serveAuthorized serves grpc.health.v1 with creds on a loopback port
// until the test ends, authorising every call with callers.
func serveAuthorized(t *testing.T, creds credentials.TransportCredentials, callers mtls.Callers) string {
	t.Helper()
	authorize := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := callers.Authorize(ctx, info.FullMethod); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
	gs := grpc.NewServer(grpc.Creds(creds), grpc.UnaryInterceptor(authorize))
	healthpb.RegisterHealthServer(gs, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return lis.Addr().String()
}

func serverCreds(t *testing.T, f mtls.Files) credentials.TransportCredentials {
	t.Helper()
	creds, err := f.TLSServerCredentials()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(creds.Close)
	return creds
}

func clientCreds(t *testing.T, f mtls.Files) credentials.TransportCredentials {
	t.Helper()
	creds, err := f.TLSClientCredentials("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(creds.Close)
	return creds
}

func TestIdentityList(t *testing.T) {
	tests := []struct {
		args    []string
		want    []string
		wantErr string
	}{
		{args: nil, want: nil},
		{args: []string{"--identity", admitterID}, want: []string{admitterID}},
		{args: []string{"--identity", admitterID, "--identity", grouperID}, want: []string{admitterID, grouperID}},
		{args: []string{"--identity", "urn:example:checks"}, want: []string{"urn:example:checks"}},
		{args: []string{"--identity", ""}, wantErr: "an identity must not be empty"},
		{args: []string{"--identity", "sluice-admitter"}, wantErr: `identity "sluice-admitter" is not an absolute URI such as ` + admitterID},
		{args: []string{"--identity", "spiffe//cluster.local/ns/sluice-system/sa/sluice-admitter"}, wantErr: "is not an absolute URI"},
		{args: []string{"--identity", "spiffe://"}, wantErr: "is not an absolute URI"},
		{args: []string{"--identity", "spiffe://cluster.local/%zz"}, wantErr: "is not a URI"},
	}
	for _, tt := range tests {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var ids mtls.IdentityList
		fs.Var(&ids, "identity", "")
		err := fs.Parse(tt.args)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Parse(%q) = %v, want an error saying %q", tt.args, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("Parse(%q): %v", tt.args, err)
			continue
		}
		if strings.Join(ids, " ") != strings.Join(tt.want, " ") {
			t.Errorf("Parse(%q) = %q, want %q", tt.args, ids, tt.want)
		}
	}
}
