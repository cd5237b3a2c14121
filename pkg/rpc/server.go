package rpc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime/debug"
	"time"

	"github.com/go-logr/logr"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc/filters"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
)

// Keepalive contract between sluice servers and clients. Servers reject
// (GOAWAY "too_many_pings") clients that ping more often than
// MinClientPingInterval; clients ping every clientPingInterval, safely above it.
const (
	// MinClientPingInterval is the shortest keepalive ping interval a server
	// accepts from a client, with or without active streams.
	MinClientPingInterval = 20 * time.Second
	clientPingInterval    = 30 * time.Second
	clientPingTimeout     = 10 * time.Second
	// Servers ping idle connections so that a half-open connection behind a
	// dead peer is noticed and its streams are released.
	serverPingInterval = 60 * time.Second
	serverPingTimeout  = 20 * time.Second

	defaultShutdownTimeout = 10 * time.Second
)

// MaxMessageBytes is the largest message a sluice server receives (grpc's
// default, set here so that clients can check against it): a client that
// would send more gets a clear refusal of its own rather than a
// ResourceExhausted it cannot tell from a passing overload.
const MaxMessageBytes = 4 << 20

// Server is a gRPC server with sluice's interceptors and its health service.
// Register services on it (it embeds *grpc.Server) before calling Run.
type Server struct {
	*grpc.Server
	// Health reports per-service serving status to clients and to kubelet's
	// gRPC probes. The empty service name ("") stands for the whole server
	// and starts SERVING.
	Health *health.Server
	// ShutdownTimeout bounds how long Run waits for in-flight calls and
	// streams after its context is done before closing them.
	ShutdownTimeout time.Duration
}

// NewServer returns a gRPC server that traces calls with OpenTelemetry
// (health checks excluded), logs each finished call through log, turns a
// handler panic into codes.Internal with the stack in the log, and registers
// the health and reflection services. opts are appended after sluice's own.
//
// Keepalive enforcement: clients may ping no more often than every 20s
// (MinClientPingInterval), also while they have no active stream; Dial's
// clients stay within that.
func NewServer(log logr.Logger, opts ...grpc.ServerOption) *Server {
	logOpts := loggingOptions(serverCodeToLevel)
	recoverOpt := recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
		log.Error(fmt.Errorf("panic: %v", p), "recovered from panic in gRPC handler",
			"stack", string(debug.Stack()))
		return status.Error(codes.Internal, "internal server error")
	})
	base := []grpc.ServerOption{
		grpc.StatsHandler(otelgrpc.NewServerHandler(
			otelgrpc.WithFilter(filters.Not(filters.HealthCheck())),
		)),
		// Logging wraps recovery so a recovered panic is logged as Internal.
		grpc.ChainUnaryInterceptor(
			logging.UnaryServerInterceptor(logrAdapter(log), logOpts...),
			recovery.UnaryServerInterceptor(recoverOpt),
		),
		grpc.ChainStreamInterceptor(
			logging.StreamServerInterceptor(logrAdapter(log), logOpts...),
			recovery.StreamServerInterceptor(recoverOpt),
		),
		grpc.MaxRecvMsgSize(MaxMessageBytes),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             MinClientPingInterval,
			PermitWithoutStream: true,
		}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time:    serverPingInterval,
			Timeout: serverPingTimeout,
		}),
	}
	gs := grpc.NewServer(append(base, opts...)...)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)
	return &Server{Server: gs, Health: hs, ShutdownTimeout: defaultShutdownTimeout}
}

// Run serves on lis until ctx is done, then reports NOT_SERVING on every
// health status, stops accepting calls and waits up to ShutdownTimeout for
// in-flight ones before closing the rest. It returns nil after a shutdown
// caused by ctx, and the serving error otherwise.
func (s *Server) Run(ctx context.Context, lis net.Listener) error {
	addr := lis.Addr().String()
	served := make(chan error, 1)
	go func() { served <- s.Server.Serve(lis) }()

	select {
	case err := <-served:
		return fmt.Errorf("serve gRPC on %s: %w", addr, err)
	case <-ctx.Done():
	}

	s.Health.Shutdown()
	stopped := make(chan struct{})
	go func() {
		s.Server.GracefulStop()
		close(stopped)
	}()
	timer := time.NewTimer(s.ShutdownTimeout)
	defer timer.Stop()
	select {
	case <-stopped:
	case <-timer.C:
		s.Server.Stop()
		<-stopped
	}
	if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("serve gRPC on %s: %w", addr, err)
	}
	return nil
}
