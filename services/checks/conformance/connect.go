package conformance

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
)

// connectCase names the result of a run that could not connect.
const connectCase = "Connect"

// connect waits, for at most the call timeout, until conn is ready. A
// provider the kit cannot reach (down, or refusing the kit's TLS) would
// fail every case for one reason; connect names it once, with what to do.
// Connections it cannot watch (not a *grpc.ClientConn) pass.
func (s *suite) connect(ctx context.Context) error {
	cc, ok := s.conn.(*grpc.ClientConn)
	if !ok {
		return nil
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	cc.Connect()
	for state := cc.GetState(); state != connectivity.Ready; state = cc.GetState() {
		if state == connectivity.TransientFailure || state == connectivity.Shutdown || !cc.WaitForStateChange(cctx, state) {
			return s.connectError(ctx, cc)
		}
	}
	return nil
}

// connectError asks grpc-go why conn is not ready: a call fails with the
// last connection error.
func (s *suite) connectError(ctx context.Context, cc *grpc.ClientConn) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err := s.identity.GetProviderInfo(cctx, &checksv1.GetProviderInfoRequest{})
	if err == nil {
		return nil // connected meanwhile
	}
	return fmt.Errorf("cannot connect to the provider at %s: %w%s", cc.Target(), err, connectHint(err.Error(), s.opts.Credentials != nil))
}

// connectHints say what a connection error means for the kit's flags
// (and Options), first match wins. The errors are crypto/tls's and
// grpc-go's texts.
var connectHints = []struct {
	substrings []string
	when       transport
	hint       string
}{
	{substrings: []string{"certificate signed by unknown authority"}, when: overTLS,
		hint: "the provider's certificate does not chain to the CA the kit trusts (--ca-file)"},
	{substrings: []string{"certificate is valid for", "certificate is not valid for any names", "doesn't contain any IP SANs"}, when: overTLS,
		hint: "the provider's certificate does not name the host the kit dials; --server-name sets the name to expect (the AdmissionCheck's spec.tls.serverName)"},
	{substrings: []string{"first record does not look like a TLS handshake"}, when: overTLS,
		hint: "the provider serves plaintext: run the kit without --ca-file, --cert-file and --key-file (sluice then needs spec.insecurePlaintext unless the endpoint is loopback)"},
	{substrings: []string{"bad certificate", "certificate required", "unknown certificate authority", "broken pipe", "connection reset"}, when: overTLS,
		hint: "the provider ended the TLS handshake: if it requires mutual TLS, give the kit a client certificate its client CA signs (--cert-file and --key-file; the AdmissionCheck's spec.tls.clientCertificateSecretRef)"},
	{substrings: []string{"connection refused"},
		hint: "nothing listens there: is the provider running, on --target's address?"},
	{substrings: []string{"server preface", "connection reset", "EOF"}, when: inPlaintext,
		hint: "the provider closed the plaintext connection: if it serves TLS, give the kit the CA that signs its certificate (--ca-file)"},
}

// transport is when a hint applies.
type transport int

const (
	eitherWay transport = iota
	overTLS
	inPlaintext
)

// connectHint is the hint for a connection error, as "; hint", or "".
func connectHint(msg string, withTLS bool) string {
	current := inPlaintext
	if withTLS {
		current = overTLS
	}
	for _, h := range connectHints {
		if h.when != eitherWay && h.when != current {
			continue
		}
		for _, sub := range h.substrings {
			if strings.Contains(msg, sub) {
				return "; " + h.hint
			}
		}
	}
	return ""
}
