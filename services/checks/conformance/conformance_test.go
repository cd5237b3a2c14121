package conformance

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/pkg/checkvalidate"
	"github.com/sluice-dev/sluice/services/checks/providers/nodepool"
	"github.com/sluice-dev/sluice/services/checks/sdk/sdktest"
)

// Request rules of the contract, as rawProvider names them.
const (
	ruleKey        = "evaluation_key"
	ruleKeyLength  = "evaluation_key length"
	ruleWorkload   = "workload"
	ruleNamespace  = "workload.namespace"
	ruleName       = "workload.name"
	rulePodSetName = "pod set name"
	ruleUnique     = "unique pod set names"
	ruleReleaseKey = "release evaluation_key"
)

var allRules = []string{ruleKey, ruleKeyLength, ruleWorkload, ruleNamespace, ruleName, rulePodSetName, ruleUnique, ruleReleaseKey}

// defects are the ways rawProvider can break the contract.
type defects struct {
	noContractVersion   bool
	noCapabilities      bool
	neverReady          bool
	flapping            bool // alternates READY and REJECTED for the same request
	unspecifiedState    bool
	accepts             []string // request rules it does not enforce
	releaseUnknownErr   bool
	releaseTwiceErr     bool
	updatesUnadvertised bool // sends updates without advertising the capability
	alwaysPending       bool
	pendingFirst        bool // PENDING on the first call of a key, READY after: slow, not wrong
	keysByReservation   bool // holds licenses by "<uid>/<reservation>", as if the key had no check name
	wireDropsUpdates    bool // what it builds has updates; what reaches the wire has none
	wireDropsFields     bool // ... has updates without node_selector and tolerations
	defaultKeepalive    bool // grpc-go's default enforcement: a ping per 5 minutes, none without calls
	noRevision          bool // declares no contract_revision (revision 1) instead of the latest
}

// rawProvider implements the contract by hand, without the SDK (which
// would refuse to send most of these defects), correctly unless told.
//
// It answers READY with one update per pod set. With a "license"
// parameter it also holds a license per evaluation key, handed out in
// order ("matlab-1", "matlab-2", ...) and named in an annotation; Release
// gives it back. Holding something per key is what makes sharing keys
// between checks visible.
type rawProvider struct {
	checksv1.UnimplementedIdentityServiceServer
	checksv1.UnimplementedCheckServiceServer
	d defects

	mu        sync.Mutex
	evaluated map[string]int
	released  map[string]bool
	licenses  map[string]string // by hold key
	issued    int
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
	if !p.d.noRevision {
		// It keeps every rule: it refuses malformed requests, keys what it
		// holds by the whole key and answers READY whatever it holds.
		info.ContractRevision = checksv1.ContractRevision_CONTRACT_REVISION_3
	}
	return info, nil
}

func (p *rawProvider) Probe(context.Context, *checksv1.ProbeRequest) (*checksv1.ProbeResponse, error) {
	return &checksv1.ProbeResponse{Ready: !p.d.neverReady, Message: "warming up"}, nil
}

// brokenRules lists the request rules req breaks.
func brokenRules(req *checksv1.EvaluateRequest) []string {
	var broken []string
	if req.GetEvaluationKey() == "" {
		broken = append(broken, ruleKey)
	}
	if len(req.GetEvaluationKey()) > checkvalidate.MaxEvaluationKeyBytes {
		broken = append(broken, ruleKeyLength)
	}
	w := req.GetWorkload()
	if w == nil {
		return append(broken, ruleWorkload)
	}
	if w.GetNamespace() == "" {
		broken = append(broken, ruleNamespace)
	}
	if w.GetName() == "" {
		broken = append(broken, ruleName)
	}
	seen := map[string]bool{}
	for _, ps := range w.GetPodSets() {
		switch {
		case ps.GetName() == "":
			broken = append(broken, rulePodSetName)
		case seen[ps.GetName()]:
			broken = append(broken, ruleUnique)
		}
		seen[ps.GetName()] = true
	}
	return broken
}

func (p *rawProvider) refuses(rules ...string) error {
	for _, r := range rules {
		if !slices.Contains(p.d.accepts, r) {
			return status.Errorf(codes.InvalidArgument, "%s: required", r)
		}
	}
	return nil
}

func (p *rawProvider) Evaluate(_ context.Context, req *checksv1.EvaluateRequest) (*checksv1.EvaluateResponse, error) {
	if err := p.refuses(brokenRules(req)...); err != nil {
		return nil, err
	}
	license, err := licenseParam(req.GetParameters())
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.evaluated[req.GetEvaluationKey()]++
	n := p.evaluated[req.GetEvaluationKey()]
	switch {
	case p.d.unspecifiedState:
		return &checksv1.EvaluateResponse{}, nil
	case p.d.alwaysPending, p.d.pendingFirst && n == 1:
		return &checksv1.EvaluateResponse{State: checksv1.State_STATE_PENDING, RetryAfter: durationpb.New(100 * time.Millisecond)}, nil
	case p.d.flapping && n%2 == 0:
		return &checksv1.EvaluateResponse{State: checksv1.State_STATE_REJECTED}, nil
	}
	resp := &checksv1.EvaluateResponse{State: checksv1.State_STATE_READY, Reason: "Fine"}
	if p.d.noCapabilities {
		return resp, nil
	}
	held := ""
	if license != "" {
		held = p.holdLicense(req.GetEvaluationKey(), license)
	}
	for _, ps := range req.GetWorkload().GetPodSets() {
		resp.PodSetUpdates = append(resp.PodSetUpdates, sampleUpdate(ps.GetName(), held))
	}
	return resp, nil
}

func licenseParam(params *structpb.Struct) (string, error) {
	v, ok := params.GetFields()["license"]
	if !ok {
		return "", nil
	}
	if _, isString := v.GetKind().(*structpb.Value_StringValue); !isString {
		return "", status.Error(codes.InvalidArgument, "parameters.license: must be a string")
	}
	return v.GetStringValue(), nil
}

// holdLicense returns the license held for key, handing out the next one
// when none is. p.mu is held.
func (p *rawProvider) holdLicense(key, pool string) string {
	hk := p.holdKey(key)
	if l, ok := p.licenses[hk]; ok {
		return l
	}
	p.issued++
	p.licenses[hk] = fmt.Sprintf("%s-%d", pool, p.issued)
	return p.licenses[hk]
}

// holdKey is what the provider keys its licenses by: the evaluation key,
// or, with keysByReservation, the key without its last part.
func (p *rawProvider) holdKey(key string) string {
	if i := strings.LastIndex(key, "/"); p.d.keysByReservation && i > 0 {
		return key[:i]
	}
	return key
}

func sampleUpdate(podSet, license string) *checksv1.PodSetUpdate {
	u := &checksv1.PodSetUpdate{
		Name:         podSet,
		Labels:       map[string]string{"example.com/checked": "yes"},
		NodeSelector: map[string]string{"pool": "a100"},
		Tolerations: []*checksv1.Toleration{{
			Key: "dedicated", Operator: checksv1.TolerationOperator_TOLERATION_OPERATOR_EQUAL, Value: "a100",
			Effect: checksv1.TaintEffect_TAINT_EFFECT_NO_SCHEDULE,
		}},
	}
	if license != "" {
		u.Annotations = map[string]string{"example.com/license": license}
	}
	return u
}

func (p *rawProvider) Release(_ context.Context, req *checksv1.ReleaseRequest) (*checksv1.ReleaseResponse, error) {
	if req.GetEvaluationKey() == "" {
		if err := p.refuses(ruleReleaseKey); err != nil {
			return nil, err
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.d.releaseUnknownErr && p.evaluated[req.GetEvaluationKey()] == 0 {
		return nil, status.Error(codes.NotFound, "no such evaluation")
	}
	if p.d.releaseTwiceErr && p.released[req.GetEvaluationKey()] {
		return nil, status.Error(codes.FailedPrecondition, "already released")
	}
	p.released[req.GetEvaluationKey()] = true
	delete(p.licenses, p.holdKey(req.GetEvaluationKey()))
	return &checksv1.ReleaseResponse{}, nil
}

// onTheWire changes Evaluate answers after the provider built them, as a
// serialization bug (say, stubs generated from an old .proto) would.
func (d defects) onTheWire() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		out, err := handler(ctx, req)
		resp, ok := out.(*checksv1.EvaluateResponse)
		if err != nil || !ok {
			return out, err
		}
		if d.wireDropsUpdates {
			resp.PodSetUpdates = nil
		}
		for _, u := range resp.GetPodSetUpdates() {
			if d.wireDropsFields {
				u.NodeSelector, u.Tolerations = nil, nil
			}
		}
		return resp, nil
	}
}

// permitKitPings lets the kit's tests ping every 10s, idle or not, like
// the contract's rule does for sluice's 30s.
var permitKitPings = grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true})

// serveGRPC serves register's services on 127.0.0.1:0 and returns a
// client connection made with Dial.
func serveGRPC(t *testing.T, opts []grpc.ServerOption, register func(*grpc.Server)) *grpc.ClientConn {
	t.Helper()
	conn, err := Dial(listenGRPC(t, opts, register))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// listenGRPC serves register's services on 127.0.0.1:0 until the test
// ends and returns the address.
func listenGRPC(t *testing.T, opts []grpc.ServerOption, register func(*grpc.Server)) string {
	t.Helper()
	gs := grpc.NewServer(opts...)
	register(gs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return lis.Addr().String()
}

// startRaw serves a rawProvider with d's defects.
func startRaw(t *testing.T, d defects) *grpc.ClientConn {
	opts, register := rawServer(d)
	return serveGRPC(t, opts, register)
}

// rawServer is how to serve a rawProvider with d's defects.
func rawServer(d defects) ([]grpc.ServerOption, func(*grpc.Server)) {
	p := &rawProvider{d: d, evaluated: map[string]int{}, released: map[string]bool{}, licenses: map[string]string{}}
	opts := []grpc.ServerOption{grpc.UnaryInterceptor(d.onTheWire())}
	if !d.defaultKeepalive {
		opts = append(opts, permitKitPings)
	}
	return opts, func(gs *grpc.Server) {
		checksv1.RegisterIdentityServiceServer(gs, p)
		checksv1.RegisterCheckServiceServer(gs, p)
	}
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

func details(results []Result) map[string]string {
	m := map[string]string{}
	for _, r := range results {
		m[r.Name] = r.Detail
	}
	return m
}

// rawFixtures are what rawProvider must answer: updates for both pod sets
// (no license: the parameters are empty), and INVALID_ARGUMENT for a
// license that is not a string.
const rawFixtures = `{"fixtures": [
  {"name": "ready",
   "parameters": {},
   "workload": {"podSets": [{"name": "driver", "count": 1}, {"name": "workers", "count": 4}]},
   "expect": {"state": "STATE_READY", "reason": "Fine", "podSetUpdates": [
     {"name": "driver", "labels": {"example.com/checked": "yes"}, "nodeSelector": {"pool": "a100"},
      "tolerations": [{"key": "dedicated", "operator": "TOLERATION_OPERATOR_EQUAL", "value": "a100", "effect": "TAINT_EFFECT_NO_SCHEDULE"}]},
     {"name": "workers", "labels": {"example.com/checked": "yes"}, "nodeSelector": {"pool": "a100"},
      "tolerations": [{"key": "dedicated", "value": "a100", "effect": "TAINT_EFFECT_NO_SCHEDULE"}]}]}},
  {"name": "license-not-a-string", "parameters": {"license": 7}, "expect": {"code": "INVALID_ARGUMENT"}}
]}`

var requestCases = map[string]string{
	ruleKey:        "Evaluate/MissingEvaluationKey",
	ruleKeyLength:  "Evaluate/LongEvaluationKey",
	ruleWorkload:   "Evaluate/MissingWorkload",
	ruleNamespace:  "Evaluate/MissingNamespace",
	ruleName:       "Evaluate/MissingName",
	rulePodSetName: "Evaluate/UnnamedPodSet",
	ruleUnique:     "Evaluate/DuplicatePodSet",
	ruleReleaseKey: "Release/MissingEvaluationKey",
}

func TestKitFindsDefects(t *testing.T) {
	fixtures, err := ParseFixtures([]byte(rawFixtures))
	if err != nil {
		t.Fatal(err)
	}
	license, err := structpb.NewStruct(map[string]any{"license": "matlab"})
	if err != nil {
		t.Fatal(err)
	}
	type test struct {
		name        string
		d           defects
		timeout     time.Duration
		wantFailed  []string
		wantWarned  []string
		wantSkipped []string
		wantDetail  map[string][]string // case -> substrings of its detail
	}
	tests := []test{
		{name: "correct provider"},
		{name: "correct provider without capabilities", d: defects{noCapabilities: true},
			wantFailed:  []string{"Fixture/ready"},
			wantSkipped: []string{"Evaluate/PodSetUpdates", "Release/ThenNewReservation"}},
		{name: "correct provider, PENDING first", d: defects{pendingFirst: true}, timeout: 2 * time.Second},
		{name: "wrong contract version", d: defects{noContractVersion: true}, wantFailed: []string{"Identity/GetProviderInfo"},
			wantDetail: map[string][]string{"Identity/GetProviderInfo": {`contract_versions: must include "sluice.checks.v1"`}}},
		{name: "never ready", d: defects{neverReady: true}, wantFailed: []string{"Identity/Probe"}},
		{name: "answer changes", d: defects{flapping: true}, wantFailed: []string{"Evaluate/Repeatable", "Evaluate/TwoChecksOneProvider"},
			wantDetail: map[string][]string{"Evaluate/Repeatable": {"answered STATE_READY, then STATE_REJECTED"}}},
		{name: "unspecified state", d: defects{unspecifiedState: true},
			wantFailed: []string{"Evaluate/AdmittedFirst", "Evaluate/ValidAnswer", "Evaluate/Repeatable", "Evaluate/NewReservation", "Evaluate/TwoChecksOneProvider",
				"Evaluate/PodSetUpdates", "Release/ThenNewReservation", "Fixture/ready"}},
		// The answer syntax holds every revision: the cases of later rules
		// fail for it too.
		{name: "unspecified state, no revision declared", d: defects{unspecifiedState: true, noRevision: true},
			wantFailed: []string{"Evaluate/AdmittedFirst", "Evaluate/ValidAnswer", "Evaluate/Repeatable", "Evaluate/NewReservation", "Evaluate/TwoChecksOneProvider",
				"Evaluate/PodSetUpdates", "Release/ThenNewReservation", "Fixture/ready"}},
		{name: "updates without capability", d: defects{updatesUnadvertised: true},
			wantFailed:  []string{"Evaluate/AdmittedFirst", "Evaluate/ValidAnswer", "Evaluate/Repeatable", "Evaluate/NewReservation", "Evaluate/TwoChecksOneProvider", "Fixture/ready"},
			wantSkipped: []string{"Evaluate/PodSetUpdates", "Release/ThenNewReservation"}},
		{name: "release of unknown key fails", d: defects{releaseUnknownErr: true}, wantFailed: []string{"Release/UnknownKey"}},
		{name: "second release fails", d: defects{releaseTwiceErr: true}, wantFailed: []string{"Release/Twice"}},
		{name: "always pending", d: defects{alwaysPending: true}, timeout: time.Second, wantFailed: []string{"Fixture/ready"},
			wantDetail: map[string][]string{"Fixture/ready": {"state: want STATE_READY, got STATE_PENDING (asked ", "for up to 1s (--timeout)"}}},
		{name: "pod_set_updates lost on the wire", d: defects{wireDropsUpdates: true}, wantFailed: []string{"Fixture/ready"},
			wantDetail: map[string][]string{"Fixture/ready": {`pod_set_updates["driver"]: want an update, got missing`, `pod_set_updates["workers"]: want an update, got missing`}}},
		{name: "node_selector and tolerations lost on the wire", d: defects{wireDropsFields: true}, wantFailed: []string{"Fixture/ready"},
			wantDetail: map[string][]string{"Fixture/ready": {
				`pod_set_updates["driver"].node_selector["pool"]: want "a100", got missing`,
				`pod_set_updates["workers"].tolerations: want [{key:"dedicated" operator:TOLERATION_OPERATOR_EQUAL value:"a100" effect:TAINT_EFFECT_NO_SCHEDULE}], got []`,
			}}},
		{name: "another check's answer for the same reservation", d: defects{keysByReservation: true},
			wantFailed: []string{"Evaluate/TwoChecksOneProvider"},
			wantDetail: map[string][]string{"Evaluate/TwoChecksOneProvider": {`check "conformance-second"`, `after a Release of check "conformance"'s key`, `pod_set_updates["main"].annotations["example.com/license"]: want "matlab-`}}},
		{name: "another check's answer for the same reservation, no revision declared", d: defects{keysByReservation: true, noRevision: true},
			wantWarned: []string{"Evaluate/TwoChecksOneProvider"},
			wantDetail: map[string][]string{"Evaluate/TwoChecksOneProvider": {`after a Release of check "conformance"'s key`,
				"a rule of contract revision 2, and the provider declares revision 1 (contract_revision unset): declare contract_revision CONTRACT_REVISION_2"}}},
		{name: "accepts every malformed request", d: defects{accepts: allRules},
			wantFailed: []string{"Evaluate/MissingEvaluationKey", "Evaluate/MissingWorkload", "Evaluate/LongEvaluationKey", "Evaluate/MissingNamespace", "Evaluate/MissingName",
				"Evaluate/UnnamedPodSet", "Evaluate/DuplicatePodSet", "Release/MissingEvaluationKey"},
			wantDetail: map[string][]string{"Evaluate/MissingNamespace": {"was answered; want INVALID_ARGUMENT"}}},
		// Without a revision only the first release's request rules fail.
		{name: "accepts every malformed request, no revision declared", d: defects{accepts: allRules, noRevision: true},
			wantFailed: []string{"Evaluate/MissingEvaluationKey", "Evaluate/MissingWorkload"},
			wantWarned: []string{"Evaluate/LongEvaluationKey", "Evaluate/MissingNamespace", "Evaluate/MissingName",
				"Evaluate/UnnamedPodSet", "Evaluate/DuplicatePodSet", "Release/MissingEvaluationKey"},
			wantDetail: map[string][]string{"Evaluate/MissingNamespace": {"was answered; want INVALID_ARGUMENT", "a rule of contract revision 2"}}},
	}
	// One provider per request rule it skips: each rule has a case of its own.
	for _, rule := range allRules {
		tests = append(tests, test{name: "accepts requests without " + rule, d: defects{accepts: []string{rule}}, wantFailed: []string{requestCases[rule]}})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn := startRaw(t, tt.d)
			opts := Options{ReadyTimeout: 500 * time.Millisecond, Timeout: tt.timeout, Parameters: license, Fixtures: fixtures}
			results := RunAll(t.Context(), conn, opts)
			if got, want := len(results), len(CaseNames(fixtures...)); got != want {
				t.Fatalf("%d results for %d cases", got, want)
			}
			if got := outcomes(results, Failed); !slices.Equal(got, tt.wantFailed) {
				t.Errorf("failed cases = %v, want %v\n%v", got, tt.wantFailed, results)
			}
			if got := outcomes(results, Warned); !slices.Equal(got, tt.wantWarned) {
				t.Errorf("warned cases = %v, want %v\n%v", got, tt.wantWarned, results)
			}
			// rawProvider does not advertise CAPABILITY_WATCH_CHANGES.
			wantSkipped := slices.Concat(tt.wantSkipped, []string{"WatchChanges/Open", "WatchChanges/PushedKeys", "Keepalive/Soak"})
			if got := outcomes(results, Skipped); !slices.Equal(got, wantSkipped) {
				t.Errorf("skipped cases = %v, want %v", got, wantSkipped)
			}
			for _, r := range results {
				if r.Outcome != Passed && r.Detail == "" {
					t.Errorf("%s: %s without a detail", r.Name, r.Outcome)
				}
			}
			got := details(results)
			for name, wants := range tt.wantDetail {
				for _, w := range wants {
					if !strings.Contains(got[name], w) {
						t.Errorf("%s detail %q does not contain %q", name, got[name], w)
					}
				}
			}
		})
	}
}

func TestSkipReasons(t *testing.T) {
	results := RunAll(t.Context(), startRaw(t, defects{noCapabilities: true}), Options{})
	want := map[string]string{
		"Evaluate/PodSetUpdates":     "does not advertise CAPABILITY_POD_SET_UPDATES",
		"Release/ThenNewReservation": "does not advertise CAPABILITY_RELEASE",
		"WatchChanges/Open":          "does not advertise CAPABILITY_WATCH_CHANGES",
		"WatchChanges/PushedKeys":    "does not advertise CAPABILITY_WATCH_CHANGES",
		"Keepalive/Soak":             "--keepalive-soak",
	}
	got := details(results)
	for name, w := range want {
		if !strings.Contains(got[name], w) {
			t.Errorf("%s skipped with %q, want a reason containing %q", name, got[name], w)
		}
	}
}

// TestEvaluationKeys checks the keys the kit sends: sluice's shape, one
// per check and reservation.
func TestEvaluationKeys(t *testing.T) {
	var mu sync.Mutex
	keys := map[string][]string{} // by check name
	record := grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		// Well-formed requests only: the malformed-request cases send
		// missing and overlong keys on purpose.
		if r, ok := req.(*checksv1.EvaluateRequest); ok && checkvalidate.EvaluateRequest(r) == nil {
			mu.Lock()
			keys[r.GetCheckName()] = append(keys[r.GetCheckName()], r.GetEvaluationKey())
			mu.Unlock()
		}
		return handler(ctx, req)
	})
	p := &rawProvider{evaluated: map[string]int{}, released: map[string]bool{}, licenses: map[string]string{}}
	conn := serveGRPC(t, []grpc.ServerOption{record}, func(gs *grpc.Server) {
		checksv1.RegisterIdentityServiceServer(gs, p)
		checksv1.RegisterCheckServiceServer(gs, p)
	})
	RunAll(t.Context(), conn, Options{CheckName: "pool"})
	if len(keys["pool"]) == 0 || len(keys["pool-second"]) == 0 {
		t.Fatalf("keys by check = %v, want keys for pool and pool-second", keys)
	}
	for check, ks := range keys {
		for _, k := range ks {
			parts := strings.Split(k, "/")
			if len(parts) != 3 || parts[0] == "" || len(parts[1]) != 16 || parts[2] != check {
				t.Errorf("check %s got key %q, want \"<uid>/<16 hex digits>/%s\"", check, k, check)
			}
		}
	}
	for _, k := range keys["pool-second"] {
		if slices.Contains(keys["pool"], k) {
			t.Errorf("key %q was sent for both checks", k)
		}
	}
}

// startNodepool serves the built-in nodepool provider through the SDK.
func startNodepool(t *testing.T) *grpc.ClientConn {
	conn, err := Dial(sdktest.Start(t, nodepool.Info("test"), nodepool.Checker{}))
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

// nodepoolFixtures are what the nodepool check answers.
const nodepoolFixtures = `{"fixtures": [
  {"name": "pool-a100",
   "expect": {"state": "STATE_READY", "reason": "NodePoolAssigned", "podSetUpdates": [
     {"name": "main", "labels": {"nodepool.sluice.dev/pool": "a100"}, "nodeSelector": {"pool": "a100"},
      "tolerations": [{"key": "dedicated", "operator": "TOLERATION_OPERATOR_EQUAL", "value": "a100", "effect": "TAINT_EFFECT_NO_SCHEDULE"}]}]}},
  {"name": "own-check-and-workload",
   "checkName": "pool-v100",
   "parameters": {"nodeLabels": {"pool": "v100"}, "podLabels": {"team": "ml"}},
   "workload": {"namespace": "ml", "podSets": [{"name": "launcher", "count": 1}, {"name": "workers", "count": 8}]},
   "expect": {"state": "STATE_READY", "podSetUpdates": [
     {"name": "launcher", "labels": {"team": "ml"}, "nodeSelector": {"pool": "v100"}},
     {"name": "workers", "labels": {"team": "ml"}, "nodeSelector": {"pool": "v100"}}]}},
  {"name": "without-node-labels", "parameters": {}, "expect": {"code": "INVALID_ARGUMENT"}}
]}`

// TestNodepool runs the kit the way a vendor would, as subtests.
func TestNodepool(t *testing.T) {
	fixtures, err := ParseFixtures([]byte(nodepoolFixtures))
	if err != nil {
		t.Fatal(err)
	}
	Run(t, startNodepool(t), Options{CheckName: "pool-a100", Parameters: nodepoolParams(t), Fixtures: fixtures})
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

// TestResultsStops checks that breaking out of Results stops the run.
func TestResultsStops(t *testing.T) {
	var names []string
	for r := range Results(t.Context(), startRaw(t, defects{}), Options{}) {
		names = append(names, r.Name)
		if len(names) == 2 {
			break
		}
	}
	if want := CaseNames()[:2]; !slices.Equal(names, want) {
		t.Fatalf("results = %v, want %v", names, want)
	}
}
