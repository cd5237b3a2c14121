package conformance

import (
	"context"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/services/checks/providers/nodepool"
	"github.com/sluice-dev/sluice/services/checks/sdk"
)

// defects are the ways rawProvider can break the contract.
type defects struct {
	noContractVersion   bool
	noCapabilities      bool
	neverReady          bool
	noHealth            bool
	flapping            bool // alternates READY and REJECTED for the same request
	unspecifiedState    bool
	acceptsBadRequests  bool // answers requests without evaluation_key or workload
	releaseUnknownErr   bool
	releaseTwiceErr     bool
	updatesUnadvertised bool // sends updates without advertising the capability
}

// rawProvider implements the contract by hand, without the SDK (which
// would refuse to send most of these defects), correctly unless told.
type rawProvider struct {
	checksv1.UnimplementedIdentityServiceServer
	checksv1.UnimplementedCheckServiceServer
	d defects

	mu        sync.Mutex
	evaluated map[string]int
	released  map[string]bool
}

func (p *rawProvider) GetProviderInfo(context.Context, *checksv1.GetProviderInfoRequest) (*checksv1.GetProviderInfoResponse, error) {
	info := &checksv1.GetProviderInfoResponse{
		Name:             "raw.checks.example.com",
		ContractVersions: []string{"sluice.checks.v1"},
		Capabilities:     []checksv1.Capability{checksv1.Capability_CAPABILITY_POD_SET_UPDATES, checksv1.Capability_CAPABILITY_RELEASE},
	}
	if p.d.noContractVersion {
		info.ContractVersions = []string{"sluice.checks.v0"}
	}
	if p.d.noCapabilities || p.d.updatesUnadvertised {
		info.Capabilities = nil
	}
	return info, nil
}

func (p *rawProvider) Probe(context.Context, *checksv1.ProbeRequest) (*checksv1.ProbeResponse, error) {
	return &checksv1.ProbeResponse{Ready: !p.d.neverReady, Message: "warming up"}, nil
}

func (p *rawProvider) Evaluate(_ context.Context, req *checksv1.EvaluateRequest) (*checksv1.EvaluateResponse, error) {
	if !p.d.acceptsBadRequests && (req.GetEvaluationKey() == "" || req.GetWorkload() == nil) {
		return nil, status.Error(codes.InvalidArgument, "evaluation_key and workload are required")
	}
	p.mu.Lock()
	p.evaluated[req.GetEvaluationKey()]++
	n := p.evaluated[req.GetEvaluationKey()]
	p.mu.Unlock()
	switch {
	case p.d.unspecifiedState:
		return &checksv1.EvaluateResponse{}, nil
	case p.d.flapping && n%2 == 0:
		return &checksv1.EvaluateResponse{State: checksv1.State_STATE_REJECTED}, nil
	}
	resp := &checksv1.EvaluateResponse{State: checksv1.State_STATE_READY, Reason: "Fine"}
	if !p.d.noCapabilities {
		for _, ps := range req.GetWorkload().GetPodSets() {
			resp.PodSetUpdates = append(resp.PodSetUpdates, &checksv1.PodSetUpdate{Name: ps.GetName(), Labels: map[string]string{"example.com/checked": "yes"}})
		}
	}
	return resp, nil
}

func (p *rawProvider) Release(_ context.Context, req *checksv1.ReleaseRequest) (*checksv1.ReleaseResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.d.releaseUnknownErr && p.evaluated[req.GetEvaluationKey()] == 0 {
		return nil, status.Error(codes.NotFound, "no such evaluation")
	}
	if p.d.releaseTwiceErr && p.released[req.GetEvaluationKey()] {
		return nil, status.Error(codes.FailedPrecondition, "already released")
	}
	p.released[req.GetEvaluationKey()] = true
	return &checksv1.ReleaseResponse{}, nil
}

// serveGRPC serves register's services on 127.0.0.1:0 and returns a
// client connection made with Dial.
func serveGRPC(t *testing.T, register func(*grpc.Server)) *grpc.ClientConn {
	t.Helper()
	gs := grpc.NewServer()
	register(gs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	conn, err := Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func startRaw(t *testing.T, d defects) *grpc.ClientConn {
	p := &rawProvider{d: d, evaluated: map[string]int{}, released: map[string]bool{}}
	return serveGRPC(t, func(gs *grpc.Server) {
		checksv1.RegisterIdentityServiceServer(gs, p)
		checksv1.RegisterCheckServiceServer(gs, p)
		if !d.noHealth {
			healthpb.RegisterHealthServer(gs, health.NewServer())
		}
	})
}

func outcomes(results []Result, o Outcome) []string {
	var names []string
	for _, r := range results {
		if r.Outcome == o {
			names = append(names, r.Name)
		}
	}
	return names
}

func TestKitFindsDefects(t *testing.T) {
	tests := []struct {
		name        string
		d           defects
		wantFailed  []string
		wantSkipped []string
	}{
		{name: "correct provider"},
		{name: "correct provider without capabilities", d: defects{noCapabilities: true},
			wantSkipped: []string{"Evaluate/PodSetUpdates", "Release/ThenNewReservation"}},
		{name: "wrong contract version", d: defects{noContractVersion: true}, wantFailed: []string{"Identity/GetProviderInfo"}},
		{name: "never ready", d: defects{neverReady: true}, wantFailed: []string{"Identity/Probe"}},
		{name: "no health service", d: defects{noHealth: true}, wantFailed: []string{"Health/Serving"}},
		{name: "answer changes", d: defects{flapping: true}, wantFailed: []string{"Evaluate/Repeatable"}},
		{name: "accepts bad requests", d: defects{acceptsBadRequests: true},
			wantFailed: []string{"Evaluate/MissingEvaluationKey", "Evaluate/MissingWorkload"}},
		{name: "unspecified state", d: defects{unspecifiedState: true},
			wantFailed: []string{"Evaluate/ValidAnswer", "Evaluate/Repeatable", "Evaluate/NewReservation", "Evaluate/PodSetUpdates", "Release/ThenNewReservation"}},
		{name: "updates without capability", d: defects{updatesUnadvertised: true},
			wantFailed:  []string{"Evaluate/ValidAnswer", "Evaluate/Repeatable", "Evaluate/NewReservation"},
			wantSkipped: []string{"Evaluate/PodSetUpdates", "Release/ThenNewReservation"}},
		{name: "release of unknown key fails", d: defects{releaseUnknownErr: true}, wantFailed: []string{"Release/UnknownKey"}},
		{name: "second release fails", d: defects{releaseTwiceErr: true}, wantFailed: []string{"Release/Twice"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn := startRaw(t, tt.d)
			results := RunAll(t.Context(), conn, Options{ReadyTimeout: 500 * time.Millisecond})
			if len(results) != len(CaseNames()) {
				t.Fatalf("%d results for %d cases", len(results), len(CaseNames()))
			}
			if got := outcomes(results, Failed); !slices.Equal(got, tt.wantFailed) {
				t.Errorf("failed cases = %v, want %v\n%v", got, tt.wantFailed, results)
			}
			if got := outcomes(results, Skipped); !slices.Equal(got, tt.wantSkipped) {
				t.Errorf("skipped cases = %v, want %v", got, tt.wantSkipped)
			}
			for _, r := range results {
				if r.Outcome == Skipped && !strings.Contains(r.Detail, "does not advertise") {
					t.Errorf("%s skipped without a reason naming the capability: %q", r.Name, r.Detail)
				}
				if r.Outcome == Failed && r.Detail == "" {
					t.Errorf("%s failed without a detail", r.Name)
				}
			}
		})
	}
}

func TestFailureDetails(t *testing.T) {
	conn := startRaw(t, defects{noContractVersion: true, flapping: true})
	results := RunAll(t.Context(), conn, Options{})
	details := map[string]string{}
	for _, r := range results {
		details[r.Name] = r.Detail
	}
	for name, want := range map[string]string{
		"Identity/GetProviderInfo": `contract_versions: must include "sluice.checks.v1"`,
		"Evaluate/Repeatable":      "answered STATE_READY, then STATE_REJECTED",
	} {
		if !strings.Contains(details[name], want) {
			t.Errorf("%s detail %q does not contain %q", name, details[name], want)
		}
	}
}

// startNodepool serves the built-in nodepool provider through the SDK.
func startNodepool(t *testing.T) *grpc.ClientConn {
	srv, err := sdk.NewServer(nodepool.Info("test"), nodepool.Checker{})
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
	t.Cleanup(func() {
		cancel()
		<-done
	})
	conn, err := Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func nodepoolParams(t *testing.T) *structpb.Struct {
	s, err := structpb.NewStruct(map[string]any{
		"nodeLabels": map[string]any{"pool": "a100"},
		"taint":      map[string]any{"key": "dedicated", "value": "a100", "effect": "NoSchedule"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestNodepool runs the kit the way a vendor would, as subtests.
func TestNodepool(t *testing.T) {
	Run(t, startNodepool(t), Options{CheckName: "pool-a100", Parameters: nodepoolParams(t)})
}

func TestNodepoolWithoutParameters(t *testing.T) {
	results := RunAll(t.Context(), startNodepool(t), Options{})
	for _, r := range results {
		if r.Name == "Evaluate/ValidAnswer" {
			if r.Outcome != Failed || !strings.Contains(r.Detail, "parameters.nodeLabels: required") || !strings.Contains(r.Detail, "--parameters") {
				t.Errorf("ValidAnswer = %s %q, want a failure naming parameters.nodeLabels and --parameters", r.Outcome, r.Detail)
			}
			return
		}
	}
	t.Fatal("no Evaluate/ValidAnswer result")
}
