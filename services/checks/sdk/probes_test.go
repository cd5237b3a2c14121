package sdk

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"google.golang.org/grpc/health"
)

// TestProbeHandler checks the HTTP probes against the gRPC health
// service's states: ready while it serves, not ready once shutdown begins,
// alive throughout.
func TestProbeHandler(t *testing.T) {
	tests := []struct {
		name     string
		shutdown bool
		path     string
		want     int
	}{
		{name: "live while serving", path: "/healthz", want: http.StatusOK},
		{name: "ready while serving", path: "/readyz", want: http.StatusOK},
		{name: "live while shutting down", shutdown: true, path: "/healthz", want: http.StatusOK},
		{name: "not ready while shutting down", shutdown: true, path: "/readyz", want: http.StatusServiceUnavailable},
		{name: "unknown path", path: "/metrics", want: http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := health.NewServer()
			if tt.shutdown {
				h.Shutdown()
			}
			rec := httptest.NewRecorder()
			probeHandler(h).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tt.path, nil))
			if rec.Code != tt.want {
				t.Errorf("GET %s = %d %q, want %d", tt.path, rec.Code, rec.Body.String(), tt.want)
			}
		})
	}
}
