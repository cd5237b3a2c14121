// Package fakecheck is a sluice.checks.v1 provider that tests control: it
// serves real gRPC on loopback, answers what the test sets per workload,
// records every call and injects faults (errors, delays, not ready). It is
// built with the provider SDK but sends answers unvalidated, so tests can
// also make it send what sluice must refuse.
package fakecheck

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
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
	caps          []checksv1.Capability
	defaultAnswer *checksv1.EvaluateResponse
	log           logr.Logger
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

// WithDefaultAnswer sets the answer for workloads without their own.
func WithDefaultAnswer(resp *checksv1.EvaluateResponse) Option {
	return func(o *options) { o.defaultAnswer = resp }
}

// WithLogger logs the fake's server errors to log.
func WithLogger(log logr.Logger) Option { return func(o *options) { o.log = log } }

type workloadKey struct{ namespace, name string }

// Provider is a running fake provider. Its methods are safe for
// concurrent use.
type Provider struct {
	lis    net.Listener
	cancel context.CancelFunc
	done   chan error
	stop   sync.Once

	mu            sync.Mutex
	defaultAnswer *checksv1.EvaluateResponse
	answers       map[workloadKey]*checksv1.EvaluateResponse
	evalErr       codes.Code
	releaseErr    codes.Code
	delay         time.Duration
	ready         bool
	readyMessage  string
	calls         []*checksv1.EvaluateRequest
	releases      []*checksv1.ReleaseRequest
	changed       chan struct{} // closed and replaced on every recorded call
}

// Start serves a fake provider until Stop or until ctx ends.
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
		defaultAnswer: o.defaultAnswer,
		answers:       map[workloadKey]*checksv1.EvaluateResponse{},
		ready:         true,
		changed:       make(chan struct{}),
		done:          make(chan error, 1),
	}
	srv, err := sdk.NewServer(sdk.Info{Name: ProviderName, VendorVersion: "test", Capabilities: o.caps}, checker{p},
		sdk.WithLogger(o.log), sdk.WithoutResponseValidation(), sdk.WithShutdownTimeout(time.Second))
	if err != nil {
		return nil, fmt.Errorf("fakecheck: %w", err)
	}
	p.lis, err = net.Listen("tcp", o.addr)
	if err != nil {
		return nil, fmt.Errorf("fakecheck: listen on %s: %w", o.addr, err)
	}
	sctx, cancel := context.WithCancel(ctx)
	p.cancel = cancel
	go func() { p.done <- srv.Serve(sctx, p.lis) }()
	return p, nil
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

// Addr is the address the fake listens on.
func (p *Provider) Addr() net.Addr { return p.lis.Addr() }

// Target is the gRPC target to dial, "127.0.0.1:<port>" (an
// AdmissionCheck's spec.endpoint).
func (p *Provider) Target() string { return p.lis.Addr().String() }

// Stop stops serving and waits until the server is down. Calls in flight
// are cut off after a second. Stop may be called more than once.
func (p *Provider) Stop() {
	p.stop.Do(func() {
		p.cancel()
		<-p.done
	})
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
func (p *Provider) SetError(code codes.Code) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.evalErr = code
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
	delay, code := p.delay, p.evalErr
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
