package serve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Check reports whether one part of the process is healthy (or ready); a
// non-nil error says why not. It should return quickly: probes time out.
type Check func(ctx context.Context) error

type namedCheck struct {
	name  string
	check Check
}

const (
	readHeaderTimeout = 5 * time.Second
	shutdownTimeout   = 5 * time.Second
)

// Server serves /healthz, /readyz and /metrics, and /debug/pprof/ when
// asked. Add checks before Run.
type Server struct {
	gatherer prometheus.Gatherer
	pprof    bool

	mu       sync.RWMutex
	liveness []namedCheck
	ready    []namedCheck
}

// NewServer returns a Server exposing the metrics gathered by g. Services
// built on controller-runtime pass its metrics.Registry (which already
// holds the Go and process collectors); others pass NewRegistry().
func NewServer(g prometheus.Gatherer) *Server {
	return &Server{gatherer: g}
}

// NewRegistry returns an empty Prometheus registry with the Go runtime and
// process collectors registered.
func NewRegistry() *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return r
}

// EnablePprof makes the server serve Go's profiles under /debug/pprof/
// (the --pprof flag). Call it before Run.
func (s *Server) EnablePprof(on bool) { s.pprof = on }

// AddLivenessCheck adds a check to /healthz. With no liveness checks,
// /healthz succeeds whenever the process serves HTTP.
func (s *Server) AddLivenessCheck(name string, c Check) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.liveness = append(s.liveness, namedCheck{name: name, check: c})
}

// AddReadinessCheck adds a check to /readyz, which succeeds only when
// every readiness check does.
func (s *Server) AddReadinessCheck(name string, c Check) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ready = append(s.ready, namedCheck{name: name, check: c})
}

// Handler returns the HTTP handler for the three paths (and the profiles).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /healthz", s.checksHandler("healthz", func() []namedCheck { return s.liveness }))
	mux.Handle("GET /readyz", s.checksHandler("readyz", func() []namedCheck { return s.ready }))
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.gatherer, promhttp.HandlerOpts{}))
	if s.pprof {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// checksHandler runs the checks in order and writes one line per check, in
// the style of the Kubernetes API server's verbose health output.
func (s *Server) checksHandler(endpoint string, checks func() []namedCheck) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.RLock()
		list := append([]namedCheck(nil), checks()...)
		s.mu.RUnlock()

		var b strings.Builder
		failed := false
		for _, c := range list {
			if err := c.check(r.Context()); err != nil {
				failed = true
				fmt.Fprintf(&b, "[-]%s failed: %v\n", c.name, err)
				continue
			}
			fmt.Fprintf(&b, "[+]%s ok\n", c.name)
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if failed {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(&b, "%s check failed\n", endpoint)
		} else {
			fmt.Fprintf(&b, "%s check passed\n", endpoint)
		}
		_, _ = w.Write([]byte(b.String()))
	})
}

// ListenAndRun listens on addr (the --http-addr flag), logs where, and
// serves as Run does.
func (s *Server) ListenAndRun(ctx context.Context, log logr.Logger, addr string) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on --http-addr %s: %w", addr, err)
	}
	log.Info("serving probes and metrics", "addr", lis.Addr().String())
	return s.Run(ctx, lis)
}

// Run serves on lis until ctx is done, then shuts the HTTP server down,
// waiting a few seconds for in-flight requests. It returns nil after a
// shutdown caused by ctx, and the serving error otherwise.
func (s *Server) Run(ctx context.Context, lis net.Listener) error {
	addr := lis.Addr().String()
	hs := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: readHeaderTimeout}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(lis) }()

	select {
	case err := <-served:
		return fmt.Errorf("serve HTTP on %s: %w", addr, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		_ = hs.Close()
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve HTTP on %s: %w", addr, err)
	}
	return nil
}

// SignalContext returns a context cancelled on SIGTERM (what Kubernetes
// sends to stop a pod) or SIGINT. Call the CancelFunc once the context is
// done so that a second signal kills the process at once.
func SignalContext() (context.Context, context.CancelFunc) {
	return signalContext(context.Background())
}

// signalContext is SignalContext with a parent.
func signalContext(parent context.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(parent, syscall.SIGTERM, os.Interrupt)
}
