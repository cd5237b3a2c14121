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
// exits. It exits with status 2 on bad flags and 1 when the provider
// cannot serve. Options come after the ones Main sets, so WithLogger
// replaces its logger.
func Main(info Info, checker Checker, opts ...Option) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[0], os.Args[1:], os.Stderr, info, checker, opts...)
	stop()
	os.Exit(code)
}

// run is Main with its surroundings passed in, for tests.
func run(ctx context.Context, name string, args []string, stderr io.Writer, info Info, checker Checker, opts ...Option) int {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", DefaultAddr, "address to serve sluice.checks.v1 on, host:port")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	log := logr.FromSlogHandler(slog.NewJSONHandler(stderr, nil))
	srv, err := NewServer(info, checker, append([]Option{WithLogger(log)}, opts...)...)
	if err != nil {
		log.Error(err, "provider not started")
		return 1
	}
	lis, err := (&net.ListenConfig{}).Listen(ctx, "tcp", *addr)
	if err != nil {
		log.Error(fmt.Errorf("listen on --addr %s: %w", *addr, err), "provider not started")
		return 1
	}
	log.Info("serving sluice.checks.v1", "provider", info.Name, "addr", lis.Addr().String())
	if err := srv.Serve(ctx, lis); err != nil {
		log.Error(err, "provider stopped")
		return 1
	}
	log.Info("provider stopped")
	return 0
}
