package serve

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/go-logr/logr"

	"github.com/sluice-dev/sluice/pkg/telemetry"
)

// traceFlushTimeout bounds how long a stopping service waits for its last
// spans to reach the collector.
const traceFlushTimeout = 5 * time.Second

// Main runs a service's body with the set-up every sluice service shares:
// the logger flags describes (writing to logOut), a context derived from
// ctx that is also cancelled on SIGTERM or SIGINT, and tracing for service
// at version. Once run returns, pending spans are flushed and, when run
// succeeded, "stopped" is logged. Errors from run are returned unchanged.
//
// Call it after parsing flags; run should block until its context ends.
func Main(ctx context.Context, logOut io.Writer, service, version string, flags *Flags,
	run func(ctx context.Context, log logr.Logger) error) error {
	log, err := flags.NewLogger(logOut)
	if err != nil {
		return err
	}
	ctx, stop := signalContext(ctx)
	defer stop()

	shutdown, err := telemetry.Setup(ctx, service, version)
	if err != nil {
		return fmt.Errorf("set up tracing: %w", err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), traceFlushTimeout)
		defer cancel()
		if err := shutdown(sctx); err != nil {
			log.Error(err, "flush traces")
		}
	}()

	if err := run(ctx, log); err != nil {
		return err
	}
	log.Info("stopped")
	return nil
}
