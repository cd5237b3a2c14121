package conformance

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/services/checks/sdk"
	"github.com/sluice-dev/sluice/services/checks/sdk/sdktest"
)

// firstRelease is a provider written against the first release of the
// contract, on the generated server stubs alone: it refuses what the
// first release required (an Evaluate without evaluation_key or
// workload), answers READY to anything else, releases anything, and
// declares the revision it is given (unset, as such a provider does).
type firstRelease struct {
	checksv1.UnimplementedIdentityServiceServer
	checksv1.UnimplementedCheckServiceServer
	declares checksv1.ContractRevision
}

func (p firstRelease) GetProviderInfo(context.Context, *checksv1.GetProviderInfoRequest) (*checksv1.GetProviderInfoResponse, error) {
	return &checksv1.GetProviderInfoResponse{
		Name:             "first.checks.example.com",
		ContractVersions: []string{"sluice.checks.v1"},
		ContractRevision: p.declares,
	}, nil
}

func (firstRelease) Probe(context.Context, *checksv1.ProbeRequest) (*checksv1.ProbeResponse, error) {
	return &checksv1.ProbeResponse{Ready: true}, nil
}

func (firstRelease) Evaluate(_ context.Context, req *checksv1.EvaluateRequest) (*checksv1.EvaluateResponse, error) {
	if req.GetEvaluationKey() == "" || req.GetWorkload() == nil {
		return nil, status.Error(codes.InvalidArgument, "evaluation_key and workload are required")
	}
	return &checksv1.EvaluateResponse{State: checksv1.State_STATE_READY}, nil
}

func (firstRelease) Release(context.Context, *checksv1.ReleaseRequest) (*checksv1.ReleaseResponse, error) {
	return &checksv1.ReleaseResponse{}, nil
}

func startFirstRelease(t *testing.T, declares checksv1.ContractRevision) *grpc.ClientConn {
	t.Helper()
	p := firstRelease{declares: declares}
	return serveGRPC(t, []grpc.ServerOption{permitKitPings}, func(gs *grpc.Server) {
		checksv1.RegisterIdentityServiceServer(gs, p)
		checksv1.RegisterCheckServiceServer(gs, p)
	})
}

// revision2Cases are the cases of the request rules revision 2 brought,
// which firstRelease does not keep.
var revision2Cases = []string{"Evaluate/LongEvaluationKey", "Evaluate/MissingNamespace", "Evaluate/MissingName",
	"Evaluate/UnnamedPodSet", "Evaluate/DuplicatePodSet", "Release/MissingEvaluationKey"}

// TestFirstReleaseProvider checks that a released contract never fails a
// provider written against it: the rules of later revisions it breaks are
// warnings, until it declares a revision that has them.
func TestFirstReleaseProvider(t *testing.T) {
	tests := []struct {
		name       string
		declares   checksv1.ContractRevision
		wantFailed []string
		wantWarned []string
		wantDetail string // in every warning
	}{
		{name: "unset", wantWarned: revision2Cases,
			wantDetail: "a rule of contract revision 2, and the provider declares revision 1 (contract_revision unset): declare contract_revision CONTRACT_REVISION_2"},
		{name: "revision 1", declares: checksv1.ContractRevision_CONTRACT_REVISION_1, wantWarned: revision2Cases,
			wantDetail: "the provider declares revision 1 (CONTRACT_REVISION_1): declare contract_revision CONTRACT_REVISION_2"},
		{name: "revision 2", declares: checksv1.ContractRevision_CONTRACT_REVISION_2, wantFailed: revision2Cases},
		{name: "revision 3", declares: checksv1.ContractRevision_CONTRACT_REVISION_3, wantFailed: revision2Cases},
		{name: "a revision the kit does not know counts as the latest", declares: 99, wantFailed: revision2Cases},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			results := RunAll(t.Context(), startFirstRelease(t, tt.declares), Options{})
			if got := outcomes(results, Failed); !slices.Equal(got, tt.wantFailed) {
				t.Errorf("failed cases = %v, want %v\n%v", got, tt.wantFailed, results)
			}
			if got := outcomes(results, Warned); !slices.Equal(got, tt.wantWarned) {
				t.Errorf("warned cases = %v, want %v\n%v", got, tt.wantWarned, results)
			}
			for _, r := range results {
				if r.Outcome == Warned && !strings.Contains(r.Detail, tt.wantDetail) {
					t.Errorf("%s warned with %q, want a detail containing %q", r.Name, r.Detail, tt.wantDetail)
				}
			}
		})
	}
}

// TestRunWarnsWithoutFailing runs the kit as subtests against the first
// release's provider: its warnings must not fail the test.
func TestRunWarnsWithoutFailing(t *testing.T) {
	Run(t, startFirstRelease(t, checksv1.ContractRevision_CONTRACT_REVISION_UNSPECIFIED), Options{})
}

// capacityChecker holds one of capacity slots per evaluation key and
// answers RETRY to a new key when none is free: in arrival order.
type capacityChecker struct {
	capacity int

	mu     sync.Mutex
	held   map[string]bool // whether admitted, by the keys holding a slot
	bumped map[string]bool // keys whose slot went to an admitted evaluation
	// giveWay, when set, makes room for an admitted evaluation: it takes
	// the slot of one that is not admitted, whose answer turns RETRY, and
	// pushes that key. c.mu is held.
	giveWay func(admitted string) bool
}

func newCapacityChecker(capacity int) *capacityChecker {
	return &capacityChecker{capacity: capacity, held: map[string]bool{}, bumped: map[string]bool{}}
}

func (c *capacityChecker) Evaluate(_ context.Context, req *checksv1.EvaluateRequest) (*checksv1.EvaluateResponse, error) {
	key := req.GetEvaluationKey()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bumped[key] {
		return sdk.Retry("gave way to an admitted workload", time.Minute), nil
	}
	if admitted, ok := c.held[key]; ok {
		c.held[key] = admitted || req.GetAdmitted()
		return sdk.Ready(), nil
	}
	if len(c.held) < c.capacity || (req.GetAdmitted() && c.giveWay != nil && c.giveWay(key)) {
		c.held[key] = req.GetAdmitted()
		return sdk.Ready(), nil
	}
	return sdk.Retry("no capacity left", time.Minute), nil
}

func (c *capacityChecker) Release(_ context.Context, req *checksv1.ReleaseRequest) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.held, req.GetEvaluationKey())
	delete(c.bumped, req.GetEvaluationKey())
	return nil
}

// admittedFirst is a capacityChecker that counts admitted evaluations
// first, as revision 3 asks.
type admittedFirst struct{ *capacityChecker }

func (a admittedFirst) SetNotifier(n sdk.Notifier) {
	a.giveWay = func(string) bool {
		for k, admitted := range a.held {
			if !admitted {
				delete(a.held, k)
				a.bumped[k] = true
				_ = n.Changed(k) // never blocks
				return true
			}
		}
		return false
	}
}

// TestAdmittedFirst runs the kit against providers of capacity 2: one
// that counts admitted evaluations first keeps the rule of
// EvaluateRequest.admitted; one that serves in arrival order breaks it,
// which fails it when it declares revision 3 and warns when it declares 2.
func TestAdmittedFirst(t *testing.T) {
	release := []checksv1.Capability{checksv1.Capability_CAPABILITY_RELEASE}
	watch := append(release, checksv1.Capability_CAPABILITY_WATCH_CHANGES)
	tests := []struct {
		name          string
		admittedFirst bool
		info          sdk.Info
		wantOutcome   Outcome
		wantDetail    []string
	}{
		{name: "admitted first, revision 3", admittedFirst: true,
			info: sdk.Info{Capabilities: watch, ContractRevision: checksv1.ContractRevision_CONTRACT_REVISION_3}, wantOutcome: Passed},
		{name: "arrival order, revision 3",
			info: sdk.Info{Capabilities: release, ContractRevision: checksv1.ContractRevision_CONTRACT_REVISION_3}, wantOutcome: Failed,
			wantDetail: []string{"was answered STATE_READY under key", "and STATE_RETRY under key",
				"after 3 evaluations of it not admitted (admitted=false; the last answered STATE_RETRY)", "(EvaluateRequest.admitted)"}},
		{name: "arrival order, revision 2 (the SDK's default)",
			info: sdk.Info{Capabilities: release}, wantOutcome: Warned,
			wantDetail: []string{"and STATE_RETRY under key", "a rule of contract revision 3, and the provider declares revision 2 (CONTRACT_REVISION_2): declare contract_revision CONTRACT_REVISION_3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCapacityChecker(2)
			var checker sdk.Checker = c
			if tt.admittedFirst {
				checker = admittedFirst{c}
			}
			tt.info.Name = "capacity.checks.example.com"
			conn, err := Dial(sdktest.Start(t, tt.info, checker))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			var results []Result
			for r := range Results(t.Context(), conn, Options{WatchIdle: 100 * time.Millisecond}) {
				results = append(results, r)
				if r.Name != "Evaluate/AdmittedFirst" {
					continue
				}
				if r.Outcome != tt.wantOutcome {
					t.Errorf("Evaluate/AdmittedFirst = %s %q, want %s", r.Outcome, r.Detail, tt.wantOutcome)
				}
				for _, w := range tt.wantDetail {
					if !strings.Contains(r.Detail, w) {
						t.Errorf("Evaluate/AdmittedFirst detail %q does not contain %q", r.Detail, w)
					}
				}
				// Results yields before the next case runs: the case
				// released every key it used, so the later cases find
				// the capacity free.
				c.mu.Lock()
				if len(c.held) > 0 || len(c.bumped) > 0 {
					t.Errorf("after Evaluate/AdmittedFirst the provider holds %v (gave way: %v), want nothing", c.held, c.bumped)
				}
				c.mu.Unlock()
			}
			if !slices.ContainsFunc(results, func(r Result) bool { return r.Name == "Evaluate/AdmittedFirst" }) {
				t.Fatalf("no Evaluate/AdmittedFirst result: %v", results)
			}
			// Every other case passes: RETRY for want of capacity is a
			// valid answer.
			for _, r := range results {
				if r.Name != "Evaluate/AdmittedFirst" && (r.Outcome == Failed || r.Outcome == Warned) {
					t.Errorf("%s = %s %q, want no failure or warning", r.Name, r.Outcome, r.Detail)
				}
			}
		})
	}
}
