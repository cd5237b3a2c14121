// Package app wires the admitter together — the controller-runtime manager
// with its caches and leader election, the control loop, the decision
// stream, the AdmitterService gRPC server and the probe and metrics server —
// and runs it. The admitter binary calls Run; tests call it in-process.
package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/kube"
	"github.com/sluice-dev/sluice/pkg/mtls"
	"github.com/sluice-dev/sluice/pkg/rpc"
	"github.com/sluice-dev/sluice/pkg/serve"
	"github.com/sluice-dev/sluice/services/admitter/internal/authz"
	"github.com/sluice-dev/sluice/services/admitter/internal/checks"
	"github.com/sluice-dev/sluice/services/admitter/internal/controller"
	"github.com/sluice-dev/sluice/services/admitter/internal/lifecycle"
	"github.com/sluice-dev/sluice/services/admitter/internal/metrics"
	"github.com/sluice-dev/sluice/services/admitter/internal/preemption"
	"github.com/sluice-dev/sluice/services/admitter/internal/releases"
	"github.com/sluice-dev/sluice/services/admitter/internal/scheduler"
	"github.com/sluice-dev/sluice/services/admitter/internal/server"
	"github.com/sluice-dev/sluice/services/admitter/internal/startup"
	"github.com/sluice-dev/sluice/services/admitter/internal/stream"
	"github.com/sluice-dev/sluice/services/admitter/internal/workload"
)

// Defaults of the admitter's settings.
const (
	DefaultGRPCAddr  = "127.0.0.1:9090"
	DefaultHTTPAddr  = ":8083"
	DefaultLeaseName = "sluice-admitter"
	DefaultNamespace = "sluice-system"
	// ServiceName is the gRPC health service that is SERVING only on the
	// leader.
	ServiceName = server.ServiceName
	// DefaultPodGroupReplacementWindow is the replacement window of pod
	// groups that hold quota, unless set (see lifecycle.Writer.NoPods).
	DefaultPodGroupReplacementWindow = lifecycle.DefaultReplacementWindow
	// DefaultReleaseWait is how long a deleted Workload waits for
	// providers that fail its Releases, unless set.
	DefaultReleaseWait = releases.DefaultWait
	// DefaultFairSharingPreemptionStrategies is the fair-sharing
	// preemption strategy list unless set.
	DefaultFairSharingPreemptionStrategies = string(preemption.LessThanOrEqualToFinalShare) + "," + string(preemption.LessThanInitialShare)
)

// Config is everything the admitter needs to run.
type Config struct {
	// REST reaches the API server; its QPS and Burst bound the admitter's
	// writes.
	REST *rest.Config

	// GRPCListener, if set, serves AdmitterService; otherwise GRPCAddr is
	// listened on.
	GRPCListener net.Listener
	GRPCAddr     string
	// TLS, when enabled, serves AdmitterService with mutual TLS from these
	// files, read again while running. Without it the admitter serves
	// plaintext, and only on a loopback address.
	TLS *mtls.Files
	// Groupers are the certificate identities (URI SANs) allowed to call
	// the grouper's methods; see authz.Methods.
	Groupers []string
	// HTTPListener, if set, serves /healthz, /readyz and /metrics;
	// otherwise HTTPAddr is listened on, and nothing when it is empty.
	HTTPListener net.Listener
	HTTPAddr     string
	// Pprof serves Go's profiles under /debug/pprof/ with the probes.
	Pprof bool

	// Namespace is the namespace sluice runs in, the only one whose
	// Secrets the admitter reads (those AdmissionChecks' spec.tls names);
	// empty means DefaultNamespace.
	Namespace string

	// LeaderElect runs only while holding the Lease LeaseNamespace/LeaseName.
	LeaderElect    bool
	LeaseNamespace string
	LeaseName      string

	// Registry collects the metrics; nil means controller-runtime's global
	// registry (which also holds the Go and process collectors).
	Registry prometheus.Registerer
	// Gatherer serves /metrics; nil means controller-runtime's registry.
	Gatherer prometheus.Gatherer

	// ProbeInterval is how often admission-check providers are probed.
	ProbeInterval time.Duration
	// StatusInterval is the least time between two status writes of one
	// ClusterQueue or LocalQueue.
	StatusInterval time.Duration
	// EventInterval is how often per-queue summary events are emitted.
	EventInterval time.Duration
	// WriteConcurrency bounds the concurrent writes of one cycle.
	WriteConcurrency int
	// CheckWorkers is how many workloads' checks are evaluated at once.
	CheckWorkers int
	// ReleaseWorkers is how many Release calls are in flight at once.
	ReleaseWorkers int

	// WaitForPodsReady is the start-up deadline of ClusterQueues without
	// their own spec.waitForPodsReady; a zero Timeout sets none.
	WaitForPodsReady WaitForPodsReady

	// PodGroupReplacementWindow is the replacement window of ClusterQueues
	// without their own spec.podGroupReplacementWindow: how long a pod
	// group that holds quota may be without pods before its Workload is
	// deleted and the quota given back. Nil means
	// DefaultPodGroupReplacementWindow; zero gives the quota back at once.
	PodGroupReplacementWindow *time.Duration

	// ReleaseWait is how long a deleted Workload waits, from its
	// deletionTimestamp, for providers that fail its Releases before they
	// are handed over to their AdmissionChecks' status.owedReleases and the
	// Workload goes. Nil means DefaultReleaseWait.
	ReleaseWait *time.Duration

	// FairSharing turns fair sharing between the queues of a cohort on.
	// It is the admitter's setting, not a ClusterQueue's: the admitter
	// alone orders admission and chooses victims, and every replica must
	// agree on how.
	FairSharing FairSharing

	// Ready, if set, is called once the admitter leads and serves.
	Ready func()

	// WrapClient and WrapCache, if set, wrap the client the control loop
	// writes with and the cache it watches; tests use them to inject
	// faults and to hold back events.
	WrapClient func(client.Client) client.Client
	WrapCache  func(cache.Cache) cache.Cache
}

// WaitForPodsReady is the cluster default of the start-up deadline.
type WaitForPodsReady struct {
	// Timeout after the admission by which every pod must have started;
	// zero turns the default off.
	Timeout time.Duration
	// Condition is PodsReady (the default when empty) or PodsScheduled.
	Condition string
	// BackoffBase (default 60s) and BackoffMax (default 1h) shape the
	// requeue wait: min(base * 2^(n-1), max) before the n-th requeue.
	BackoffBase, BackoffMax time.Duration
	// BackoffLimitCount, when set, is how many requeues are allowed
	// before the workload is deactivated.
	BackoffLimitCount *int32
}

// Validate refuses settings that cannot be applied, naming the flag and
// the rule.
func (w WaitForPodsReady) Validate() error {
	_, err := w.policy()
	return err
}

// policy is w as the admitter's deadline rules take it, defaults filled
// in, or an error naming the flag and the rule.
func (w WaitForPodsReady) policy() (startup.Policy, error) {
	p := startup.Policy{
		Timeout: w.Timeout, Condition: v1alpha1.PodsStartedCondition(w.Condition),
		BackoffBase: w.BackoffBase, BackoffMax: w.BackoffMax,
	}
	if p.Condition == "" {
		p.Condition = v1alpha1.PodsReady
	}
	if p.BackoffBase == 0 {
		p.BackoffBase = startup.DefaultBackoffBase
	}
	if p.BackoffMax == 0 {
		p.BackoffMax = max(startup.DefaultBackoffMax, p.BackoffBase)
	}
	p.LimitCount = w.BackoffLimitCount
	if err := p.Validate(); err != nil {
		return startup.Policy{}, fmt.Errorf("admitter config: %w", err)
	}
	return p, nil
}

// FairSharing is the admitter's fair-sharing setting.
type FairSharing struct {
	// Enabled turns fair sharing on (--fair-sharing).
	Enabled bool
	// PreemptionStrategies are the rules of preemption by share, in order
	// (--fair-sharing-preemption-strategies): exactly
	// LessThanOrEqualToFinalShare, LessThanInitialShare, or the two in
	// that order. Nil means DefaultFairSharingPreemptionStrategies.
	PreemptionStrategies []string
}

// Validate refuses a setting that cannot be applied, naming the flag and
// the rule. The strategies are checked even with fair sharing off, so
// that a mistyped list does not wait to fail until it is turned on.
func (f FairSharing) Validate() error {
	_, err := f.setting()
	return err
}

// setting is f as the scheduler takes it, or an error naming the flag and
// the rule.
func (f FairSharing) setting() (scheduler.FairSharing, error) {
	list := DefaultFairSharingPreemptionStrategies
	if f.PreemptionStrategies != nil {
		list = strings.Join(f.PreemptionStrategies, ",")
	}
	strategies, err := preemption.ParseStrategies(list)
	if err != nil {
		return scheduler.FairSharing{}, fmt.Errorf("admitter config: --fair-sharing-preemption-strategies %w", err)
	}
	return scheduler.FairSharing{Enabled: f.Enabled, PreemptionStrategies: strategies}, nil
}

// replacementWindow is cfg's PodGroupReplacementWindow, the default
// filled in, or an error naming the flag and the rule.
func (cfg Config) replacementWindow() (time.Duration, error) {
	if cfg.PodGroupReplacementWindow == nil {
		return DefaultPodGroupReplacementWindow, nil
	}
	if w := *cfg.PodGroupReplacementWindow; w < 0 {
		return 0, fmt.Errorf("admitter config: --pod-group-replacement-window %s: must not be negative", w)
	}
	return *cfg.PodGroupReplacementWindow, nil
}

// ValidateReplacementWindow refuses a replacement window that cannot be
// applied, naming the flag and the rule.
func (cfg Config) ValidateReplacementWindow() error {
	_, err := cfg.replacementWindow()
	return err
}

// releaseWait is cfg's ReleaseWait, the default filled in, or an error
// naming the flag and the rule.
func (cfg Config) releaseWait() (time.Duration, error) {
	if cfg.ReleaseWait == nil {
		return DefaultReleaseWait, nil
	}
	if w := *cfg.ReleaseWait; w < 0 {
		return 0, fmt.Errorf("admitter config: --release-wait %s: must not be negative", w)
	}
	return *cfg.ReleaseWait, nil
}

// ValidateReleaseWait refuses a release wait that cannot be applied,
// naming the flag and the rule.
func (cfg Config) ValidateReleaseWait() error {
	_, err := cfg.releaseWait()
	return err
}

// serverSecurity returns the gRPC server's transport credentials and
// authorization, and what stops the credentials' file watching.
func serverSecurity(log logr.Logger, cfg Config) ([]grpc.ServerOption, func(), error) {
	policy := &authz.Policy{Groupers: cfg.Groupers}
	authOpts := []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(auth.UnaryServerInterceptor(policy.Authorize)),
		grpc.ChainStreamInterceptor(auth.StreamServerInterceptor(policy.Authorize)),
	}
	if cfg.TLS.Enabled() {
		creds, err := cfg.TLS.ServerCredentials()
		if err != nil {
			return nil, nil, fmt.Errorf("admitter gRPC: %w", err)
		}
		return append(authOpts, grpc.Creds(creds)), creds.Close, nil
	}
	addr := cfg.GRPCAddr
	if cfg.GRPCListener != nil {
		addr = cfg.GRPCListener.Addr().String()
	}
	if !mtls.LoopbackAddr(addr) {
		return nil, nil, fmt.Errorf("--grpc-addr %s is not a loopback address, and the admitter serves it without TLS only on loopback: "+
			"set --tls-cert-file, --tls-key-file and --tls-ca-file", addr)
	}
	log.Info("serving gRPC in plaintext on loopback: callers are not authenticated", "grpcAddr", addr)
	policy.Plaintext = true
	return authOpts, func() {}, nil
}

// shrinkWorkloads is the Workload informer's transform: managed fields
// stripped like every object's, and finished workloads shrunk.
func shrinkWorkloads(obj any) (any, error) {
	obj, err := cache.TransformStripManagedFields()(obj)
	if err != nil {
		return nil, err
	}
	return workload.Shrink(obj)
}

// Scheme returns the scheme of the admitter's clients: client-go's kinds
// and sluice.dev/v1alpha1.
func Scheme() (*runtime.Scheme, error) { return kube.Scheme() }

// Run runs the admitter until ctx ends (nil then) or something fails,
// such as the loss of the leader Lease.
func Run(ctx context.Context, log logr.Logger, cfg Config) error {
	if cfg.REST == nil {
		return errors.New("admitter config: REST is required")
	}
	if cfg.LeaderElect && cfg.LeaseNamespace == "" {
		return errors.New("admitter config: a lease namespace is required with leader election")
	}
	if cfg.LeaseName == "" {
		cfg.LeaseName = DefaultLeaseName
	}
	if cfg.Namespace == "" {
		cfg.Namespace = DefaultNamespace
	}
	startDefault, err := cfg.WaitForPodsReady.policy()
	if err != nil {
		return err
	}
	window, err := cfg.replacementWindow()
	if err != nil {
		return err
	}
	releaseWait, err := cfg.releaseWait()
	if err != nil {
		return err
	}
	fairSharing, err := cfg.FairSharing.setting()
	if err != nil {
		return err
	}
	reg := cfg.Registry
	if reg == nil {
		reg = ctrlmetrics.Registry
	}
	gatherer := cfg.Gatherer
	if gatherer == nil {
		gatherer = ctrlmetrics.Registry
	}
	scheme, err := Scheme()
	if err != nil {
		return err
	}
	m, err := metrics.New(reg)
	if err != nil {
		return err
	}

	mgr, err := ctrl.NewManager(cfg.REST, ctrl.Options{
		Scheme:                        scheme,
		Logger:                        log,
		Metrics:                       metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:        "0",
		LeaderElection:                cfg.LeaderElect,
		LeaderElectionID:              cfg.LeaseName,
		LeaderElectionNamespace:       cfg.LeaseNamespace,
		LeaderElectionResourceLock:    "leases",
		LeaderElectionReleaseOnCancel: true,
		Cache: cache.Options{
			DefaultTransform: cache.TransformStripManagedFields(),
			ByObject: map[client.Object]cache.ByObject{
				&v1alpha1.Workload{}: {Transform: shrinkWorkloads},
				&corev1.Secret{}:     providerSecrets(cfg.Namespace),
			},
		},
	})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}

	grpcOpts, closeCreds, err := serverSecurity(log, cfg)
	if err != nil {
		return err
	}
	defer closeCreds()
	grpcSrv := rpc.NewServer(log.WithName("grpc"), grpcOpts...)
	grpcSrv.Health.SetServingStatus(ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)

	broadcaster := stream.New(stream.Options{
		OnSend: func(a admitterv1.Decision_Action) { m.DecisionsStreamed.WithLabelValues(a.String()).Inc() },
		OnRing: func(changes int) { m.DecisionRing.Set(float64(changes)) },
	})
	pool := checks.NewPool(log.WithName("checks"), m, checks.WithSecrets(mgr.GetCache(), cfg.Namespace))
	defer pool.Close()

	admClient, admCache := client.WithFieldOwner(mgr.GetClient(), controller.FieldOwner), mgr.GetCache()
	if cfg.WrapClient != nil {
		admClient = cfg.WrapClient(admClient)
	}
	if cfg.WrapCache != nil {
		admCache = cfg.WrapCache(admCache)
	}
	adm := controller.New(controller.Config{
		Client:            admClient,
		APIReader:         mgr.GetAPIReader(),
		Cache:             admCache,
		Recorder:          mgr.GetEventRecorder(controller.FieldOwner),
		Stream:            broadcaster,
		Checks:            pool,
		Metrics:           m,
		Log:               log.WithName("controller"),
		WriteConcurrency:  cfg.WriteConcurrency,
		CheckWorkers:      cfg.CheckWorkers,
		ReleaseWorkers:    cfg.ReleaseWorkers,
		ReleaseWait:       releaseWait,
		StatusInterval:    cfg.StatusInterval,
		ProbeInterval:     cfg.ProbeInterval,
		EventInterval:     cfg.EventInterval,
		StartDefault:      startDefault,
		ReplacementWindow: window,
		FairSharing:       fairSharing,
		OnLeading: func() {
			grpcSrv.Health.SetServingStatus(ServiceName, healthpb.HealthCheckResponse_SERVING)
			if cfg.Ready != nil {
				cfg.Ready()
			}
		},
	})
	if err := adm.Watch(ctx); err != nil {
		return err
	}
	if err := mgr.Add(adm); err != nil {
		return fmt.Errorf("add admitter to manager: %w", err)
	}
	admitterv1.RegisterAdmitterServiceServer(grpcSrv, server.New(adm, broadcaster, m, log.WithName("server")))

	grpcLis := cfg.GRPCListener
	if grpcLis == nil {
		addr := cfg.GRPCAddr
		if addr == "" {
			addr = DefaultGRPCAddr
		}
		if grpcLis, err = net.Listen("tcp", addr); err != nil {
			return fmt.Errorf("listen on --grpc-addr %s: %w", addr, err)
		}
	}
	httpLis := cfg.HTTPListener
	if httpLis == nil && cfg.HTTPAddr != "" {
		if httpLis, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
			grpcLis.Close()
			return fmt.Errorf("listen on --http-addr %s: %w", cfg.HTTPAddr, err)
		}
	}

	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := mgr.Start(ctx); err != nil {
			return fmt.Errorf("manager: %w", err)
		}
		return nil
	})
	g.Go(func() error { return grpcSrv.Run(ctx, grpcLis) })
	g.Go(func() error { broadcaster.Run(ctx); return nil })
	g.Go(func() error { adm.Tidy(ctx); return nil })
	if httpLis != nil {
		hs := serve.NewServer(gatherer)
		hs.EnablePprof(cfg.Pprof)
		hs.AddReadinessCheck("leader", adm.Ready)
		g.Go(func() error { return hs.Run(ctx, httpLis) })
	}
	return g.Wait()
}
