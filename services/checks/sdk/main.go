package sdk

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-logr/logr"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/pkg/mtls"
)

// DefaultAddr is where Main listens unless --addr says otherwise.
const DefaultAddr = ":9091"

// EvaluateFunc is a Checker for providers that hold nothing per
// evaluation: the function answers Evaluate and Release does nothing. Do
// not advertise CAPABILITY_RELEASE with it.
type EvaluateFunc func(ctx context.Context, req *checksv1.EvaluateRequest) (*checksv1.EvaluateResponse, error)

// Evaluate calls f.
func (f EvaluateFunc) Evaluate(ctx context.Context, req *checksv1.EvaluateRequest) (*checksv1.EvaluateResponse, error) {
	return f(ctx, req)
}

// Release has nothing to free.
func (EvaluateFunc) Release(context.Context, *checksv1.ReleaseRequest) error { return nil }

// Main is a provider's whole main function: it serves checker on the
// address of the --addr flag (default DefaultAddr) with JSON logs on
// stderr, until SIGINT or SIGTERM, then finishes the calls in flight and
// exits. It serves plaintext unless --tls-cert-file and --tls-key-file
// name a certificate (then TLS, see WithTLS); --tls-ca-file adds mutual
// TLS. --health-addr serves plaintext HTTP probes for Kubernetes, whose
// gRPC probes cannot speak TLS. It exits with status 2 on bad flags (TLS
// files that do not load included) and 1 when the provider cannot serve.
// Options come after the ones Main sets, so WithLogger replaces its
// logger.
func Main(info Info, checker Checker, opts ...Option) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[0], os.Args[1:], os.Stderr, info, checker, opts...)
	stop()
	os.Exit(code)
}

// mainFlags are Main's flags, parsed.
type mainFlags struct {
	addr       string
	healthAddr string
	tls        *mtls.Files
}

// parseMainFlags parses args; it reports what is wrong on stderr.
func parseMainFlags(name string, args []string, stderr io.Writer) (*mainFlags, bool) {
	f := &mainFlags{}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.addr, "addr", DefaultAddr, "address to serve sluice.checks.v1 on, host:port")
	fs.StringVar(&f.healthAddr, "health-addr", "", "address to serve plaintext HTTP probes on, host:port: /healthz, and /readyz while grpc.health.v1 reports SERVING (default: none)")
	f.tls = mtls.BindServerFlags(fs, "the client certificate sluice's admitter presents (its AdmissionCheck's spec.tls.clientCertificateSecretRef)")
	if err := fs.Parse(args); err != nil {
		return nil, false
	}
	if !f.tls.Enabled() {
		f.tls = nil
		return f, true
	}
	if err := f.tls.ValidateServer(); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return nil, false
	}
	return f, true
}

// run is Main with its surroundings passed in, for tests.
func run(ctx context.Context, name string, args []string, stderr io.Writer, info Info, checker Checker, opts ...Option) int {
	f, ok := parseMainFlags(name, args, stderr)
	if !ok {
		return 2
	}
	log := logr.FromSlogHandler(slog.NewJSONHandler(stderr, nil))
	base := []Option{WithLogger(log)}
	if f.tls != nil {
		base = append(base, WithTLS(*f.tls))
	}
	srv, err := NewServer(info, checker, append(base, opts...)...)
	if err != nil {
		log.Error(err, "provider not started")
		return 1
	}
	lis, err := (&net.ListenConfig{}).Listen(ctx, "tcp", f.addr)
	if err != nil {
		log.Error(fmt.Errorf("listen on --addr %s: %w", f.addr, err), "provider not started")
		return 1
	}
	if f.healthAddr != "" {
		stopProbes, err := serveProbes(ctx, log, f.healthAddr, srv.Health())
		if err != nil {
			lis.Close()
			log.Error(err, "provider not started")
			return 1
		}
		defer stopProbes()
	}
	log.Info("serving sluice.checks.v1", "provider", info.Name, "addr", lis.Addr().String(), "transport", srv.transport())
	if srv.transport() == "plaintext" {
		log.Info("serving plaintext: sluice calls a plaintext provider only on a loopback endpoint or when its AdmissionCheck sets spec.insecurePlaintext; --tls-cert-file and --tls-key-file serve TLS")
	}
	if err := srv.Serve(ctx, lis); err != nil {
		log.Error(err, "provider stopped")
		return 1
	}
	log.Info("provider stopped")
	return 0
}
