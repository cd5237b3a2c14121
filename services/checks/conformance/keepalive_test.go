package conformance

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
)

// frame is one HTTP/2 frame as a server sends it.
func frame(kind, flags byte, stream uint32, payload []byte) []byte {
	b := []byte{byte(len(payload) >> 16), byte(len(payload) >> 8), byte(len(payload)), kind, flags}
	b = binary.BigEndian.AppendUint32(b, stream)
	return append(b, payload...)
}

func goAwayPayload(code uint32, debug string) []byte {
	b := binary.BigEndian.AppendUint32(nil, 1) // last stream id
	b = binary.BigEndian.AppendUint32(b, code)
	return append(b, debug...)
}

func TestFrameTap(t *testing.T) {
	var wire []byte
	wire = append(wire, frame(0x4, 0, 0, make([]byte, 18))...)            // SETTINGS
	wire = append(wire, frame(framePing, flagAck, 0, make([]byte, 8))...) // ack of the kit's ping
	wire = append(wire, frame(0x0, 0, 1, make([]byte, 300))...)           // DATA
	wire = append(wire, frame(framePing, 0, 0, make([]byte, 8))...)       // the server's own ping
	wire = append(wire, frame(framePing, flagAck, 0, make([]byte, 8))...) // another ack
	wire = append(wire, frame(frameGoAway, 0, 0, goAwayPayload(0xb, "too_many_pings"))...)
	tests := []struct {
		name  string
		chunk int
	}{{"whole", len(wire)}, {"byte by byte", 1}, {"in sevens", 7}, {"across headers", 10}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tap := &frameTap{}
			for i := 0; i < len(wire); i += tt.chunk {
				tap.observe(wire[i:min(i+tt.chunk, len(wire))])
			}
			want := `the provider answered 2 pings, then sent GOAWAY ENHANCE_YOUR_CALM "too_many_pings"`
			if got := tap.summary(); got != want {
				t.Errorf("summary = %q, want %q", got, want)
			}
		})
	}
	quiet := &frameTap{}
	quiet.observe(frame(framePing, flagAck, 0, make([]byte, 8)))
	if got := quiet.summary(); !strings.Contains(got, "answered 1 pings, then the connection ended without a GOAWAY") {
		t.Errorf("summary without GOAWAY = %q", got)
	}
	closed := &frameTap{}
	closed.observe(frame(frameGoAway, 0, 0, goAwayPayload(0, "max_age")))
	if got := closed.summary(); !strings.Contains(got, `GOAWAY NO_ERROR "max_age" (NO_ERROR comes from`) {
		t.Errorf("summary of a NO_ERROR GOAWAY = %q", got)
	}
}

// TestKeepaliveSoak holds idle connections to a provider with grpc-go's
// default enforcement, which must fail, and to one that permits the
// pings, which must pass. The kit pings every 10s (grpc-go's least), so
// the default policy's GOAWAY comes with the third idle ping, after ~30s
// (the client's flow-control ping after the call uses up the server's
// pardon for the first ping after data).
func TestKeepaliveSoak(t *testing.T) {
	tests := []struct {
		name       string
		d          defects
		mutualTLS  bool
		soak       time.Duration
		want       Outcome
		wantDetail []string
	}{
		{name: "grpc-go's default enforcement", d: defects{defaultKeepalive: true}, soak: 45 * time.Second, want: Failed,
			wantDetail: []string{"the idle connection left READY", `GOAWAY ENHANCE_YOUR_CALM "too_many_pings"`, "PermitWithoutStream: true"}},
		{name: "pings permitted, over mutual TLS", mutualTLS: true, soak: 25 * time.Second, want: Passed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			opts := Options{KeepaliveSoak: tt.soak, KeepaliveTime: 10 * time.Second}
			var conn *grpc.ClientConn
			if tt.mutualTLS {
				conn, opts.Credentials = startRawMutualTLS(t, tt.d)
			} else {
				conn = startRaw(t, tt.d)
			}
			r := soakResult(t, RunAll(t.Context(), conn, opts))
			if r.Outcome != tt.want {
				t.Fatalf("Keepalive/Soak = %s %q, want %s", r.Outcome, r.Detail, tt.want)
			}
			for _, w := range tt.wantDetail {
				if !strings.Contains(r.Detail, w) {
					t.Errorf("detail %q does not contain %q", r.Detail, w)
				}
			}
			if tt.want == Passed && r.Elapsed < tt.soak {
				t.Errorf("passed after %s, before the %s soak ended", r.Elapsed, tt.soak)
			}
		})
	}
}

// startRawMutualTLS serves a rawProvider with d's defects over mutual TLS
// and returns a connection of a client with a certificate of its CA, and
// the client's credentials.
func startRawMutualTLS(t *testing.T, d defects) (*grpc.ClientConn, credentials.TransportCredentials) {
	t.Helper()
	p := newTestPKI(t)
	server := p.serverTLS(true)
	serverCreds, err := server.TLSServerCredentials()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(serverCreds.Close)
	opts, register := rawServer(d)
	creds := clientTLS(t, p.server, p.client)
	return dialCredentials(t, listenGRPC(t, append(opts, grpc.Creds(serverCreds)), register), creds), creds
}

// TestTapCredentials checks that the soak's tap reads the provider's
// frames in plaintext and, after decryption, over mutual TLS: a server
// that stops gracefully sends GOAWAY NO_ERROR, which the tap must name.
func TestTapCredentials(t *testing.T) {
	for _, mutualTLS := range []bool{false, true} {
		t.Run(fmt.Sprintf("mutualTLS=%v", mutualTLS), func(t *testing.T) {
			opts, register := rawServer(defects{})
			creds := insecure.NewCredentials()
			if mutualTLS {
				p := newTestPKI(t)
				server := p.serverTLS(true)
				serverCreds, err := server.TLSServerCredentials()
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(serverCreds.Close)
				opts = append(opts, grpc.Creds(serverCreds))
				creds = clientTLS(t, p.server, p.client)
			}
			gs := grpc.NewServer(opts...)
			register(gs)
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go func() { _ = gs.Serve(lis) }()
			defer gs.Stop()

			tap := &frameTap{}
			conn := dialCredentials(t, lis.Addr().String(), tapCredentials{TransportCredentials: creds, tap: tap})
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			if _, err := checksv1.NewIdentityServiceClient(conn).Probe(ctx, &checksv1.ProbeRequest{}); err != nil {
				t.Fatal(err)
			}
			gs.GracefulStop()
			if state, left := holdIdle(ctx, conn, 10*time.Second); !left {
				t.Fatalf("connection still %s after the server stopped", state)
			}
			if got := tap.summary(); !strings.Contains(got, "sent GOAWAY NO_ERROR") {
				t.Errorf("tap summary = %q, want the server's GOAWAY NO_ERROR", got)
			}
		})
	}
}

func soakResult(t *testing.T, results []Result) Result {
	t.Helper()
	for _, r := range results {
		if r.Name == "Keepalive/Soak" {
			return r
		}
	}
	t.Fatal("no Keepalive/Soak result")
	return Result{}
}

// targetless hides the connection's Target method.
type targetless struct{ grpc.ClientConnInterface }

func TestKeepaliveSoakNeedsTarget(t *testing.T) {
	conn := startRaw(t, defects{})
	r := soakResult(t, RunAll(t.Context(), targetless{conn}, Options{KeepaliveSoak: time.Second}))
	if r.Outcome != Skipped || !strings.Contains(r.Detail, "needs the target") {
		t.Errorf("Keepalive/Soak = %s %q, want skipped for want of a target", r.Outcome, r.Detail)
	}
}

// TestKeepaliveSoakCanceled checks that an hour's soak ends with the run
// (whether the cancel finds it calling or holding the connection).
func TestKeepaliveSoakCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	conn := startRaw(t, defects{})
	var r Result
	for r = range Results(ctx, conn, Options{KeepaliveSoak: time.Hour}) {
		if r.Name == "WatchChanges/PushedKeys" { // the soak comes next
			time.AfterFunc(200*time.Millisecond, cancel)
		}
	}
	if r.Name != "Keepalive/Soak" || r.Outcome != Failed || !strings.Contains(r.Detail, "context canceled") || r.Elapsed > time.Minute {
		t.Errorf("last result = %+v, want Keepalive/Soak failed at once with context canceled", r)
	}
}
