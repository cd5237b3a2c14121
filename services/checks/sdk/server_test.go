package sdk

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
)

// scripted is a Checker whose answer each test sets, and which records
// what reached it.
type scripted struct {
	mu       sync.Mutex
	answer   func(ctx context.Context, req *checksv1.EvaluateRequest) (*checksv1.EvaluateResponse, error)
	release  error
	evals    int
	releases []string
	traceIDs []string
	probe    func() (bool, string, error)
}

func (s *scripted) Evaluate(ctx context.Context, req *checksv1.EvaluateRequest) (*checksv1.EvaluateResponse, error) {
	s.mu.Lock()
	s.evals++
	s.traceIDs = append(s.traceIDs, trace.SpanContextFromContext(ctx).TraceID().String())
	answer := s.answer
	s.mu.Unlock()
	return answer(ctx, req)
}

func (s *scripted) Release(_ context.Context, req *checksv1.ReleaseRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releases = append(s.releases, req.GetEvaluationKey())
	return s.release
}

// probingScripted adds Prober to scripted.
type probingScripted struct{ *scripted }

func (p probingScripted) Probe(context.Context) (bool, string, error) { return p.probe() }

var testInfo = Info{
	Name:          "test.checks.sluice.dev",
	VendorVersion: "v0.0.1",
	Capabilities:  []checksv1.Capability{checksv1.Capability_CAPABILITY_POD_SET_UPDATES},
}

// serve runs a Server for c on 127.0.0.1:0 and returns a connection to it.
// The server stops when the test ends.
func serve(t *testing.T, c Checker, opts ...Option) (*grpc.ClientConn, *Server) {
	t.Helper()
	return serveInfo(t, testInfo, c, opts...)
}

// serveInfo is serve for a provider that describes itself with info.
func serveInfo(t *testing.T, info Info, c Checker, opts ...Option) (*grpc.ClientConn, *Server) {
	t.Helper()
	srv, err := NewServer(info, c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(runOnLoopback(t, srv), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, srv
}

// runOnLoopback serves srv on 127.0.0.1:0 until the test ends, then checks that
// Serve returned nil, and returns its address.
func runOnLoopback(t *testing.T, srv *Server) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve returned %v after shutdown, want nil", err)
		}
	})
	return lis.Addr().String()
}

func request() *checksv1.EvaluateRequest {
	return &checksv1.EvaluateRequest{
		CheckName:     "pool",
		EvaluationKey: "uid-1/res-1",
		Workload: &checksv1.Workload{
			Namespace: "team-a", Name: "pod-a-12345", Uid: "uid-1",
			PodSets: []*checksv1.PodSet{{Name: "main", Count: 1}},
		},
	}
}

func callCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestEvaluate(t *testing.T) {
	validUpdate := &checksv1.PodSetUpdate{Name: "main", NodeSelector: map[string]string{"pool": "a"}}
	tests := []struct {
		name        string
		answer      func(context.Context, *checksv1.EvaluateRequest) (*checksv1.EvaluateResponse, error)
		opts        []Option
		req         *checksv1.EvaluateRequest
		wantCode    codes.Code
		wantMsg     string
		wantState   checksv1.State
		wantReached bool
	}{
		{
			name: "valid answer passes",
			answer: func(context.Context, *checksv1.EvaluateRequest) (*checksv1.EvaluateResponse, error) {
				return Ready(validUpdate), nil
			},
			req: request(), wantCode: codes.OK, wantState: checksv1.State_STATE_READY, wantReached: true,
		},
		{
			name: "missing evaluation key",
			answer: func(context.Context, *checksv1.EvaluateRequest) (*checksv1.EvaluateResponse, error) {
				return Ready(), nil
			},
			req: func() *checksv1.EvaluateRequest {
				r := request()
				r.EvaluationKey = ""
				return r
			}(),
			wantCode: codes.InvalidArgument, wantMsg: "evaluation_key: required",
		},
		{
			name: "missing workload",
			answer: func(context.Context, *checksv1.EvaluateRequest) (*checksv1.EvaluateResponse, error) {
				return Ready(), nil
			},
			req:      &checksv1.EvaluateRequest{EvaluationKey: "k"},
			wantCode: codes.InvalidArgument, wantMsg: "workload: required",
		},
		{
			name: "invalid answer becomes INTERNAL",
			answer: func(context.Context, *checksv1.EvaluateRequest) (*checksv1.EvaluateResponse, error) {
				return Ready(&checksv1.PodSetUpdate{Name: "main", Labels: map[string]string{"sluice.dev/x": "y"}}), nil
			},
			req: request(), wantCode: codes.Internal, wantReached: true,
			wantMsg: `provider test.checks.sluice.dev built an invalid Evaluate response: pod_set_updates[0].labels["sluice.dev/x"]: key is under a reserved prefix`,
		},
		{
			name:   "nil answer becomes INTERNAL",
			answer: func(context.Context, *checksv1.EvaluateRequest) (*checksv1.EvaluateResponse, error) { return nil, nil },
			req:    request(), wantCode: codes.Internal, wantMsg: "Evaluate response is missing", wantReached: true,
		},
		{
			name: "invalid answer passes without validation",
			answer: func(context.Context, *checksv1.EvaluateRequest) (*checksv1.EvaluateResponse, error) {
				return &checksv1.EvaluateResponse{}, nil
			},
			opts: []Option{WithoutResponseValidation()},
			req:  request(), wantCode: codes.OK, wantState: checksv1.State_STATE_UNSPECIFIED, wantReached: true,
		},
		{
			name:   "panic becomes INTERNAL",
			answer: func(context.Context, *checksv1.EvaluateRequest) (*checksv1.EvaluateResponse, error) { panic("boom") },
			req:    request(), wantCode: codes.Internal, wantMsg: "provider test.checks.sluice.dev panicked in Evaluate: boom", wantReached: true,
		},
		{
			name: "status error keeps its code",
			answer: func(context.Context, *checksv1.EvaluateRequest) (*checksv1.EvaluateResponse, error) {
				return nil, InvalidParameter("size", "must be positive")
			},
			req: request(), wantCode: codes.InvalidArgument, wantMsg: "parameters.size: must be positive", wantReached: true,
		},
		{
			name: "plain error becomes UNKNOWN",
			answer: func(context.Context, *checksv1.EvaluateRequest) (*checksv1.EvaluateResponse, error) {
				return nil, errors.New("backend down")
			},
			req: request(), wantCode: codes.Unknown, wantMsg: "Evaluate: backend down", wantReached: true,
		},
		{
			name: "context error becomes DEADLINE_EXCEEDED",
			answer: func(context.Context, *checksv1.EvaluateRequest) (*checksv1.EvaluateResponse, error) {
				return nil, context.DeadlineExceeded
			},
			req: request(), wantCode: codes.DeadlineExceeded, wantReached: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &scripted{answer: tt.answer}
			conn, _ := serve(t, c, tt.opts...)
			resp, err := checksv1.NewCheckServiceClient(conn).Evaluate(callCtx(t), tt.req)
			if got := status.Code(err); got != tt.wantCode {
				t.Fatalf("code = %s (%v), want %s", got, err, tt.wantCode)
			}
			if tt.wantMsg != "" && !strings.Contains(status.Convert(err).Message(), tt.wantMsg) {
				t.Errorf("message %q does not contain %q", status.Convert(err).Message(), tt.wantMsg)
			}
			if err == nil && resp.GetState() != tt.wantState {
				t.Errorf("state = %s, want %s", resp.GetState(), tt.wantState)
			}
			if reached := c.evals > 0; reached != tt.wantReached {
				t.Errorf("checker reached = %v, want %v", reached, tt.wantReached)
			}
		})
	}
}

func TestEvaluateContinuesTrace(t *testing.T) {
	c := &scripted{answer: func(context.Context, *checksv1.EvaluateRequest) (*checksv1.EvaluateResponse, error) {
		return Pending("wait", time.Second), nil
	}}
	conn, _ := serve(t, c)
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	ctx := metadata.AppendToOutgoingContext(callCtx(t), "traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	if _, err := checksv1.NewCheckServiceClient(conn).Evaluate(ctx, request()); err != nil {
		t.Fatal(err)
	}
	if len(c.traceIDs) != 1 || c.traceIDs[0] != traceID {
		t.Fatalf("checker saw trace ids %v, want [%s]", c.traceIDs, traceID)
	}
}

func TestRelease(t *testing.T) {
	tests := []struct {
		name     string
		req      *checksv1.ReleaseRequest
		err      error
		wantCode codes.Code
		wantKeys []string
	}{
		{name: "released", req: &checksv1.ReleaseRequest{EvaluationKey: "k1"}, wantCode: codes.OK, wantKeys: []string{"k1"}},
		{name: "missing key", req: &checksv1.ReleaseRequest{Name: "w"}, wantCode: codes.InvalidArgument},
		{name: "provider error", req: &checksv1.ReleaseRequest{EvaluationKey: "k1"}, err: status.Error(codes.Unavailable, "later"), wantCode: codes.Unavailable, wantKeys: []string{"k1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &scripted{release: tt.err}
			conn, _ := serve(t, c)
			_, err := checksv1.NewCheckServiceClient(conn).Release(callCtx(t), tt.req)
			if got := status.Code(err); got != tt.wantCode {
				t.Fatalf("code = %s (%v), want %s", got, err, tt.wantCode)
			}
			if strings.Join(c.releases, ",") != strings.Join(tt.wantKeys, ",") {
				t.Errorf("released %v, want %v", c.releases, tt.wantKeys)
			}
		})
	}
}

func TestIdentity(t *testing.T) {
	conn, _ := serve(t, &scripted{})
	client := checksv1.NewIdentityServiceClient(conn)
	info, err := client.GetProviderInfo(callCtx(t), &checksv1.GetProviderInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.GetName() != testInfo.Name || info.GetVendorVersion() != "v0.0.1" ||
		len(info.GetContractVersions()) != 1 || info.GetContractVersions()[0] != "sluice.checks.v1" ||
		len(info.GetCapabilities()) != 1 || info.GetCapabilities()[0] != checksv1.Capability_CAPABILITY_POD_SET_UPDATES {
		t.Errorf("GetProviderInfo = %v", info)
	}
	probe, err := client.Probe(callCtx(t), &checksv1.ProbeRequest{})
	if err != nil || !probe.GetReady() {
		t.Errorf("Probe = %v, %v; want ready", probe, err)
	}
	for _, svc := range []string{"", "sluice.checks.v1.IdentityService", "sluice.checks.v1.CheckService"} {
		h, err := healthpb.NewHealthClient(conn).Check(callCtx(t), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health %q = %v, %v; want SERVING", svc, h, err)
		}
	}
}

// TestContractRevision checks the revision GetProviderInfo declares: the
// Info's, or revision 2, whose request rules the Server enforces, when the
// Info leaves it unset. A revision the SDK does not know is sent as it is:
// it may be a later one.
func TestContractRevision(t *testing.T) {
	tests := []struct {
		set, want checksv1.ContractRevision
	}{
		{set: checksv1.ContractRevision_CONTRACT_REVISION_UNSPECIFIED, want: checksv1.ContractRevision_CONTRACT_REVISION_2},
		{set: checksv1.ContractRevision_CONTRACT_REVISION_1, want: checksv1.ContractRevision_CONTRACT_REVISION_1},
		{set: checksv1.ContractRevision_CONTRACT_REVISION_3, want: checksv1.ContractRevision_CONTRACT_REVISION_3},
		{set: 7, want: 7},
	}
	for _, tt := range tests {
		t.Run(tt.set.String(), func(t *testing.T) {
			info := testInfo
			info.ContractRevision = tt.set
			conn, _ := serveInfo(t, info, &scripted{})
			got, err := checksv1.NewIdentityServiceClient(conn).GetProviderInfo(callCtx(t), &checksv1.GetProviderInfoRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if got.GetContractRevision() != tt.want {
				t.Errorf("contract_revision = %s, want %s", got.GetContractRevision(), tt.want)
			}
		})
	}
}

func TestProbe(t *testing.T) {
	tests := []struct {
		name      string
		probe     func() (bool, string, error)
		wantCode  codes.Code
		wantReady bool
		wantMsg   string
	}{
		{name: "starting", probe: func() (bool, string, error) { return false, "loading cache", nil }, wantMsg: "loading cache"},
		{name: "ready", probe: func() (bool, string, error) { return true, "", nil }, wantReady: true},
		{name: "unhealthy", probe: func() (bool, string, error) { return false, "", status.Error(codes.Unavailable, "db down") }, wantCode: codes.Unavailable},
		{name: "panic", probe: func() (bool, string, error) { panic("probe bug") }, wantCode: codes.Internal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn, _ := serve(t, probingScripted{&scripted{probe: tt.probe}})
			resp, err := checksv1.NewIdentityServiceClient(conn).Probe(callCtx(t), &checksv1.ProbeRequest{})
			if status.Code(err) != tt.wantCode {
				t.Fatalf("code = %s (%v), want %s", status.Code(err), err, tt.wantCode)
			}
			if err == nil && (resp.GetReady() != tt.wantReady || resp.GetMessage() != tt.wantMsg) {
				t.Errorf("Probe = %v, want ready=%v message=%q", resp, tt.wantReady, tt.wantMsg)
			}
		})
	}
}

func TestNewServerRefusesBadInfo(t *testing.T) {
	tests := []struct {
		name    string
		info    Info
		checker Checker
		wantErr string
	}{
		{name: "no name", info: Info{}, checker: &scripted{}, wantErr: "name: required"},
		{name: "unspecified capability", info: Info{Name: "a.b", Capabilities: []checksv1.Capability{0}}, checker: &scripted{}, wantErr: "CAPABILITY_UNSPECIFIED"},
		{name: "nil checker", info: testInfo, wantErr: "checker is nil"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewServer(tt.info, tt.checker)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("NewServer error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestRegisterOnOwnServer(t *testing.T) {
	srv, err := NewServer(testInfo, &scripted{answer: func(context.Context, *checksv1.EvaluateRequest) (*checksv1.EvaluateResponse, error) {
		return Rejected("TooBig", "never fits"), nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	srv.Register(gs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := checksv1.NewCheckServiceClient(conn).Evaluate(callCtx(t), request())
	if err != nil || resp.GetState() != checksv1.State_STATE_REJECTED || resp.GetReason() != "TooBig" {
		t.Fatalf("Evaluate = %v, %v; want REJECTED TooBig", resp, err)
	}
}

func TestServeShutsDown(t *testing.T) {
	srv, err := NewServer(testInfo, &scripted{})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve = %v, want nil after cancel", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return within 10s of cancel")
	}
	if err := srv.Serve(context.Background(), lis); err == nil || !strings.Contains(err.Error(), "called twice") {
		t.Fatalf("second Serve = %v, want a 'called twice' error", err)
	}
}
