// Command checks serves sluice's built-in admission-check providers over
// sluice.checks.v1, one per process as --provider says: nodepool (the
// default, see services/checks/providers/nodepool), for every AdmissionCheck
// whose spec.endpoint points here, each AdmissionCheck's parameters saying
// which pool its workloads go to; or budget (services/checks/providers/budget),
// the namespaces' budgets read from --budget-config, as one replica of its
// own since it keeps its accounting in memory. --provider=approval
// (services/checks/providers/approval) waits for a person to annotate the
// Workload; it reads Workloads through --kubeconfig and runs as one replica.
//
// Locally it listens on 127.0.0.1:9091 (gRPC) and :8084 (/healthz, /readyz,
// /metrics); in a cluster, run it with --grpc-addr=:9091 behind a Service.
// --tls-cert-file and --tls-key-file serve gRPC over TLS, and --tls-ca-file
// requires a client certificate from that CA (mutual TLS) naming the
// admitter's identity (--admitter-identity); the files are read again
// every --tls-refresh-interval. Without TLS it serves only a loopback
// --grpc-addr, unless --insecure-plaintext says otherwise.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	"github.com/sluice-dev/sluice/pkg/serve"
	"github.com/sluice-dev/sluice/services/checks/sdk"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const (
	serviceName     = "sluice-checks"
	defaultGRPCAddr = "127.0.0.1:9091"
	defaultHTTPAddr = ":8084"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stderr, nil); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", serviceName, err)
		os.Exit(1)
	}
}

// listening is told the bound addresses once both listeners are open
// (tests use it with port 0).
type listening func(grpcAddr, httpAddr net.Addr)

func run(ctx context.Context, args []string, logOut io.Writer, onListen listening) error {
	fs := flag.NewFlagSet(serviceName, flag.ContinueOnError)
	sf := serve.BindFlags(fs)
	if err := fs.Set("http-addr", defaultHTTPAddr); err != nil {
		return err
	}
	fs.Lookup("http-addr").DefValue = defaultHTTPAddr
	grpcAddr := fs.String("grpc-addr", defaultGRPCAddr, "address serving sluice.checks.v1, grpc.health.v1 and reflection (in a cluster: :9091)")
	shutdownTimeout := fs.Duration("shutdown-timeout", 10*time.Second, "how long calls in flight may finish after SIGTERM")
	security := bindSecurityFlags(fs)
	providerFlags := bindProviderFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if err := security.validate(*grpcAddr); err != nil {
		return err
	}
	prov, err := providerFlags.load()
	if err != nil {
		return err
	}

	return serve.Main(ctx, logOut, serviceName, version, sf, func(ctx context.Context, log logr.Logger) error {
		return serveChecks(ctx, log, sf, prov, *grpcAddr, *shutdownTimeout, security, onListen)
	})
}

// serveChecks serves the built-in providers over gRPC, secured as security
// says, and the probes and metrics over plaintext HTTP until ctx ends.
func serveChecks(ctx context.Context, log logr.Logger, sf *serve.Flags, prov *provider, grpcAddr string, shutdownTimeout time.Duration, security *securityFlags, onListen listening) error {
	reg := serve.NewRegistry()
	metrics := grpcprom.NewServerMetrics()
	reg.MustRegister(metrics)
	opts := append([]sdk.Option{
		sdk.WithLogger(log),
		sdk.WithShutdownTimeout(shutdownTimeout),
		sdk.WithServerOptions(grpc.ChainUnaryInterceptor(metrics.UnaryServerInterceptor())),
	}, security.serverOptions()...)
	srv, err := sdk.NewServer(prov.info, prov.checker, opts...)
	if err != nil {
		return err
	}
	metrics.InitializeMetrics(srv.GRPCServer())

	grpcLis, err := net.Listen("tcp", grpcAddr)
	if err != nil {
		return fmt.Errorf("--grpc-addr: %w", err)
	}
	httpLis, err := net.Listen("tcp", sf.HTTPAddr)
	if err != nil {
		grpcLis.Close()
		return fmt.Errorf("--http-addr: %w", err)
	}
	var serving atomic.Bool
	hs := serve.NewServer(reg)
	hs.EnablePprof(sf.Pprof)
	hs.AddReadinessCheck("grpc", func(context.Context) error {
		if !serving.Load() {
			return fmt.Errorf("gRPC server not serving")
		}
		return nil
	})

	log.Info("starting", "version", version, "grpcAddr", grpcLis.Addr().String(), "httpAddr", httpLis.Addr().String(),
		"providers", []string{prov.info.Name}, "transport", security.transport())
	security.logStart(log)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		serving.Store(true)
		defer serving.Store(false)
		return srv.Serve(gctx, grpcLis)
	})
	g.Go(func() error { return hs.Run(gctx, httpLis) })
	if prov.background != nil {
		g.Go(func() error { return prov.background(gctx, log) })
	}
	if onListen != nil {
		onListen(grpcLis.Addr(), httpLis.Addr())
	}
	return g.Wait()
}
