// Package app wires the grouper together: the pod cache and controller,
// the admitter connection and its decision stream, and the probe and
// metrics server.
package app

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	schedulingv1alpha2 "k8s.io/api/scheduling/v1alpha2"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/mtls"
	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/pkg/rpc"
	"github.com/sluice-dev/sluice/pkg/serve"
	"github.com/sluice-dev/sluice/services/grouper/internal/controller"
	"github.com/sluice-dev/sluice/services/grouper/internal/groups"
	"github.com/sluice-dev/sluice/services/grouper/internal/metrics"
	"github.com/sluice-dev/sluice/services/grouper/internal/shard"
	"github.com/sluice-dev/sluice/services/grouper/internal/stream"
)

// TracerName names the tracer the grouper's spans come from.
const TracerName = "github.com/sluice-dev/sluice/services/grouper"

// EventSource is the component name on the grouper's events.
const EventSource = "sluice-grouper"

// Config is everything the service needs to run.
type Config struct {
	// REST reaches the API server.
	REST *rest.Config
	// HTTPAddr serves /healthz, /readyz and /metrics.
	HTTPAddr string
	// Pprof serves Go's profiles under /debug/pprof/ with the probes.
	Pprof bool
	// AdmitterAddr is the admitter's gRPC target.
	AdmitterAddr string
	// TLS, when enabled, dials the admitter with mutual TLS from these
	// files, read again while running. Without it the grouper dials in
	// plaintext, and only a loopback target.
	TLS *mtls.Files
	// AdmitterServerName is the name the admitter's certificate must hold;
	// empty means the host of AdmitterAddr.
	AdmitterServerName string
	// Workers bounds the pods handled (and API writes sent) at once.
	Workers int
	// Shard is this replica's share of the workloads.
	Shard shard.Shard
	// CallTimeout bounds each admitter call.
	CallTimeout time.Duration
}

// Validate checks the configuration; errors name the flag.
func (c Config) Validate() error {
	if c.Workers < 1 {
		return fmt.Errorf("--workers %d is not valid: must be at least 1", c.Workers)
	}
	if c.AdmitterAddr == "" {
		return errors.New("--admitter-addr is empty: it must name the admitter's gRPC address")
	}
	if c.TLS.Enabled() {
		if err := c.TLS.Validate(); err != nil {
			return err
		}
	} else if !mtls.LoopbackTarget(c.AdmitterAddr) {
		return fmt.Errorf("--admitter-addr %s is not a loopback target, and the grouper dials without TLS only on loopback: "+
			"set --tls-cert-file, --tls-key-file and --tls-ca-file", c.AdmitterAddr)
	}
	if c.CallTimeout <= 0 {
		return fmt.Errorf("--admitter-timeout %v is not valid: must be positive", c.CallTimeout)
	}
	if err := c.Shard.Validate(); err != nil {
		return fmt.Errorf("--shard-index/--shard-count: %w", err)
	}
	return nil
}

// Run serves until ctx is done, then shuts down gracefully.
func Run(ctx context.Context, log logr.Logger, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	m, err := metrics.New(ctrlmetrics.Registry)
	if err != nil {
		return err
	}

	// Every admitter call is idempotent, so all may be retried.
	dialOpts := []grpc.DialOption{rpc.WithRetries("/" + admitterv1.AdmitterService_ServiceDesc.ServiceName + "/")}
	if cfg.TLS.Enabled() {
		creds, err := cfg.TLS.ClientCredentials()
		if err != nil {
			return fmt.Errorf("admitter connection: %w", err)
		}
		defer creds.Close()
		dialOpts = append(dialOpts, grpc.WithTransportCredentials(creds))
		if cfg.AdmitterServerName != "" {
			dialOpts = append(dialOpts, grpc.WithAuthority(cfg.AdmitterServerName))
		}
	}
	conn, err := rpc.Dial(cfg.AdmitterAddr, log.WithName("admitter"), dialOpts...)
	if err != nil {
		return fmt.Errorf("--admitter-addr: %w", err)
	}
	defer conn.Close()
	admitter := admitterv1.NewAdmitterServiceClient(conn)

	mgr, err := newManager(cfg.REST, log)
	if err != nil {
		return err
	}
	rec := controller.New(controller.Options{
		Client:      mgr.GetClient(),
		APIReader:   mgr.GetAPIReader(),
		Admitter:    admitter,
		Recorder:    mgr.GetEventRecorder(EventSource),
		Metrics:     m,
		Shard:       cfg.Shard,
		Tracer:      otel.Tracer(TracerName),
		Propagator:  otel.GetTextMapPropagator(),
		CallTimeout: cfg.CallTimeout,
		Log:         log.WithName("pods"),
	})
	if err := rec.SetupWithManager(ctx, mgr, cfg.Workers); err != nil {
		return err
	}
	follower := stream.New(admitter, rec, stream.Options{
		Shard:   shard.Proto(cfg.Shard),
		Metrics: m,
		Log:     log.WithName("decisions"),
	})

	// Decisions are looked up against the pods, and a stop check takes a
	// pod missing from the roster for one that is gone: the stream opens
	// only once the cache is complete and the roster holds all of it.
	var synced atomic.Bool
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		if !mgr.GetCache().WaitForCacheSync(ctx) || !toolscache.WaitForCacheSync(ctx.Done(), rec.RosterSynced) {
			return nil // stopping
		}
		synced.Store(true)
		log.Info("pod cache synced; following decisions", "admitter", cfg.AdmitterAddr, "shard", cfg.Shard)
		return follower.Run(ctx)
	})); err != nil {
		return fmt.Errorf("add decision stream: %w", err)
	}

	probes := serve.NewServer(ctrlmetrics.Registry)
	probes.EnablePprof(cfg.Pprof)
	probes.AddReadinessCheck("pod-cache", func(context.Context) error {
		if !synced.Load() {
			return errors.New("pod cache not synced yet")
		}
		return nil
	})
	probes.AddReadinessCheck("decision-stream", follower.Ready)

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := mgr.Start(gctx); err != nil {
			return fmt.Errorf("controller manager: %w", err)
		}
		return nil
	})
	g.Go(func() error { return probes.ListenAndRun(gctx, log, cfg.HTTPAddr) })
	return g.Wait()
}

// newManager builds a controller-runtime manager whose cache holds only
// managed pods and the metadata of pod groups' Workloads, without
// managedFields, and that serves nothing itself
// (probes and metrics are on --http-addr). There is no leader election:
// replicas share the work by shard.
func newManager(cfg *rest.Config, log logr.Logger) (manager.Manager, error) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("build scheme: %w", err)
	}
	// PodGroups are created and, rarely, read straight from the API
	// server: the cache never watches them.
	if err := schedulingv1alpha2.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("build scheme: %w", err)
	}
	// A Workload is read whole, live, only to explain why a pod does not
	// fit its pod set; the cache keeps Workloads' metadata only.
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("build scheme: %w", err)
	}
	managed := labels.SelectorFromSet(labels.Set{podkeys.ManagedLabel: podkeys.ManagedLabelValue})
	groupWorkloads, err := labels.Parse(v1alpha1.PodGroupLabel)
	if err != nil {
		return nil, fmt.Errorf("select group workloads: %w", err)
	}
	mgr, err := ctrl.NewManager(cfg, manager.Options{
		Scheme: scheme,
		Logger: log,
		Cache: cache.Options{
			ByObject: map[client.Object]cache.ByObject{
				&corev1.Pod{}:          {Label: managed},
				groups.GroupWorkload(): {Label: groupWorkloads},
			},
			DefaultTransform: cache.TransformStripManagedFields(),
		},
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		LeaderElection:         false,
	})
	if err != nil {
		return nil, fmt.Errorf("create controller manager: %w", err)
	}
	return mgr, nil
}
