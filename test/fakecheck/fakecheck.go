// Package fakecheck is a sluice.checks.v1 provider that tests control: it
// serves real gRPC on loopback, answers what the test sets per workload,
// records every call and injects faults:
//   - latency (SetDelay) and errors by code (SetError, or SetErrorCycle for
//     a provider whose calls fail and succeed by turns);
//   - not ready (SetReady);
//   - a provider that goes away: Down stops listening, Up listens again on
//     the same address, and Flap alternates the two; answers, faults and
//     recorded calls outlive both (Stop ends the fake for good);
//   - invalid answers (InvalidAnswers lists one per rule, with the field and
//     rule sluice must name) and conflicting ones (ConflictingReady);
//   - changes pushed on WatchChanges, for a fake that declares
//     CAPABILITY_WATCH_CHANGES (WithCapabilities): Push sends keys on every
//     open stream, DropWatches breaks them, SetWatchRefusal refuses new
//     ones, and WatchOpens counts the streams accepted.
//
// It serves plaintext unless given TLS (WithTLS, WithTLSFiles; LoopbackTLS
// issues a certificate for it).
//
// It is built with the provider SDK but sends answers unvalidated, so tests
// can also make it send what sluice must refuse.
package fakecheck

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/pkg/mtls"
	"github.com/sluice-dev/sluice/services/checks/sdk"
)

// ProviderName is the name the fake gives in GetProviderInfo.
const ProviderName = "fake.checks.sluice.dev"

// DefaultAnswer is what the fake answers for workloads without an answer
// of their own, unless changed: PENDING, reason HeldByTest.
func DefaultAnswer() *checksv1.EvaluateResponse {
	return &checksv1.EvaluateResponse{State: checksv1.State_STATE_PENDING, Reason: "HeldByTest", Message: "held by test"}
}

type options struct {
	addr          string
	down          bool
	caps          []checksv1.Capability
	defaultAnswer *checksv1.EvaluateResponse
	log           logr.Logger
	serverOpts    []sdk.Option
	revision      checksv1.ContractRevision
}

// Option configures Start.
type Option func(*options)

// WithAddr listens on addr instead of 127.0.0.1:0; use a stopped fake's
// Target to restart a provider on the same address.
func WithAddr(addr string) Option { return func(o *options) { o.addr = addr } }

// WithCapabilities replaces the advertised capabilities (default
// POD_SET_UPDATES and RELEASE).
func WithCapabilities(caps ...checksv1.Capability) Option {
	return func(o *options) { o.caps = caps }
}

// WithContractRevision declares rev in GetProviderInfo (default: the
// SDK's, CONTRACT_REVISION_2). Calls records what the admitter sends,
// EvaluateRequest.admitted included.
func WithContractRevision(rev checksv1.ContractRevision) Option {
	return func(o *options) { o.revision = rev }
}

// WithDefaultAnswer sets the answer for workloads without their own.
func WithDefaultAnswer(resp *checksv1.EvaluateResponse) Option {
	return func(o *options) { o.defaultAnswer = resp }
}

// WithLogger logs the fake's server errors to log.
func WithLogger(log logr.Logger) Option { return func(o *options) { o.log = log } }

// WithTLS serves TLS with cfg: its certificate, and, with ClientAuth and
// ClientCAs, mutual TLS. Up serves it again.
func WithTLS(cfg *tls.Config) Option {
	return func(o *options) {
		o.serverOpts = append(o.serverOpts, sdk.WithTransportCredentials(credentials.NewTLS(cfg)))
	}
}

// WithTLSFiles serves TLS from PEM files, as the SDK's WithTLS does: the
// certificate and key, and with a CA file mutual TLS.
func WithTLSFiles(files mtls.Files) Option {
	return func(o *options) { o.serverOpts = append(o.serverOpts, sdk.WithTLS(files)) }
}

// WithDown reserves the fake's address but does not listen on it until Up:
// a provider that is configured but not running. The address is free for
// anyone to take meanwhile, as a real provider's would be.
func WithDown() Option { return func(o *options) { o.down = true } }

type workloadKey struct{ namespace, name string }

// Provider is a fake provider. Its methods are safe for concurrent use.
type Provider struct {
	addr       string   // where the fake listens whenever it serves
	netAddr    net.Addr // addr as its first listener gave it
	caps       []checksv1.Capability
	revision   checksv1.ContractRevision
	log        logr.Logger
	serverOpts []sdk.Option    // TLS, for every server Up starts
	ctx        context.Context // Start's; serving ends with it

	// srvMu guards the serving state; it is never held with mu.
	srvMu   sync.Mutex
	cancel  context.CancelFunc // ends the current server; nil while down
	done    chan error         // the current server's Serve result
	stopped bool               // Stop was called: Up refuses

	mu            sync.Mutex
	defaultAnswer *checksv1.EvaluateResponse
	answers       map[workloadKey]*checksv1.EvaluateResponse
	evalErrs      []codes.Code // cycled through by successive Evaluate calls
	evalN         int          // Evaluate calls since evalErrs was set
	releaseErr    codes.Code
	delay         time.Duration
	ready         bool
	readyMessage  string
	calls         []*checksv1.EvaluateRequest
	releases      []*checksv1.ReleaseRequest
	changed       chan struct{} // closed and replaced on every recorded call
	watches       map[*watchStream]struct{}
	watchOpens    int        // WatchChanges streams accepted
	watchRefused  int        // WatchChanges streams refused
	watchRefusal  codes.Code // codes.OK: accept new streams
}

// Start serves a fake provider until Stop or until ctx ends. With
// WithDown it only reserves its address until Up.
func Start(ctx context.Context, opts ...Option) (*Provider, error) {
	o := options{
		addr:          "127.0.0.1:0",
		caps:          []checksv1.Capability{checksv1.Capability_CAPABILITY_POD_SET_UPDATES, checksv1.Capability_CAPABILITY_RELEASE},
		defaultAnswer: DefaultAnswer(),
		log:           logr.Discard(),
	}
	for _, opt := range opts {
		opt(&o)
	}
	p := &Provider{
		caps:          o.caps,
		revision:      o.revision,
		log:           o.log,
		serverOpts:    o.serverOpts,
		ctx:           ctx,
		defaultAnswer: o.defaultAnswer,
		answers:       map[workloadKey]*checksv1.EvaluateResponse{},
		ready:         true,
		changed:       make(chan struct{}),
		watches:       map[*watchStream]struct{}{},
	}
	lis, err := net.Listen("tcp", o.addr)
	if err != nil {
		return nil, fmt.Errorf("fakecheck: listen on %s: %w", o.addr, err)
	}
	p.netAddr = lis.Addr()
	p.addr = p.netAddr.String()
	if o.down {
		if err := lis.Close(); err != nil {
			return nil, fmt.Errorf("fakecheck: free %s for a provider that starts down: %w", p.addr, err)
		}
		return p, nil
	}
	p.srvMu.Lock()
	defer p.srvMu.Unlock()
	if err := p.serveLocked(lis); err != nil {
		lis.Close()
		return nil, err
	}
	return p, nil
}

// serveLocked starts a server on lis; p.srvMu must be held. The SDK's
// servers serve once, so every Up builds a new one.
func (p *Provider) serveLocked(lis net.Listener) error {
	opts := append([]sdk.Option{
		sdk.WithLogger(p.log), sdk.WithoutResponseValidation(), sdk.WithShutdownTimeout(time.Second),
		sdk.WithServerOptions(grpc.ChainStreamInterceptor(p.watchInterceptor)),
	}, p.serverOpts...)
	srv, err := sdk.NewServer(sdk.Info{Name: ProviderName, VendorVersion: "test", Capabilities: p.caps, ContractRevision: p.revision}, checker{p}, opts...)
	if err != nil {
		return fmt.Errorf("fakecheck: %w", err)
	}
	sctx, cancel := context.WithCancel(p.ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(sctx, lis) }()
	p.cancel, p.done = cancel, done
	return nil
}

// StartT starts a fake for a test and stops it when the test ends.
func StartT(t testing.TB, opts ...Option) *Provider {
	t.Helper()
	p, err := Start(context.Background(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return p
}

// Addr is the address the fake listens on whenever it serves.
func (p *Provider) Addr() net.Addr { return p.netAddr }

// Target is the gRPC target to dial, "127.0.0.1:<port>" (an
// AdmissionCheck's spec.endpoint). It stays the same across Down and Up.
func (p *Provider) Target() string { return p.addr }

// Stop stops serving for good and waits until the server is down. Calls in
// flight are cut off after a second. Stop may be called more than once;
// the fake's records stay readable.
func (p *Provider) Stop() {
	p.srvMu.Lock()
	defer p.srvMu.Unlock()
	p.stopped = true
	p.downLocked()
}

// Down stops serving, as a provider that crashed or was shut down: its
// address refuses connections, and calls in flight are cut off after a
// second. Answers, faults and recorded calls are kept for Up. Down on a
// fake that is down does nothing.
func (p *Provider) Down() {
	p.srvMu.Lock()
	defer p.srvMu.Unlock()
	p.downLocked()
}

func (p *Provider) downLocked() {
	if p.cancel == nil {
		return
	}
	p.cancel()
	if err := <-p.done; err != nil {
		p.log.Error(err, "fakecheck: serving ended with an error", "addr", p.addr)
	}
	p.cancel, p.done = nil, nil
}

// Up serves again on the fake's address, as a provider restarted in place.
// It fails when the fake was stopped, when Start's context ended, or when
// something else took the address meanwhile. Up on a serving fake does
// nothing.
func (p *Provider) Up() error {
	p.srvMu.Lock()
	defer p.srvMu.Unlock()
	switch {
	case p.stopped:
		return fmt.Errorf("fakecheck: up on %s: the fake was stopped", p.addr)
	case p.ctx.Err() != nil:
		return fmt.Errorf("fakecheck: up on %s: %w", p.addr, p.ctx.Err())
	case p.cancel != nil:
		return nil
	}
	lis, err := net.Listen("tcp", p.addr)
	if err != nil {
		return fmt.Errorf("fakecheck: up again on %s: %w", p.addr, err)
	}
	if err := p.serveLocked(lis); err != nil {
		lis.Close()
		return err
	}
	return nil
}

// Serving reports whether the fake listens (it is up and not stopped).
func (p *Provider) Serving() bool {
	p.srvMu.Lock()
	defer p.srvMu.Unlock()
	return p.cancel != nil
}

// Flap takes the fake down and up by turns — up for up, then down for
// down — until ctx ends, and leaves it serving. It starts with the fake's
// current state and returns ctx's end as nil, or Up's error.
func (p *Provider) Flap(ctx context.Context, up, down time.Duration) error {
	if up <= 0 || down <= 0 {
		return fmt.Errorf("fakecheck: flap: up (%s) and down (%s) must be positive", up, down)
	}
	for {
		wait := down
		if p.Serving() {
			wait = up
		}
		select {
		case <-ctx.Done():
			return p.Up()
		case <-time.After(wait):
		}
		if p.Serving() {
			p.Down()
		} else if err := p.Up(); err != nil {
			return fmt.Errorf("fakecheck: flap: %w", err)
		}
	}
}

// SetDefaultAnswer sets the answer for workloads without their own.
func (p *Provider) SetDefaultAnswer(resp *checksv1.EvaluateResponse) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.defaultAnswer = proto.Clone(resp).(*checksv1.EvaluateResponse)
}

// SetAnswer sets the answer for one workload, for every evaluation key.
// resp is sent as it is, even when it breaks the contract.
func (p *Provider) SetAnswer(namespace, name string, resp *checksv1.EvaluateResponse) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.answers[workloadKey{namespace, name}] = proto.Clone(resp).(*checksv1.EvaluateResponse)
}

// ClearAnswer makes the workload get the default answer again.
func (p *Provider) ClearAnswer(namespace, name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.answers, workloadKey{namespace, name})
}

// SetError makes every Evaluate fail with code (codes.OK: answer again).
// The calls are still recorded.
func (p *Provider) SetError(code codes.Code) { p.SetErrorCycle(code) }

// SetErrorCycle makes successive Evaluate calls fail with the codes in
// turn, starting over after the last: the n-th call from now fails with
// seq[n % len(seq)], and codes.OK answers. SetErrorCycle(codes.Unavailable,
// codes.OK) is a provider that fails every other call. No codes: answer
// every call.
func (p *Provider) SetErrorCycle(seq ...codes.Code) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.evalErrs = slices.Clone(seq)
	p.evalN = 0
}

// SetReleaseError makes every Release fail with code (codes.OK: succeed).
func (p *Provider) SetReleaseError(code codes.Code) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.releaseErr = code
}

// SetDelay makes Evaluate wait d before answering (or until the caller's
// deadline, whichever is first).
func (p *Provider) SetDelay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = d
}

// SetReady sets what Probe answers (initially ready).
func (p *Provider) SetReady(ready bool, message string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ready, p.readyMessage = ready, message
}

// Calls returns copies of every Evaluate request that reached the fake,
// oldest first (requests refused as malformed never reach it).
func (p *Provider) Calls() []*checksv1.EvaluateRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*checksv1.EvaluateRequest, len(p.calls))
	for i, c := range p.calls {
		out[i] = proto.Clone(c).(*checksv1.EvaluateRequest)
	}
	return out
}

// EvaluateCount is the number of Evaluate calls for one workload.
func (p *Provider) EvaluateCount(namespace, name string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.calls {
		if c.GetWorkload().GetNamespace() == namespace && c.GetWorkload().GetName() == name {
			n++
		}
	}
	return n
}

// Releases returns copies of every Release request, oldest first.
func (p *Provider) Releases() []*checksv1.ReleaseRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*checksv1.ReleaseRequest, len(p.releases))
	for i, r := range p.releases {
		out[i] = proto.Clone(r).(*checksv1.ReleaseRequest)
	}
	return out
}

// WaitEvaluated waits until the workload was evaluated at least n times,
// or ctx ends.
func (p *Provider) WaitEvaluated(ctx context.Context, namespace, name string, n int) error {
	return p.waitFor(ctx, func() bool { return p.EvaluateCount(namespace, name) >= n },
		func() string { return fmt.Sprintf("%d Evaluate calls for %s/%s", n, namespace, name) })
}

// WaitReleased waits until evaluationKey was released, or ctx ends.
func (p *Provider) WaitReleased(ctx context.Context, evaluationKey string) error {
	return p.waitFor(ctx, func() bool {
		for _, r := range p.Releases() {
			if r.GetEvaluationKey() == evaluationKey {
				return true
			}
		}
		return false
	}, func() string { return fmt.Sprintf("a Release of %q", evaluationKey) })
}

func (p *Provider) waitFor(ctx context.Context, done func() bool, what func() string) error {
	for {
		p.mu.Lock()
		changed := p.changed
		p.mu.Unlock()
		if done() {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("fakecheck: waiting for %s: %w", what(), ctx.Err())
		}
	}
}

// notifyLocked wakes waiters; p.mu must be held.
func (p *Provider) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// checker adapts Provider to sdk.Checker and sdk.Prober.
type checker struct{ p *Provider }

func (c checker) Evaluate(ctx context.Context, req *checksv1.EvaluateRequest) (*checksv1.EvaluateResponse, error) {
	p := c.p
	p.mu.Lock()
	p.calls = append(p.calls, proto.Clone(req).(*checksv1.EvaluateRequest))
	p.notifyLocked()
	delay, code := p.delay, codes.OK
	if len(p.evalErrs) > 0 {
		code = p.evalErrs[p.evalN%len(p.evalErrs)]
		p.evalN++
	}
	answer, ok := p.answers[workloadKey{req.GetWorkload().GetNamespace(), req.GetWorkload().GetName()}]
	if !ok {
		answer = p.defaultAnswer
	}
	answer = proto.Clone(answer).(*checksv1.EvaluateResponse)
	p.mu.Unlock()

	if delay > 0 {
		timer := time.NewTimer(delay)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if code != codes.OK {
		return nil, status.Errorf(code, "fakecheck: injected %s", code)
	}
	return answer, nil
}

func (c checker) Release(_ context.Context, req *checksv1.ReleaseRequest) error {
	p := c.p
	p.mu.Lock()
	defer p.mu.Unlock()
	p.releases = append(p.releases, proto.Clone(req).(*checksv1.ReleaseRequest))
	p.notifyLocked()
	if p.releaseErr != codes.OK {
		return status.Errorf(p.releaseErr, "fakecheck: injected %s", p.releaseErr)
	}
	return nil
}

func (c checker) Probe(context.Context) (bool, string, error) {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	return c.p.ready, c.p.readyMessage, nil
}

var _ sdk.Prober = checker{}
