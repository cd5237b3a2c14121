package sdk

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"

	"github.com/go-logr/logr"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"

	"github.com/sluice-dev/sluice/pkg/mtls"
)

// This file decides how a Server secures its port and whom it serves
// there. sluice sends workloads, their pod templates and the answers that
// place them over this connection, so a Server serves plaintext only where
// no one else can reach it (a loopback address or a unix socket) unless
// told otherwise on purpose, and, given identities, serves only the
// clients whose certificates carry them.

// WithInsecurePlaintext lets Serve serve plaintext on an address that is
// not loopback. Without it, Serve refuses to: anyone who reaches the port
// could read the workloads sluice sends and forge the provider's answers.
// Use it only where the network itself is encrypted and trusted, as
// sluice's AdmissionCheck spec.insecurePlaintext says on its side. It
// cannot be combined with WithTLS or WithTransportCredentials.
func WithInsecurePlaintext() Option {
	return func(c *config) { c.insecurePlaintext = true }
}

// WithTransportCredentials serves with credentials built some other way
// than WithTLS's PEM files (a SPIFFE Workload API source, say). Serve
// counts the port as secured by them. Credentials passed in
// WithServerOptions are not seen: with those, Serve refuses an address
// that is not loopback.
func WithTransportCredentials(creds credentials.TransportCredentials) Option {
	return func(c *config) { c.ownCreds = creds }
}

// WithClientIdentities serves IdentityService, CheckService and any
// service registered on GRPCServer only to clients whose verified
// certificate names one of ids as a URI SAN, such as sluice's admitter's
// SPIFFE ID; any other client gets PERMISSION_DENIED naming the identities
// allowed and those it presented. grpc.health.v1 and reflection stay open
// to every client the TLS handshake admits. The interceptors given in
// WithServerOptions run before the check, so that metrics and logs see
// the refused calls; handlers never do. It needs client certificates:
// WithTLS with a CAFile, or WithTransportCredentials that require them.
// Without it, every client whose certificate the CA signed may call.
func WithClientIdentities(ids ...string) Option {
	return func(c *config) { c.clientIdentities = append(c.clientIdentities, ids...) }
}

// checkTransport checks that the transport options fit together.
func (c *config) checkTransport() error {
	if c.tls != nil && c.ownCreds != nil {
		return errors.New("WithTLS and WithTransportCredentials both set the server's credentials: choose one")
	}
	if c.insecurePlaintext && !c.plaintext() {
		return errors.New("WithInsecurePlaintext allows plaintext, and WithTLS or WithTransportCredentials secure the port: choose one")
	}
	if len(c.clientIdentities) == 0 {
		return nil
	}
	for _, id := range c.clientIdentities {
		if err := mtls.CheckIdentity(id); err != nil {
			return fmt.Errorf("WithClientIdentities: %w", err)
		}
	}
	if !c.identifiesClients() {
		return errors.New("WithClientIdentities tells clients apart by their certificates, so it needs mutual TLS: WithTLS with a CAFile, or WithTransportCredentials that require client certificates")
	}
	return nil
}

// authorizationOptions are the interceptors that serve only the allowed
// clients; none when every client the handshake admits may call.
func (c *config) authorizationOptions() []grpc.ServerOption {
	if len(c.clientIdentities) == 0 {
		return nil
	}
	authorize := authorizeCallers(mtls.Callers{Identities: c.clientIdentities})
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(auth.UnaryServerInterceptor(authorize)),
		grpc.ChainStreamInterceptor(auth.StreamServerInterceptor(authorize)),
	}
}

// authorizeCallers is an auth.AuthFunc that serves callers every method,
// and any client the handshake admits the open services.
func authorizeCallers(callers mtls.Callers) auth.AuthFunc {
	return func(ctx context.Context) (context.Context, error) {
		method, _ := grpc.Method(ctx)
		if isOpen(method) {
			return ctx, nil
		}
		if err := callers.Authorize(ctx, method); err != nil {
			return nil, err
		}
		return ctx, nil
	}
}

// isOpen reports whether method ("/package.Service/Method") belongs to a
// service that reveals nothing about workloads and changes nothing, which
// any client the handshake admits may call: probes and grpcurl need no
// particular identity.
func isOpen(method string) bool {
	service, _, _ := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	switch service {
	case healthpb.Health_ServiceDesc.ServiceName,
		reflectionv1.ServerReflection_ServiceDesc.ServiceName,
		reflectionv1alpha.ServerReflection_ServiceDesc.ServiceName: //nolint:staticcheck // grpcurl still asks v1alpha
		return true
	}
	return false
}

// identifiesClients reports whether callers may present certificates to
// tell them apart by: mutual TLS from files, or credentials of the
// provider's own, which may ask for client certificates.
func (c *config) identifiesClients() bool {
	return (c.tls != nil && c.tls.CAFile != "") || c.ownCreds != nil
}

// plaintext reports whether the server serves without transport security
// that the SDK can see.
func (c *config) plaintext() bool { return c.tls == nil && c.ownCreds == nil }

// checkListener applies the plaintext rule to the address Serve listens
// on: plaintext only on loopback or a unix socket, unless
// WithInsecurePlaintext. When it allows plaintext off loopback it logs a
// warning.
func (s *Server) checkListener(addr net.Addr) error {
	if !s.cfg.plaintext() || localAddr(addr) {
		return nil
	}
	if !s.cfg.insecurePlaintext {
		return fmt.Errorf("sdk: refusing to serve plaintext on %s, which is not a loopback address: serve TLS with WithTLS "+
			"(or WithTransportCredentials for credentials of your own; credentials passed in WithServerOptions are not seen), "+
			"or allow plaintext on purpose with WithInsecurePlaintext", addr)
	}
	warn(s.cfg.log, "serving plaintext on an address that is not loopback, as insecure plaintext was asked for: "+
		"anyone who reaches it can read the workloads sluice sends and forge this provider's answers", "addr", addr.String())
	return nil
}

// localAddr reports whether a listener's address can be reached only
// from this machine: a unix socket, or a TCP address on a loopback
// interface.
func localAddr(addr net.Addr) bool {
	switch addr.Network() {
	case "unix", "unixpacket":
		return true
	case "tcp", "tcp4", "tcp6":
		return mtls.LoopbackAddr(addr.String())
	}
	return false
}

// warn logs msg at slog's WARN level when log writes to slog (as Main's
// does), and as an info line otherwise.
func warn(log logr.Logger, msg string, keysAndValues ...any) {
	slog.New(logr.ToSlogHandler(log)).Warn(msg, keysAndValues...)
}
