package sdk

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"slices"
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
// exits. --tls-cert-file and --tls-key-file serve TLS (see WithTLS), and
// --tls-ca-file adds mutual TLS; --client-identity, repeated, then serves
// only clients whose certificate names one of the identities (see
// WithClientIdentities). Without TLS it serves plaintext, and only on a
// loopback --addr unless --insecure-plaintext says otherwise (see
// WithInsecurePlaintext). --health-addr serves plaintext HTTP probes for
// Kubernetes, whose gRPC probes cannot speak TLS. It exits with status 2
// on bad flags (TLS files that do not load and plaintext off loopback
// included) and 1 when the provider cannot serve. Options come after the
// ones Main sets, so WithLogger replaces its logger.
func Main(info Info, checker Checker, opts ...Option) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[0], os.Args[1:], os.Stderr, info, checker, opts...)
	stop()
	os.Exit(code)
}

// mainFlags are Main's flags, parsed.
type mainFlags struct {
	addr              string
	healthAddr        string
	tls               *mtls.Files
	insecurePlaintext bool
	clientIdentities  mtls.IdentityList
}

// parseMainFlags parses args; it reports what is wrong on stderr.
func parseMainFlags(name string, args []string, stderr io.Writer) (*mainFlags, bool) {
	f := &mainFlags{}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.addr, "addr", DefaultAddr, "address to serve sluice.checks.v1 on, host:port")
	fs.StringVar(&f.healthAddr, "health-addr", "", "address to serve plaintext HTTP probes on, host:port: /healthz, and /readyz while grpc.health.v1 reports SERVING (default: none)")
	f.tls = mtls.BindServerFlags(fs, "the client certificate sluice's admitter presents (its AdmissionCheck's spec.tls.clientCertificateSecretRef)")
	fs.BoolVar(&f.insecurePlaintext, "insecure-plaintext", false, "serve plaintext on an --addr that is not loopback, on purpose: only where the network itself is encrypted and trusted (without TLS, plaintext is otherwise served only on loopback)")
	fs.Var(&f.clientIdentities, "client-identity", "with --tls-ca-file: certificate identity (URI SAN) of a client this provider serves, such as sluice's admitter's SPIFFE ID; repeat for more (default: any client whose certificate the CA signs)")
	if err := fs.Parse(args); err != nil {
		return nil, false
	}
	if !f.tls.Enabled() {
		f.tls = nil
	} else if err := f.tls.ValidateServer(); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return nil, false
	}
	return f, true
}

// checkTransport applies the SDK's transport rules to the flags, with
// errors that name the flags. cfg holds every option Main serves with,
// the flags' and the provider's own, so that TLS given in code counts.
func (f *mainFlags) checkTransport(cfg config) error {
	if f.insecurePlaintext && !cfg.plaintext() {
		return errors.New("--insecure-plaintext allows plaintext, and the --tls-* flags serve TLS: choose one")
	}
	if len(f.clientIdentities) > 0 && !cfg.identifiesClients() {
		return errors.New("--client-identity needs mutual TLS: --tls-ca-file names the CA of the client certificates whose identities it checks")
	}
	if !cfg.plaintext() || cfg.insecurePlaintext || mtls.LoopbackAddr(f.addr) {
		return nil
	}
	return fmt.Errorf("--addr %s is not a loopback address, and a provider serves plaintext only on loopback: "+
		"set --tls-cert-file and --tls-key-file (and --tls-ca-file for mutual TLS), or --insecure-plaintext to serve plaintext on purpose", f.addr)
}

// serverOptions are the options the flags ask for.
func (f *mainFlags) serverOptions() []Option {
	var opts []Option
	if f.tls != nil {
		opts = append(opts, WithTLS(*f.tls))
	}
	if f.insecurePlaintext {
		opts = append(opts, WithInsecurePlaintext())
	}
	if len(f.clientIdentities) > 0 {
		opts = append(opts, WithClientIdentities(f.clientIdentities...))
	}
	return opts
}

// run is Main with its surroundings passed in, for tests.
func run(ctx context.Context, name string, args []string, stderr io.Writer, info Info, checker Checker, opts ...Option) int {
	f, ok := parseMainFlags(name, args, stderr)
	if !ok {
		return 2
	}
	log := logr.FromSlogHandler(slog.NewJSONHandler(stderr, nil))
	all := slices.Concat([]Option{WithLogger(log)}, f.serverOptions(), opts)
	if err := f.checkTransport(newConfig(all)); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2
	}
	srv, err := NewServer(info, checker, all...)
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
	started := []any{"provider", info.Name, "addr", lis.Addr().String(), "transport", srv.transport()}
	if len(f.clientIdentities) > 0 {
		started = append(started, "clientIdentities", []string(f.clientIdentities))
	}
	log.Info("serving sluice.checks.v1", started...)
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
