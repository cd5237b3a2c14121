package sdk

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// probeTimeout bounds one probe request; kubelet's default probe timeout
// is one second.
const probeTimeout = time.Second

// probeHandler answers Kubernetes HTTP probes from the gRPC health
// service, whose own port a kubelet cannot probe once it serves TLS:
// /healthz is 200 while the process answers, /readyz is 200 while the
// whole server reports SERVING (until Serve's shutdown begins) and 503
// otherwise.
func probeHandler(h *health.Server) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		resp, err := h.Check(r.Context(), &healthpb.HealthCheckRequest{})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			http.Error(w, "not serving", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// serveProbes serves probeHandler on addr until stop is called.
func serveProbes(ctx context.Context, log logr.Logger, addr string, h *health.Server) (stop func(), err error) {
	lis, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on --health-addr %s: %w", addr, err)
	}
	srv := &http.Server{
		Handler:           http.TimeoutHandler(probeHandler(h), probeTimeout, "probe timed out"),
		ReadHeaderTimeout: probeTimeout,
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error(err, "HTTP probes stopped", "healthAddr", lis.Addr().String())
		}
	}()
	log.Info("serving HTTP probes", "healthAddr", lis.Addr().String())
	return func() {
		srv.Close()
		<-done
	}, nil
}
