// Package checks is the admitter's side of sluice.checks.v1: one gRPC
// connection per provider endpoint and transport (plaintext, or TLS with
// the material the AdmissionCheck's spec.tls names), calls bounded by each
// AdmissionCheck's timeout and timed in metrics, and the reading of a
// provider's answer (validated with pkg/checkvalidate) as a check state
// for the workload.
package checks

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/checkvalidate"
	"github.com/sluice-dev/sluice/pkg/rpc"
	"github.com/sluice-dev/sluice/services/admitter/internal/metrics"
)

// Defaults of an AdmissionCheck's spec, applied when a field is unset.
const (
	DefaultTimeout        = 10 * time.Second
	DefaultInitialBackoff = time.Second
	DefaultMaxBackoff     = 5 * time.Minute
)

// Timeout is the per-call deadline of ac.
func Timeout(ac *v1alpha1.AdmissionCheck) time.Duration {
	if ac.Spec.Timeout != nil && ac.Spec.Timeout.Duration > 0 {
		return ac.Spec.Timeout.Duration
	}
	return DefaultTimeout
}

// Backoff is the wait before the attempt-th retry (attempt counts from 0)
// under ac's retry policy: initial x 2^attempt, capped at the maximum.
func Backoff(ac *v1alpha1.AdmissionCheck, attempt int) time.Duration {
	initial, maxWait := DefaultInitialBackoff, DefaultMaxBackoff
	if r := ac.Spec.Retry; r != nil {
		if r.InitialBackoff != nil && r.InitialBackoff.Duration > 0 {
			initial = r.InitialBackoff.Duration
		}
		if r.MaxBackoff != nil && r.MaxBackoff.Duration > 0 {
			maxWait = r.MaxBackoff.Duration
		}
	}
	d := initial
	for i := 0; i < attempt && d < maxWait; i++ {
		d *= 2
	}
	return min(d, maxWait)
}

// MaxBackoff is the longest wait of ac's retry policy.
func MaxBackoff(ac *v1alpha1.AdmissionCheck) time.Duration {
	return Backoff(ac, 64)
}

// Parameters converts ac's spec.parameters for the wire.
func Parameters(ac *v1alpha1.AdmissionCheck) (*structpb.Struct, error) {
	if ac.Spec.Parameters == nil || len(ac.Spec.Parameters.Raw) == 0 {
		return nil, nil
	}
	var m map[string]any
	if err := json.Unmarshal(ac.Spec.Parameters.Raw, &m); err != nil {
		return nil, fmt.Errorf("AdmissionCheck %s spec.parameters: not a JSON object: %w", ac.Name, err)
	}
	s, err := structpb.NewStruct(m)
	if err != nil {
		return nil, fmt.Errorf("AdmissionCheck %s spec.parameters: %w", ac.Name, err)
	}
	return s, nil
}

// DefaultIdleTimeout is how long a provider connection may go unused
// before the pool closes it (see WithIdleTimeout).
const DefaultIdleTimeout = 10 * time.Minute

// maxSweepInterval bounds how long an idle connection outlives its idle
// timeout.
const maxSweepInterval = time.Minute

// errPoolClosed is what calls get after Pool.Close.
var errPoolClosed = status.Error(codes.Unavailable, "checks: the provider connection pool is closed")

// idleTimeoutOption carries WithIdleTimeout's value to NewPool, which takes
// it out of the dial options; it does nothing by itself.
type idleTimeoutOption struct {
	grpc.EmptyDialOption
	d time.Duration
}

// WithIdleTimeout sets how long a provider connection may go without a
// call before the pool closes it and forgets it; the next call to that
// endpoint dials it again. A connection with a call in flight is
// never closed. d <= 0 keeps connections until Pool.Close. The default is
// DefaultIdleTimeout. It takes effect only when passed to NewPool (it is a
// grpc.DialOption so that NewPool keeps its signature).
func WithIdleTimeout(d time.Duration) grpc.DialOption {
	return idleTimeoutOption{d: d}
}

// Pool holds one client connection per provider endpoint and transport,
// dialled on first use: each call resolves the transport its
// AdmissionCheck asks for (see WithSecrets) and uses the connection made
// with exactly that material, so a rotated Secret or a changed spec.tls
// takes effect with the next call. A connection unused for the idle
// timeout is closed and dropped by a background sweep, so connections
// that AdmissionChecks no longer lead to (a check deleted, its
// spec.endpoint or TLS material changed) do not stay open. It is safe for
// concurrent use.
type Pool struct {
	log         logr.Logger
	metrics     *metrics.Metrics
	opts        []grpc.DialOption
	secrets     secretSource
	idleTimeout time.Duration
	now         func() time.Time // the clock; tests replace it

	mu       sync.Mutex
	conns    map[connKey]*poolConn
	closed   bool
	sweeping bool          // the sweep goroutine runs
	stop     chan struct{} // closed by Close to stop the sweep
	swept    sync.WaitGroup
	sweeps   uint64 // sweeps done, for tests
}

// connKey names a pooled connection: the endpoint and the fingerprint of
// the transport material it was dialled with.
type connKey struct {
	endpoint    string
	fingerprint string
}

// poolConn is one connection and its use, guarded by Pool.mu.
type poolConn struct {
	conn *grpc.ClientConn
	// tlsFailures is the latest TLS failure of conn's transports; nil for
	// plaintext.
	tlsFailures *tlsFailures
	inFlight    int       // calls that hold conn
	lastUsed    time.Time // when a call last took or gave back conn
}

// NewPool returns an empty pool. opts are passed to every rpc.Dial, except
// WithIdleTimeout and WithSecrets, which configure the pool.
func NewPool(log logr.Logger, m *metrics.Metrics, opts ...grpc.DialOption) *Pool {
	p := &Pool{
		log:         log,
		metrics:     m,
		idleTimeout: DefaultIdleTimeout,
		now:         time.Now,
		conns:       map[connKey]*poolConn{},
		stop:        make(chan struct{}),
	}
	for _, o := range opts {
		switch o := o.(type) {
		case idleTimeoutOption:
			p.idleTimeout = o.d
		case secretsOption:
			p.secrets = o.source
		default:
			p.opts = append(p.opts, o)
		}
	}
	return p
}

// acquire returns the connection to ac's provider with the transport ac
// asks for, dialling it first, and counts a call in flight on it until
// release.
func (p *Pool) acquire(ctx context.Context, ac *v1alpha1.AdmissionCheck) (*poolConn, error) {
	tr, err := p.secrets.transport(ctx, ac)
	if err != nil {
		return nil, err
	}
	key := connKey{endpoint: ac.Spec.Endpoint, fingerprint: tr.fingerprint()}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errPoolClosed
	}
	pc, ok := p.conns[key]
	if !ok {
		if pc, err = p.dial(key.endpoint, tr); err != nil {
			return nil, err
		}
		p.conns[key] = pc
		p.startSweepLocked()
	}
	pc.inFlight++
	pc.lastUsed = p.now()
	return pc, nil
}

// dial makes a connection to endpoint over tr. It does not connect
// (grpc.NewClient), so the pool may hold its lock meanwhile.
func (p *Pool) dial(endpoint string, tr transport) (*poolConn, error) {
	pc := &poolConn{}
	opts := p.opts
	if !tr.plaintext {
		creds, err := tr.credentials()
		if err != nil {
			return nil, err
		}
		pc.tlsFailures = &tlsFailures{}
		opts = append(slices.Clone(p.opts), grpc.WithTransportCredentials(recordingCredentials{TransportCredentials: creds, failures: pc.tlsFailures}))
	}
	c, err := rpc.Dial(endpoint, p.log.WithValues("endpoint", endpoint, "tls", !tr.plaintext), opts...)
	if err != nil {
		return nil, err
	}
	pc.conn = c
	return pc, nil
}

// explain returns a call's error as a TLSError when the call failed
// because the connection's TLS did: its latest handshake failed, or the
// provider refused it.
func (pc *poolConn) explain(err error) error {
	if err == nil || pc.tlsFailures == nil {
		return err
	}
	if code := status.Code(err); code != codes.Unavailable && code != codes.DeadlineExceeded {
		return err
	}
	if tlsErr := pc.tlsFailures.last(); tlsErr != nil {
		return &TLSError{Reason: v1alpha1.ReasonTLSHandshakeFailed, Err: tlsErr}
	}
	return err
}

// errorCode is a failed call's code for metrics: a TLS failure's reason,
// else the gRPC code.
func errorCode(err error) string {
	if tlsErr, ok := AsTLSError(err); ok {
		return tlsErr.Reason
	}
	return status.Code(err).String()
}

// release ends a call that acquire counted.
func (p *Pool) release(pc *poolConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pc.inFlight--
	pc.lastUsed = p.now()
}

// startSweepLocked starts the sweep goroutine unless it runs or idle
// connections are kept; p.mu must be held.
func (p *Pool) startSweepLocked() {
	if p.sweeping || p.idleTimeout <= 0 {
		return
	}
	p.sweeping = true
	p.swept.Add(1)
	go p.sweepLoop(min(max(p.idleTimeout/2, time.Millisecond), maxSweepInterval))
}

// sweepLoop closes idle connections every interval until Close, or until
// the pool holds no connection (acquire starts it again).
func (p *Pool) sweepLoop(interval time.Duration) {
	defer p.swept.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		if !p.sweep() {
			return
		}
	}
}

// sweep closes and forgets every connection without a call in flight that
// was last used at least the idle timeout ago. It reports whether the
// sweep goroutine should go on; when it should not, it has marked it
// stopped.
func (p *Pool) sweep() bool {
	p.mu.Lock()
	now := p.now()
	var idle []*grpc.ClientConn
	var endpoints []string
	for key, pc := range p.conns {
		if pc.inFlight == 0 && now.Sub(pc.lastUsed) >= p.idleTimeout {
			delete(p.conns, key)
			idle = append(idle, pc.conn)
			endpoints = append(endpoints, key.endpoint)
		}
	}
	p.sweeps++
	goOn := !p.closed && len(p.conns) > 0
	if !goOn {
		p.sweeping = false
	}
	p.mu.Unlock()

	// Out of the map and with no call in flight, no caller holds these.
	for i, c := range idle {
		p.log.V(1).Info("closing idle provider connection", "endpoint", endpoints[i], "idleTimeout", p.idleTimeout.String())
		if err := c.Close(); err != nil {
			p.log.V(1).Info("closing provider connection", "endpoint", endpoints[i], "error", err.Error())
		}
	}
	return goOn
}

// Close stops the sweep and closes every connection, cutting off calls in
// flight. Calls after Close fail with UNAVAILABLE. Close may be called more
// than once.
func (p *Pool) Close() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.stop)
	}
	conns := p.conns
	p.conns = map[connKey]*poolConn{}
	p.mu.Unlock()

	p.swept.Wait()
	for key, pc := range conns {
		if err := pc.conn.Close(); err != nil {
			p.log.V(1).Info("closing provider connection", "endpoint", key.endpoint, "error", err.Error())
		}
	}
}

// call runs fn with ac's deadline and records its latency and failure. The
// connection fn gets is not closed as idle while fn runs. A failure to
// secure the connection is returned as a *TLSError.
func (p *Pool) call(ctx context.Context, ac *v1alpha1.AdmissionCheck, method string, fn func(context.Context, *grpc.ClientConn) error) error {
	pc, err := p.acquire(ctx, ac)
	if err != nil {
		code := "dial"
		if tlsErr, ok := AsTLSError(err); ok {
			code = tlsErr.Reason
		}
		p.metrics.CheckCallErrors.WithLabelValues(ac.Name, method, code).Inc()
		return err
	}
	defer p.release(pc)
	ctx, cancel := context.WithTimeout(ctx, Timeout(ac))
	defer cancel()
	start := time.Now()
	err = pc.explain(fn(ctx, pc.conn))
	p.metrics.CheckCallDuration.WithLabelValues(ac.Name, method).Observe(time.Since(start).Seconds())
	if err != nil {
		p.metrics.CheckCallErrors.WithLabelValues(ac.Name, method, errorCode(err)).Inc()
	}
	return err
}

// Describe asks ac's provider who it is and whether it is ready.
func (p *Pool) Describe(ctx context.Context, ac *v1alpha1.AdmissionCheck) (*checksv1.GetProviderInfoResponse, *checksv1.ProbeResponse, error) {
	var info *checksv1.GetProviderInfoResponse
	err := p.call(ctx, ac, "GetProviderInfo", func(ctx context.Context, c *grpc.ClientConn) error {
		var err error
		info, err = checksv1.NewIdentityServiceClient(c).GetProviderInfo(ctx, &checksv1.GetProviderInfoRequest{})
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("GetProviderInfo: %w", err)
	}
	var probe *checksv1.ProbeResponse
	err = p.call(ctx, ac, "Probe", func(ctx context.Context, c *grpc.ClientConn) error {
		var err error
		probe, err = checksv1.NewIdentityServiceClient(c).Probe(ctx, &checksv1.ProbeRequest{})
		return err
	})
	if err != nil {
		return info, nil, fmt.Errorf("Probe: %w", err)
	}
	return info, probe, nil
}

// Evaluate asks ac's provider for its answer to req.
func (p *Pool) Evaluate(ctx context.Context, ac *v1alpha1.AdmissionCheck, req *checksv1.EvaluateRequest) (*checksv1.EvaluateResponse, error) {
	var resp *checksv1.EvaluateResponse
	err := p.call(ctx, ac, "Evaluate", func(ctx context.Context, c *grpc.ClientConn) error {
		var err error
		resp, err = checksv1.NewCheckServiceClient(c).Evaluate(ctx, req)
		return err
	})
	return resp, err
}

// Release tells ac's provider that the reservation req names is gone.
func (p *Pool) Release(ctx context.Context, ac *v1alpha1.AdmissionCheck, req *checksv1.ReleaseRequest) error {
	return p.call(ctx, ac, "Release", func(ctx context.Context, c *grpc.ClientConn) error {
		_, err := checksv1.NewCheckServiceClient(c).Release(ctx, req)
		return err
	})
}

// Capabilities reads the capabilities recorded in ac's status.
func Capabilities(ac *v1alpha1.AdmissionCheck) []checksv1.Capability {
	if ac.Status.Provider == nil {
		return nil
	}
	var out []checksv1.Capability
	for _, name := range ac.Status.Provider.Capabilities {
		if v, ok := checksv1.Capability_value[name]; ok {
			out = append(out, checksv1.Capability(v))
		}
	}
	return out
}

// LatestRevision is the latest revision of sluice.checks.v1 the admitter
// implements. It is named here rather than read from the generated enum:
// a revision the proto gains is known only once the admitter keeps its
// rules.
const LatestRevision = checksv1.ContractRevision_CONTRACT_REVISION_3

// Revision is the contract revision ac's provider declared, as its status
// records it: 1 when unset (a provider that declares nothing, or a status
// written before revisions existed), and LatestRevision for a revision the
// admitter does not know. The admitter sends a provider no field of a
// later revision than this.
func Revision(ac *v1alpha1.AdmissionCheck) checksv1.ContractRevision {
	if ac == nil || ac.Status.Provider == nil || ac.Status.Provider.ContractRevision <= 0 {
		return checksv1.ContractRevision_CONTRACT_REVISION_1
	}
	return min(checksv1.ContractRevision(ac.Status.Provider.ContractRevision), LatestRevision)
}

// ProviderStatus is what GetProviderInfo and Probe say, as ac's status.
// The contract revision is recorded as declared, 1 when unset; Revision
// caps it at the latest the admitter knows when it is read.
func ProviderStatus(info *checksv1.GetProviderInfoResponse) *v1alpha1.ProviderInfo {
	if info == nil {
		return nil
	}
	out := &v1alpha1.ProviderInfo{
		Name:             info.GetName(),
		Version:          info.GetVendorVersion(),
		ContractVersions: slices.Clone(info.GetContractVersions()),
		ContractRevision: int32(max(info.GetContractRevision(), checksv1.ContractRevision_CONTRACT_REVISION_1)),
	}
	for _, c := range info.GetCapabilities() {
		if c != checksv1.Capability_CAPABILITY_UNSPECIFIED {
			out.Capabilities = append(out.Capabilities, c.String())
		}
	}
	return out
}

// Activity decides ac's Active condition from a Describe result: reason
// and message, and whether the provider is active. A TLS failure gives its
// own reason (v1alpha1.ReasonTLSConfigInvalid, ReasonTLSHandshakeFailed).
func Activity(info *checksv1.GetProviderInfoResponse, probe *checksv1.ProbeResponse, err error) (active bool, reason, message string) {
	tlsErr, isTLS := AsTLSError(err)
	switch {
	case isTLS:
		return false, tlsErr.Reason, tlsErr.Error()
	case info == nil:
		return false, "ProviderUnreachable", fmt.Sprintf("the provider did not answer: %v", err)
	case checkvalidate.ProviderInfo(info) != nil:
		return false, "InvalidProviderInfo", fmt.Sprintf("the provider's GetProviderInfo answer is invalid: %v", checkvalidate.ProviderInfo(info))
	case err != nil:
		return false, "ProbeFailed", fmt.Sprintf("the provider's probe failed: %v", err)
	case !probe.GetReady():
		msg := probe.GetMessage()
		if msg == "" {
			msg = "no reason given"
		}
		return false, "ProviderNotReady", "the provider is not ready: " + msg
	default:
		return true, "ProviderReady", fmt.Sprintf("provider %s %s speaks %s", info.GetName(), info.GetVendorVersion(), checkvalidate.ContractVersion)
	}
}
