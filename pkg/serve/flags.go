package serve

import (
	"flag"
	"fmt"
	"io"

	"github.com/go-logr/logr"

	"github.com/sluice-dev/sluice/pkg/telemetry"
)

// Flags are the command-line settings every sluice service shares.
type Flags struct {
	// HTTPAddr is where /healthz, /readyz and /metrics are served.
	HTTPAddr string
	// LogLevel is debug, info, warn, error or a logr verbosity (0, 1, 2…).
	LogLevel string
	// LogFormat is json or text.
	LogFormat string
	// Pprof serves Go's profiles under /debug/pprof/ on HTTPAddr.
	Pprof bool
}

// BindFlags registers --http-addr, --log-level, --log-format and --pprof on fs and
// returns the values they will hold once fs is parsed.
func BindFlags(fs *flag.FlagSet) *Flags {
	f := &Flags{}
	fs.StringVar(&f.HTTPAddr, "http-addr", ":8080", "address serving /healthz, /readyz and /metrics")
	fs.StringVar(&f.LogLevel, "log-level", "info", "log level: debug, info, warn, error, or a verbosity 0, 1, 2…")
	fs.StringVar(&f.LogFormat, "log-format", "json", "log format: json or text")
	fs.BoolVar(&f.Pprof, "pprof", false, "also serve Go's CPU, heap and goroutine profiles under /debug/pprof/ on --http-addr")
	return f
}

// NewLogger builds the logger the flags describe, writing to w.
func (f *Flags) NewLogger(w io.Writer) (logr.Logger, error) {
	log, err := telemetry.NewLogger(w, f.LogLevel, f.LogFormat)
	if err != nil {
		return logr.Logger{}, fmt.Errorf("--log-level/--log-format: %w", err)
	}
	return log, nil
}
