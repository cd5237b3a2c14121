package rpc

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"

	"github.com/sluice-dev/sluice/pkg/telemetry"
)

// testService is a grpc.testing.TestService whose calls report what the
// server saw: its id, the trace and the baggage that arrived.
type testService struct {
	testpb.UnimplementedTestServiceServer
	id string
	// unavailableFirst makes the first N UnaryCalls fail with UNAVAILABLE.
	unavailableFirst int32
	calls            atomic.Int32
}

func (s *testService) EmptyCall(context.Context, *testpb.Empty) (*testpb.Empty, error) {
	panic("handler bug")
}

func (s *testService) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	if n := s.calls.Add(1); n <= s.unavailableFirst {
		return nil, status.Error(codes.Unavailable, "warming up")
	}
	return &testpb.SimpleResponse{
		ServerId:   s.id,
		Username:   trace.SpanContextFromContext(ctx).TraceID().String(),
		OauthScope: baggage.FromContext(ctx).Member("queue").Value(),
	}, nil
}

// FullDuplexCall holds the stream open until the client goes away.
func (s *testService) FullDuplexCall(stream grpc.BidiStreamingServer[testpb.StreamingOutputCallRequest, testpb.StreamingOutputCallResponse]) error {
	if err := stream.Send(&testpb.StreamingOutputCallResponse{}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return stream.Context().Err()
}

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

func newLogger(t *testing.T, w io.Writer) logr.Logger {
	t.Helper()
	log, err := telemetry.NewLogger(w, "info", "json")
	if err != nil {
		t.Fatal(err)
	}
	return log
}

// startServer runs a Server with svc on 127.0.0.1:0 until the test ends.
func startServer(t *testing.T, log logr.Logger, svc *testService) (*Server, string, context.CancelFunc) {
	t.Helper()
	srv := NewServer(log)
	testpb.RegisterTestServiceServer(srv, svc)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, lis) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return srv, lis.Addr().String(), cancel
}

func dial(t *testing.T, target string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	conn, err := Dial(target, logr.Discard(), opts...)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func callCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestHealthPerService(t *testing.T) {
	srv, addr, _ := startServer(t, logr.Discard(), &testService{})
	const svc = "grpc.testing.TestService"
	srv.Health.SetServingStatus(svc, healthpb.HealthCheckResponse_NOT_SERVING)
	hc := healthpb.NewHealthClient(dial(t, addr))

	tests := []struct {
		name    string
		service string
		set     *healthpb.HealthCheckResponse_ServingStatus
		want    healthpb.HealthCheckResponse_ServingStatus
		wantErr codes.Code
	}{
		{name: "whole server serves from the start", service: "", want: healthpb.HealthCheckResponse_SERVING},
		{name: "service not yet ready", service: svc, want: healthpb.HealthCheckResponse_NOT_SERVING},
		{name: "service flipped to serving", service: svc, set: healthpb.HealthCheckResponse_SERVING.Enum(), want: healthpb.HealthCheckResponse_SERVING},
		{name: "unknown service", service: "nope.Service", wantErr: codes.NotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.set != nil {
				srv.Health.SetServingStatus(tt.service, *tt.set)
			}
			resp, err := hc.Check(callCtx(t), &healthpb.HealthCheckRequest{Service: tt.service})
			if tt.wantErr != codes.OK {
				if status.Code(err) != tt.wantErr {
					t.Fatalf("Check err = %v, want code %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Check: %v", err)
			}
			if resp.GetStatus() != tt.want {
				t.Errorf("status = %s, want %s", resp.GetStatus(), tt.want)
			}
		})
	}
}

func TestReflectionListsServices(t *testing.T) {
	_, addr, _ := startServer(t, logr.Discard(), &testService{})
	rc := reflectionpb.NewServerReflectionClient(dial(t, addr))
	stream, err := rc.ServerReflectionInfo(callCtx(t))
	if err != nil {
		t.Fatalf("ServerReflectionInfo: %v", err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{},
	}); err != nil {
		t.Fatalf("send: %v", err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatalf("recv: %v", err)
	}
	got := map[string]bool{}
	for _, s := range resp.GetListServicesResponse().GetService() {
		got[s.GetName()] = true
	}
	for _, want := range []string{"grpc.health.v1.Health", "grpc.testing.TestService", "grpc.reflection.v1.ServerReflection"} {
		if !got[want] {
			t.Errorf("reflection lists %v, missing %s", got, want)
		}
	}
}

func TestPanicBecomesInternal(t *testing.T) {
	var logs syncBuffer
	_, addr, _ := startServer(t, newLogger(t, &logs), &testService{})
	client := testpb.NewTestServiceClient(dial(t, addr))

	_, err := client.EmptyCall(callCtx(t), &testpb.Empty{})
	if status.Code(err) != codes.Internal {
		t.Fatalf("EmptyCall err = %v, want code Internal", err)
	}
	if strings.Contains(status.Convert(err).Message(), "handler bug") {
		t.Errorf("panic value leaked to the client: %q", status.Convert(err).Message())
	}
	out := logs.String()
	for _, want := range []string{"recovered from panic", "handler bug", "rpc.(*testService).EmptyCall", `"grpc.code":"Internal"`} {
		if !strings.Contains(out, want) {
			t.Errorf("server log lacks %q:\n%s", want, out)
		}
	}
	// The server survives the panic.
	if _, err := client.UnaryCall(callCtx(t), &testpb.SimpleRequest{}); err != nil {
		t.Errorf("UnaryCall after panic: %v", err)
	}
}

func TestTraceContextCrossesToServer(t *testing.T) {
	shutdown, err := telemetry.Setup(context.Background(), "rpc-test", "v0")
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(context.Background())
	_, addr, _ := startServer(t, logr.Discard(), &testService{})
	client := testpb.NewTestServiceClient(dial(t, addr))

	traceID := trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36}
	ctx := trace.ContextWithSpanContext(callCtx(t), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    traceID,
		SpanID:     trace.SpanID{0, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
	}))
	member, err := baggage.NewMember("queue", "team-a")
	if err != nil {
		t.Fatal(err)
	}
	bag, err := baggage.New(member)
	if err != nil {
		t.Fatal(err)
	}
	ctx = baggage.ContextWithBaggage(ctx, bag)

	resp, err := client.UnaryCall(ctx, &testpb.SimpleRequest{})
	if err != nil {
		t.Fatalf("UnaryCall: %v", err)
	}
	if resp.GetUsername() != traceID.String() {
		t.Errorf("server saw trace %q, want %q", resp.GetUsername(), traceID.String())
	}
	if resp.GetOauthScope() != "team-a" {
		t.Errorf("server saw baggage queue=%q, want team-a", resp.GetOauthScope())
	}
}

func TestRetriesOnlyWhenOptedIn(t *testing.T) {
	tests := []struct {
		name      string
		opts      []grpc.DialOption
		wantCode  codes.Code
		wantCalls int32
	}{
		{name: "no retries by default", wantCode: codes.Unavailable, wantCalls: 1},
		{name: "method opted in", opts: []grpc.DialOption{WithRetries(testpb.TestService_UnaryCall_FullMethodName)}, wantCode: codes.OK, wantCalls: 3},
		{name: "service opted in", opts: []grpc.DialOption{WithRetries("/grpc.testing.TestService/")}, wantCode: codes.OK, wantCalls: 3},
		{name: "other method opted in", opts: []grpc.DialOption{WithRetries(testpb.TestService_EmptyCall_FullMethodName)}, wantCode: codes.Unavailable, wantCalls: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := &testService{unavailableFirst: 2}
			_, addr, _ := startServer(t, logr.Discard(), svc)
			client := testpb.NewTestServiceClient(dial(t, addr, tt.opts...))
			_, err := client.UnaryCall(callCtx(t), &testpb.SimpleRequest{})
			if status.Code(err) != tt.wantCode {
				t.Errorf("UnaryCall err = %v, want code %s", err, tt.wantCode)
			}
			if got := svc.calls.Load(); got != tt.wantCalls {
				t.Errorf("server saw %d calls, want %d", got, tt.wantCalls)
			}
		})
	}
}

func TestWithRetriesRejectsBadNames(t *testing.T) {
	for _, name := range []string{"grpc.testing.TestService/UnaryCall", "/", "//UnaryCall", "/a/b/c"} {
		t.Run(name, func(t *testing.T) {
			_, err := Dial("127.0.0.1:1", logr.Discard(), WithRetries(name))
			if err == nil || !strings.Contains(err.Error(), "WithRetries: method") {
				t.Fatalf("Dial err = %v, want a WithRetries error naming %q", err, name)
			}
		})
	}
}

func TestRoundRobinAcrossReplicas(t *testing.T) {
	_, a, _ := startServer(t, logr.Discard(), &testService{id: "a"})
	_, b, _ := startServer(t, logr.Discard(), &testService{id: "b"})
	r := manual.NewBuilderWithScheme("replicas")
	r.InitialState(resolver.State{Addresses: []resolver.Address{{Addr: a}, {Addr: b}}})
	client := testpb.NewTestServiceClient(dial(t, "replicas:///checks", grpc.WithResolvers(r)))

	seen := map[string]int{}
	deadline := time.Now().Add(10 * time.Second)
	for (seen["a"] == 0 || seen["b"] == 0) && time.Now().Before(deadline) {
		resp, err := client.UnaryCall(callCtx(t), &testpb.SimpleRequest{}, grpc.WaitForReady(true))
		if err != nil {
			t.Fatalf("UnaryCall: %v", err)
		}
		seen[resp.GetServerId()]++
	}
	if seen["a"] == 0 || seen["b"] == 0 {
		t.Fatalf("calls reached %v, want both replicas", seen)
	}
}

func TestRunStopsGracefullyThenForcibly(t *testing.T) {
	srv := NewServer(logr.Discard())
	srv.ShutdownTimeout = 200 * time.Millisecond
	testpb.RegisterTestServiceServer(srv, &testService{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, lis) }()

	conn := dial(t, lis.Addr().String())
	// A stream that never ends on its own blocks GracefulStop.
	stream, err := testpb.NewTestServiceClient(conn).FullDuplexCall(callCtx(t))
	if err != nil {
		t.Fatalf("FullDuplexCall: %v", err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatalf("first Recv: %v", err)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run returned %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after ShutdownTimeout")
	}
	if _, err := stream.Recv(); err == nil || errors.Is(err, io.EOF) {
		t.Errorf("stream Recv after forced stop = %v, want an error", err)
	}
	resp, err := srv.Health.Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health after shutdown = %v, %v; want NOT_SERVING", resp.GetStatus(), err)
	}
}

func TestRunReportsListenerFailure(t *testing.T) {
	srv := NewServer(logr.Discard())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis.Close()
	err = srv.Run(context.Background(), lis)
	if err == nil || !strings.Contains(err.Error(), "serve gRPC on 127.0.0.1:") {
		t.Fatalf("Run on a closed listener = %v, want a serve error naming the address", err)
	}
}
