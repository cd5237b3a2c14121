package checks

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"

	"google.golang.org/grpc/credentials"
)

// gRPC reports a connection that failed its TLS handshake to a call only as
// UNAVAILABLE with the error's text. To tell a certificate that did not
// verify from a provider that is down, the pool's TLS credentials record
// the latest TLS failure of each connection, and a failed call consults it.

// tlsFailures is the latest TLS failure of one client connection's
// transports, cleared once a transport receives data.
type tlsFailures struct {
	mu  sync.Mutex
	err error
}

func (f *tlsFailures) set(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

// last is the latest TLS failure, or nil when the latest transport works.
func (f *tlsFailures) last() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// recordingCredentials are client transport credentials that record TLS
// failures in failures: a failed handshake, and an alert the provider
// sends after it (under TLS 1.3 a server refuses a client certificate only
// once the client has finished its side of the handshake).
type recordingCredentials struct {
	credentials.TransportCredentials
	failures *tlsFailures
}

func (c recordingCredentials) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ClientHandshake(ctx, authority, raw)
	if err != nil {
		if isTLSFailure(err) {
			c.failures.set(err)
		}
		return nil, nil, err
	}
	return &recordingConn{Conn: conn, failures: c.failures}, info, nil
}

func (c recordingCredentials) Clone() credentials.TransportCredentials {
	return recordingCredentials{TransportCredentials: c.TransportCredentials.Clone(), failures: c.failures}
}

// recordingConn records how an established connection failed at the TLS
// layer, and clears the record with the first data: the provider accepted
// the handshake.
type recordingConn struct {
	net.Conn
	failures *tlsFailures
	gotData  atomic.Bool
}

func (c *recordingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && !c.gotData.Swap(true) {
		c.failures.set(nil)
	}
	c.record(err)
	return n, err
}

func (c *recordingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.record(err)
	return n, err
}

// record notes err when it is a TLS failure. A gRPC server speaks first
// once the handshake is done, so a provider that hangs up before sending
// anything refused the handshake: under TLS 1.3 that is how a server
// refuses a client certificate, and its alert often loses the race with
// the connection's reset.
func (c *recordingConn) record(err error) {
	switch {
	case err == nil:
	case isTLSFailure(err):
		c.failures.set(err)
	case !c.gotData.Load() && peerHungUp(err):
		c.failures.set(fmt.Errorf("the provider hung up as soon as the handshake ended, "+
			"as it does when it refuses the client certificate (none, or one it does not trust): %w", err))
	}
}

// peerHungUp reports whether err says the peer closed the connection.
func peerHungUp(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// isTLSFailure reports whether err is a failure of TLS itself — a
// certificate that does not verify, an alert from the peer, a peer that
// does not speak TLS — rather than of the network.
func isTLSFailure(err error) bool {
	var (
		verification     *tls.CertificateVerificationError
		unknownAuthority x509.UnknownAuthorityError
		hostname         x509.HostnameError
		invalid          x509.CertificateInvalidError
		record           tls.RecordHeaderError
		alert            tls.AlertError
		op               *net.OpError
	)
	return errors.As(err, &verification) || errors.As(err, &unknownAuthority) ||
		errors.As(err, &hostname) || errors.As(err, &invalid) ||
		errors.As(err, &record) || errors.As(err, &alert) ||
		// crypto/tls reports an alert received from the peer so.
		(errors.As(err, &op) && op.Op == "remote error")
}
