package sdk

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc/filters"
	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/pkg/checkvalidate"
	"github.com/sluice-dev/sluice/pkg/mtls"
)

// Checker is a provider's decision logic.
type Checker interface {
	// Evaluate answers for one quota reservation of one workload. It must
	// give the same answer to the same request (or a more final one):
	// sluice repeats calls. Return a status error (status.Error) to choose
	// the gRPC code; codes.InvalidArgument for bad parameters.
	Evaluate(ctx context.Context, req *checksv1.EvaluateRequest) (*checksv1.EvaluateResponse, error)
	// Release frees whatever was held for req.EvaluationKey. Releasing an
	// unknown key must succeed.
	Release(ctx context.Context, req *checksv1.ReleaseRequest) error
}

// Prober is implemented by Checkers that need time before they can
// evaluate (a cache to fill, a backend to reach). Without it Probe always
// answers ready.
type Prober interface {
	// Probe returns ready=false with a message while starting up, and an
	// error when the provider is unhealthy.
	Probe(ctx context.Context) (ready bool, message string, err error)
}

// Info is what the provider says of itself in GetProviderInfo.
type Info struct {
	// Name is a DNS subdomain under a domain the vendor controls, such as
	// "budget.checks.example.com".
	Name string
	// VendorVersion is the provider's own version, free-form.
	VendorVersion string
	// Capabilities the provider has. Answers with pod set updates are
	// refused unless it lists checksv1.Capability_CAPABILITY_POD_SET_UPDATES.
	Capabilities []checksv1.Capability
	// ContractRevision is the revision of sluice.checks.v1 the provider is
	// written against, sent as GetProviderInfoResponse.contract_revision.
	// Zero declares CONTRACT_REVISION_2: the Server refuses every request
	// that breaks a request rule of revision 2 before the Checker sees it,
	// so a Checker keeps revision 2 as long as it keys what it holds by the
	// whole evaluation key (Evaluate/TwoChecksOneProvider checks that).
	// Declare CONTRACT_REVISION_3 once the Checker keeps the rule of
	// EvaluateRequest.admitted (a Checker that holds nothing keeps it);
	// sluice sends admitted only to providers that declare it.
	ContractRevision checksv1.ContractRevision
}

// defaultContractRevision is what a Server declares for an Info without a
// ContractRevision: the latest revision whose rules the Server keeps for
// any Checker.
const defaultContractRevision = checksv1.ContractRevision_CONTRACT_REVISION_2

// healthServices are the service names whose grpc.health.v1 status Serve
// reports, besides "" for the whole server.
func healthServices() []string {
	return []string{
		checksv1.IdentityService_ServiceDesc.ServiceName,
		checksv1.CheckService_ServiceDesc.ServiceName,
	}
}

// Keepalive: sluice pings idle connections every 30s; permit anything from
// 20s up, without active calls too. grpc-go's default (5m) would close
// sluice's connections with ENHANCE_YOUR_CALM.
const (
	minClientPingInterval = 20 * time.Second
	serverPingInterval    = 60 * time.Second
	serverPingTimeout     = 20 * time.Second
	defaultShutdown       = 10 * time.Second
)

type config struct {
	log                logr.Logger
	serverOpts         []grpc.ServerOption
	shutdownTimeout    time.Duration
	skipResponseChecks bool
	tls                *mtls.Files
	ownCreds           credentials.TransportCredentials // WithTransportCredentials
	insecurePlaintext  bool
	clientIdentities   []string
	changeBuffer       int
}

// Option configures NewServer.
type Option func(*config)

// newConfig applies opts to the defaults.
func newConfig(opts []Option) config {
	cfg := config{log: logr.Discard(), shutdownTimeout: defaultShutdown, changeBuffer: defaultChangeBuffer}
	for _, o := range opts {
		o(&cfg)
	}
	return cfg
}

// WithLogger logs failed calls and recovered panics to log (default: none).
func WithLogger(log logr.Logger) Option {
	return func(c *config) { c.log = log }
}

// WithServerOptions adds grpc.ServerOptions (interceptors, limits) to the
// server Serve runs. They come after the SDK's own, so a later keepalive
// policy replaces the SDK's. Give credentials with WithTLS or
// WithTransportCredentials rather than grpc.Creds here: Serve does not see
// these, and serves a port it thinks plaintext only on loopback.
func WithServerOptions(opts ...grpc.ServerOption) Option {
	return func(c *config) { c.serverOpts = append(c.serverOpts, opts...) }
}

// WithTLS serves TLS from PEM files that are read again every
// files.Refresh (default a minute), so a rotated certificate applies to
// new connections without a restart; connections already open keep the
// certificate they were made with. CertFile and KeyFile are the server's
// certificate and key (in one directory, as a kubernetes.io/tls Secret
// volume holds them); with CAFile the server also requires mutual TLS:
// every client must present a certificate that chains to it, as sluice's
// admitter does when the AdmissionCheck sets
// spec.tls.clientCertificateSecretRef. NewServer checks the files and
// fails, naming each bad one, when they do not load; Serve stops reading
// them when it returns.
func WithTLS(files mtls.Files) Option {
	return func(c *config) { c.tls = &files }
}

// WithShutdownTimeout bounds how long Serve waits for calls in flight
// after its context ends (default 10s).
func WithShutdownTimeout(d time.Duration) Option {
	return func(c *config) { c.shutdownTimeout = d }
}

// WithoutResponseValidation sends the Checker's answers as they are. It
// exists for test doubles that must send invalid answers on purpose; a
// real provider should never use it.
func WithoutResponseValidation() Option {
	return func(c *config) { c.skipResponseChecks = true }
}

// Server serves one Checker over sluice.checks.v1.
type Server struct {
	info    *checksv1.GetProviderInfoResponse
	checker Checker
	cfg     config

	grpc    *grpc.Server
	health  *health.Server
	creds   *mtls.Credentials // nil when plaintext
	changes *changeHub        // the open WatchChanges streams

	serveOnce sync.Once
}

// NewServer validates info and returns a Server for checker. Call Serve to
// run it on its own gRPC server, or Register to add its services to a gRPC
// server of your own.
func NewServer(info Info, checker Checker, opts ...Option) (*Server, error) {
	if checker == nil {
		return nil, errors.New("sdk.NewServer: checker is nil")
	}
	cfg := newConfig(opts)
	if cfg.changeBuffer <= 0 {
		return nil, fmt.Errorf("sdk.NewServer: WithChangeBuffer(%d): must be positive", cfg.changeBuffer)
	}
	if err := cfg.checkTransport(); err != nil {
		return nil, fmt.Errorf("sdk.NewServer: %w", err)
	}
	pi := &checksv1.GetProviderInfoResponse{
		Name:             info.Name,
		VendorVersion:    info.VendorVersion,
		ContractVersions: []string{checkvalidate.ContractVersion},
		Capabilities:     append([]checksv1.Capability(nil), info.Capabilities...),
		ContractRevision: info.ContractRevision,
	}
	if pi.ContractRevision == checksv1.ContractRevision_CONTRACT_REVISION_UNSPECIFIED {
		pi.ContractRevision = defaultContractRevision
	}
	if err := checkvalidate.ProviderInfo(pi); err != nil {
		return nil, fmt.Errorf("sdk.NewServer: invalid Info: %w", err)
	}
	s := &Server{info: pi, checker: checker, cfg: cfg, changes: newChangeHub(cfg.changeBuffer)}
	setter, wantsNotifier := checker.(NotifierSetter)
	if wantsNotifier && !s.watchesChanges() {
		// Its changes would go nowhere: sluice opens no stream without it.
		return nil, errors.New("sdk.NewServer: the Checker implements sdk.NotifierSetter, so it changes answers on its own, but Info does not declare CAPABILITY_WATCH_CHANGES")
	}
	if cfg.tls != nil {
		creds, err := cfg.tls.TLSServerCredentials()
		if err != nil {
			return nil, fmt.Errorf("sdk.NewServer: TLS: %w", err)
		}
		s.creds = creds
	}

	base := []grpc.ServerOption{
		grpc.StatsHandler(otelgrpc.NewServerHandler(
			otelgrpc.WithPropagators(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})),
			otelgrpc.WithFilter(filters.Not(filters.HealthCheck())),
		)),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             minClientPingInterval,
			PermitWithoutStream: true,
		}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: serverPingInterval, Timeout: serverPingTimeout}),
	}
	switch {
	case s.creds != nil:
		base = append(base, grpc.Creds(s.creds))
	case cfg.ownCreds != nil:
		base = append(base, grpc.Creds(cfg.ownCreds))
	}
	// Authorization is the innermost interceptor: the provider's own
	// (metrics, logs) see the calls it refuses, its handlers never do.
	s.grpc = grpc.NewServer(slices.Concat(base, cfg.serverOpts, cfg.authorizationOptions())...)
	s.health = health.NewServer()
	healthpb.RegisterHealthServer(s.grpc, s.health)
	reflection.Register(s.grpc)
	s.Register(s.grpc)
	for _, name := range healthServices() {
		s.health.SetServingStatus(name, healthpb.HealthCheckResponse_SERVING)
	}
	if wantsNotifier {
		setter.SetNotifier(s)
	}
	return s, nil
}

// Register adds IdentityService and CheckService to a gRPC server you
// run yourself. Health, reflection, keepalive policy and tracing are then
// yours to set up, and so are its transport security and whom it serves
// (WithTLS, WithInsecurePlaintext and WithClientIdentities apply to Serve's
// server only); Serve does all of it. Call CloseWatchStreams before you
// stop that server gracefully.
func (s *Server) Register(r grpc.ServiceRegistrar) {
	checksv1.RegisterIdentityServiceServer(r, identityService{s: s})
	checksv1.RegisterCheckServiceServer(r, checkService{s: s})
}

// GRPCServer is the server Serve runs, for registering more services
// before Serve.
func (s *Server) GRPCServer() *grpc.Server { return s.grpc }

// Health is the health service Serve runs; every service starts SERVING.
func (s *Server) Health() *health.Server { return s.health }

// transport says how the server secures connections, for the log:
// "plaintext", "TLS" or "mutual TLS", or "own credentials" for
// WithTransportCredentials. Credentials given with WithServerOptions are
// not seen.
func (s *Server) transport() string {
	switch {
	case s.cfg.ownCreds != nil:
		return "own credentials"
	case s.cfg.tls == nil:
		return "plaintext"
	case s.cfg.tls.CAFile != "":
		return "mutual TLS"
	default:
		return "TLS"
	}
}

// Serve serves on lis until ctx ends, then reports NOT_SERVING, ends the
// open WatchChanges streams (UNAVAILABLE: the callers reconnect to another
// replica or once it is back), waits for calls in flight (at most the
// shutdown timeout) and returns nil. A Server serves once.
//
// A Server without TLS serves only a listener on a loopback address or a
// unix socket: on any other, Serve closes lis and returns an error, unless
// the Server was built WithInsecurePlaintext.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	err := errors.New("sdk: Server.Serve called twice")
	s.serveOnce.Do(func() {
		if err = s.checkListener(lis.Addr()); err != nil {
			lis.Close()
		} else {
			err = s.serve(ctx, lis)
		}
		if s.creds != nil {
			s.creds.Close()
		}
	})
	return err
}

func (s *Server) serve(ctx context.Context, lis net.Listener) error {
	addr := lis.Addr().String()
	served := make(chan error, 1)
	go func() { served <- s.grpc.Serve(lis) }()
	select {
	case err := <-served:
		return fmt.Errorf("serve sluice.checks.v1 on %s: %w", addr, err)
	case <-ctx.Done():
	}
	s.health.Shutdown()
	// Streams last until the caller ends them; GracefulStop would wait for
	// them until the timeout.
	s.CloseWatchStreams()
	stopped := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(stopped)
	}()
	timer := time.NewTimer(s.cfg.shutdownTimeout)
	defer timer.Stop()
	select {
	case <-stopped:
	case <-timer.C:
		s.grpc.Stop()
		<-stopped
	}
	if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("serve sluice.checks.v1 on %s: %w", addr, err)
	}
	return nil
}

type identityService struct {
	checksv1.UnimplementedIdentityServiceServer
	s *Server
}

func (i identityService) GetProviderInfo(context.Context, *checksv1.GetProviderInfoRequest) (*checksv1.GetProviderInfoResponse, error) {
	return i.s.info, nil
}

func (i identityService) Probe(ctx context.Context, _ *checksv1.ProbeRequest) (resp *checksv1.ProbeResponse, err error) {
	p, ok := i.s.checker.(Prober)
	if !ok {
		return &checksv1.ProbeResponse{Ready: true}, nil
	}
	defer i.s.recoverPanic("Probe", &err)
	ready, msg, err := p.Probe(ctx)
	if err != nil {
		return nil, i.s.callError("Probe", err)
	}
	return &checksv1.ProbeResponse{Ready: ready, Message: msg}, nil
}

type checkService struct {
	checksv1.UnimplementedCheckServiceServer
	s *Server
}

func (c checkService) Evaluate(ctx context.Context, req *checksv1.EvaluateRequest) (resp *checksv1.EvaluateResponse, err error) {
	if err := checkvalidate.EvaluateRequest(req); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "invalid Evaluate request: %v", err)
	}
	defer c.s.recoverPanic("Evaluate", &err)
	resp, err = c.s.checker.Evaluate(ctx, req)
	if err != nil {
		return nil, c.s.callError("Evaluate", err)
	}
	if c.s.cfg.skipResponseChecks {
		return resp, nil
	}
	if err := checkvalidate.EvaluateResponse(req, resp, c.s.info.GetCapabilities()); err != nil {
		c.s.cfg.log.Error(err, "provider answered Evaluate with an invalid response; sending INTERNAL instead",
			"evaluationKey", req.GetEvaluationKey(), "namespace", req.GetWorkload().GetNamespace(), "workload", req.GetWorkload().GetName())
		return nil, status.Errorf(codes.Internal, "provider %s built an invalid Evaluate response: %v", c.s.info.GetName(), err)
	}
	return resp, nil
}

func (c checkService) Release(ctx context.Context, req *checksv1.ReleaseRequest) (resp *checksv1.ReleaseResponse, err error) {
	if err := checkvalidate.ReleaseRequest(req); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "invalid Release request: %v", err)
	}
	defer c.s.recoverPanic("Release", &err)
	if err := c.s.checker.Release(ctx, req); err != nil {
		return nil, c.s.callError("Release", err)
	}
	return &checksv1.ReleaseResponse{}, nil
}

// recoverPanic turns a panic in provider code into codes.Internal, with
// the stack in the log.
func (s *Server) recoverPanic(method string, err *error) {
	if p := recover(); p != nil {
		s.cfg.log.Error(fmt.Errorf("panic: %v", p), "provider panicked", "method", method, "stack", string(debug.Stack()))
		*err = status.Errorf(codes.Internal, "provider %s panicked in %s: %v", s.info.GetName(), method, p)
	}
}

// callError gives a provider's error its gRPC code: status errors keep
// theirs, context errors become DEADLINE_EXCEEDED or CANCELED, anything
// else UNKNOWN (which sluice retries).
func (s *Server) callError(method string, err error) error {
	if st, ok := status.FromError(err); ok {
		s.cfg.log.V(1).Info("call failed", "method", method, "code", st.Code().String(), "message", st.Message())
		return err
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return status.FromContextError(err).Err()
	}
	s.cfg.log.Error(err, "call failed", "method", method)
	return status.Errorf(codes.Unknown, "%s: %v", method, err)
}
