package telemetry

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
)

func TestExportEnabled(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		want    bool
		wantErr string
	}{
		{name: "nothing configured", env: nil, want: false},
		{name: "endpoint implies otlp", env: map[string]string{envEndpoint: "http://c:4317"}, want: true},
		{name: "traces endpoint implies otlp", env: map[string]string{envTracesEndpoint: "http://c:4317"}, want: true},
		{name: "explicit otlp", env: map[string]string{envTracesExporter: "otlp"}, want: true},
		{name: "none wins over endpoint", env: map[string]string{envTracesExporter: "none", envEndpoint: "http://c:4317"}, want: false},
		{name: "grpc protocol", env: map[string]string{envTracesExporter: "otlp", envProtocol: "grpc"}, want: true},
		{name: "traces protocol wins", env: map[string]string{envTracesExporter: "otlp", envProtocol: "http/protobuf", envTracesProtocol: "grpc"}, want: true},
		{name: "http protocol rejected", env: map[string]string{envTracesExporter: "otlp", envProtocol: "http/protobuf"}, wantErr: "OTEL_EXPORTER_OTLP_PROTOCOL=\"http/protobuf\" is not supported"},
		{name: "protocol ignored when not exporting", env: map[string]string{envProtocol: "http/protobuf"}, want: false},
		{name: "unknown exporter rejected", env: map[string]string{envTracesExporter: "zipkin"}, wantErr: "OTEL_TRACES_EXPORTER=\"zipkin\" is not supported"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := exportEnabled(func(k string) string { return tt.env[k] })
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if got != tt.want {
				t.Errorf("exportEnabled = %v, want %v", got, tt.want)
			}
		})
	}
}

func clearOTELEnv(t *testing.T) {
	for _, k := range []string{envTracesExporter, envEndpoint, envTracesEndpoint, envProtocol, envTracesProtocol,
		"OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG"} {
		t.Setenv(k, "")
	}
}

// TestSetupWithoutExporterStillPropagates checks that an untraced service
// passes an incoming trace on: the span context it extracts is the one it
// injects into its own outgoing calls.
func TestSetupWithoutExporterStillPropagates(t *testing.T) {
	clearOTELEnv(t)
	shutdown, err := Setup(context.Background(), "sluice-test", "v0")
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	defer shutdown(context.Background())

	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	in := propagation.MapCarrier{"traceparent": parent, "baggage": "queue=team-a"}
	ctx := otel.GetTextMapPropagator().Extract(context.Background(), in)
	ctx, span := otel.Tracer("test").Start(ctx, "work")
	if span.IsRecording() {
		t.Errorf("span is recording although no exporter is configured")
	}
	out := propagation.MapCarrier{}
	otel.GetTextMapPropagator().Inject(ctx, out)
	span.End()

	if got := out["traceparent"]; !strings.HasPrefix(got, "00-4bf92f3577b34da6a3ce929d0e0e4736-") {
		t.Errorf("outgoing traceparent = %q, want the incoming trace id", got)
	}
	if got := out["baggage"]; got != "queue=team-a" {
		t.Errorf("outgoing baggage = %q, want %q", got, "queue=team-a")
	}
}

// collector is a minimal OTLP trace receiver on a real gRPC socket.
type collector struct {
	collectortrace.UnimplementedTraceServiceServer
	mu  sync.Mutex
	got []*collectortrace.ExportTraceServiceRequest
}

func (c *collector) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, req)
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func (c *collector) requests() []*collectortrace.ExportTraceServiceRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*collectortrace.ExportTraceServiceRequest(nil), c.got...)
}

func TestSetupExportsToOTLPCollector(t *testing.T) {
	tests := []struct {
		name        string
		env         map[string]string
		wantService string
	}{
		{name: "service name from argument", wantService: "sluice-admitter"},
		{name: "OTEL_SERVICE_NAME overrides", env: map[string]string{"OTEL_SERVICE_NAME": "admitter-canary"}, wantService: "admitter-canary"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			c := &collector{}
			gs := grpc.NewServer()
			collectortrace.RegisterTraceServiceServer(gs, c)
			go gs.Serve(lis)
			defer gs.Stop()

			clearOTELEnv(t)
			t.Setenv(envEndpoint, "http://"+lis.Addr().String())
			t.Setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			ctx := context.Background()
			shutdown, err := Setup(ctx, "sluice-admitter", "v1.2.3")
			if err != nil {
				t.Fatalf("Setup: %v", err)
			}
			_, span := otel.Tracer("test").Start(ctx, "admit")
			if !span.IsRecording() {
				t.Errorf("span is not recording although an endpoint is configured")
			}
			span.End()
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if err := shutdown(sctx); err != nil {
				t.Fatalf("shutdown: %v", err)
			}

			var names []string
			var service, version string
			for _, req := range c.requests() {
				for _, rs := range req.GetResourceSpans() {
					for _, a := range rs.GetResource().GetAttributes() {
						switch a.GetKey() {
						case "service.name":
							service = a.GetValue().GetStringValue()
						case "service.version":
							version = a.GetValue().GetStringValue()
						}
					}
					for _, ss := range rs.GetScopeSpans() {
						for _, s := range ss.GetSpans() {
							names = append(names, s.GetName())
							if got := trace.TraceID(s.GetTraceId()); got != span.SpanContext().TraceID() {
								t.Errorf("exported trace id %s, want %s", got, span.SpanContext().TraceID())
							}
						}
					}
				}
			}
			if len(names) != 1 || names[0] != "admit" {
				t.Fatalf("collector received spans %v, want [admit]", names)
			}
			if service != tt.wantService || version != "v1.2.3" {
				t.Errorf("resource service.name=%q service.version=%q, want %q and v1.2.3", service, version, tt.wantService)
			}
		})
	}
}
