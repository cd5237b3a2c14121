package conformance

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
)

// keepaliveAdvice is what a provider must configure, after the contract's
// keepalive rule.
const keepaliveAdvice = "sluice pings an idle connection every 30s, with or without calls in flight, and a provider must permit that: " +
	"a grpc-go server sets keepalive.EnforcementPolicy{MinTime: 20 * time.Second, PermitWithoutStream: true} (the Go SDK does); " +
	"grpc-go's default policy answers the third early ping with GOAWAY ENHANCE_YOUR_CALM (\"too_many_pings\"), " +
	"which drops sluice's connection and fails calls in flight"

// keepaliveSoak dials the provider as sluice does, makes a call, holds the
// connection idle for Options.KeepaliveSoak and calls again. Sluice's
// connections sit idle between calls, pinging; a server that refuses the
// pings closes them, which the connection leaving READY shows.
func keepaliveSoak(ctx context.Context, s *suite) error {
	if s.opts.KeepaliveSoak <= 0 {
		return skip("the keepalive soak is off; --keepalive-soak 100s (Options.KeepaliveSoak) holds a connection idle through sluice's pings")
	}
	target, ok := targetOf(s.conn)
	if !ok {
		return skip("the soak dials a connection of its own and needs the target: pass a *grpc.ClientConn (one with a Target method)")
	}
	tap := &frameTap{}
	creds := s.opts.Credentials
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	// The soak's connection must not go idle on the client's own timer
	// (grpc-go's default is 30 minutes): only the provider may end it.
	conn, err := dial(target, s.opts.KeepaliveTime, tapCredentials{TransportCredentials: creds, tap: tap}, grpc.WithIdleTimeout(0))
	if err != nil {
		return err
	}
	defer conn.Close()
	identity := checksv1.NewIdentityServiceClient(conn)
	if err := soakCall(ctx, s, identity); err != nil {
		if s.opts.Credentials == nil {
			return fmt.Errorf("Probe before the soak failed: %w (the soak dials plaintext: for a provider that serves TLS, set Options.Credentials to the credentials conn was dialled with)", err)
		}
		return fmt.Errorf("Probe before the soak failed: %w", err)
	}
	start := time.Now()
	if state, left := holdIdle(ctx, conn, s.opts.KeepaliveSoak); left {
		return fmt.Errorf("the idle connection left READY (now %s) after %s, pinged every %s: %s. %s",
			state, time.Since(start).Round(time.Second), s.opts.KeepaliveTime, tap.summary(), keepaliveAdvice)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := soakCall(ctx, s, identity); err != nil {
		return fmt.Errorf("Probe after %s idle failed: %w; %s", s.opts.KeepaliveSoak, err, keepaliveAdvice)
	}
	return nil
}

func soakCall(ctx context.Context, s *suite, identity checksv1.IdentityServiceClient) error {
	cctx, cancel := s.call(ctx)
	defer cancel()
	_, err := identity.Probe(cctx, &checksv1.ProbeRequest{})
	return err
}

// holdIdle waits for d, or until ctx ends, while conn stays READY. It
// returns the state conn moved to when it left READY.
func holdIdle(ctx context.Context, conn *grpc.ClientConn, d time.Duration) (connectivity.State, bool) {
	if state := conn.GetState(); state != connectivity.Ready {
		return state, true
	}
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if conn.WaitForStateChange(wctx, connectivity.Ready) {
		return conn.GetState(), true
	}
	return connectivity.Ready, false
}

func targetOf(conn grpc.ClientConnInterface) (string, bool) {
	t, ok := conn.(interface{ Target() string })
	if !ok || t.Target() == "" {
		return "", false
	}
	return t.Target(), true
}

// frameTap reads the HTTP/2 frames a provider sends, to tell why the
// connection ended: grpc-go's client does not report the GOAWAY it got.
type frameTap struct {
	mu       sync.Mutex
	pending  []byte // the start of a frame not yet read whole
	pingAcks int
	goAway   *goAwayFrame
}

type goAwayFrame struct {
	code  uint32
	debug string
}

// HTTP/2 frame types and flags (RFC 9113, section 6).
const (
	frameHeaderLen = 9
	framePing      = 0x6
	frameGoAway    = 0x7
	flagAck        = 0x1
)

// tapCredentials secure a connection as the wrapped credentials do, then
// tap what it reads: the frames after TLS, or the bytes themselves in
// plaintext.
type tapCredentials struct {
	credentials.TransportCredentials
	tap *frameTap
}

func (c tapCredentials) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ClientHandshake(ctx, authority, raw)
	if err != nil {
		return nil, nil, err
	}
	return &tappedConn{Conn: conn, tap: c.tap}, info, nil
}

func (c tapCredentials) Clone() credentials.TransportCredentials {
	return tapCredentials{TransportCredentials: c.TransportCredentials.Clone(), tap: c.tap}
}

type tappedConn struct {
	net.Conn
	tap *frameTap
}

func (c *tappedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.tap.observe(p[:n])
	}
	return n, err
}

// observe takes the next bytes the server sent and notes every whole
// PING acknowledgement and GOAWAY among them.
func (t *frameTap) observe(p []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pending = append(t.pending, p...)
	for len(t.pending) >= frameHeaderLen {
		length := int(t.pending[0])<<16 | int(t.pending[1])<<8 | int(t.pending[2])
		if len(t.pending) < frameHeaderLen+length {
			return
		}
		kind, flags, payload := t.pending[3], t.pending[4], t.pending[frameHeaderLen:frameHeaderLen+length]
		switch {
		case kind == framePing && flags&flagAck != 0:
			t.pingAcks++
		case kind == frameGoAway && len(payload) >= 8:
			t.goAway = &goAwayFrame{code: binary.BigEndian.Uint32(payload[4:8]), debug: string(payload[8:min(len(payload), 8+200)])}
		}
		t.pending = t.pending[frameHeaderLen+length:]
	}
}

// summary says what the server did, for a failure message.
func (t *frameTap) summary() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.goAway == nil {
		return fmt.Sprintf("the provider answered %d pings, then the connection ended without a GOAWAY", t.pingAcks)
	}
	s := fmt.Sprintf("the provider answered %d pings, then sent GOAWAY %s %q", t.pingAcks, http2.ErrCode(t.goAway.code), t.goAway.debug)
	if t.goAway.code == 0 {
		s += " (NO_ERROR comes from a server's maximum connection idle time or age rather than from refused pings)"
	}
	return s
}
