package checks

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/services/admitter/internal/metrics"
	"github.com/sluice-dev/sluice/test/fakecheck"
)

// testIdleTimeout is the idle timeout of the pools under test.
const testIdleTimeout = 50 * time.Millisecond

// waitTimeout bounds every wait for a condition.
const waitTimeout = 10 * time.Second

func newTestPool(t *testing.T, opts ...grpc.DialOption) *Pool {
	t.Helper()
	m, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	p := NewPool(logr.Discard(), m, opts...)
	t.Cleanup(p.Close)
	return p
}

func checkFor(endpoint string) *v1alpha1.AdmissionCheck {
	ac := &v1alpha1.AdmissionCheck{ObjectMeta: metav1.ObjectMeta{Name: "c"}}
	ac.Spec.Endpoint = endpoint
	return ac
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

// entry is what the pool holds for the plaintext endpoint.
func entry(p *Pool, endpoint string) (conn *grpc.ClientConn, inFlight int, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pc, ok := p.conns[connKey{endpoint: endpoint, fingerprint: plaintextFingerprint}]
	if !ok {
		return nil, 0, false
	}
	return pc.conn, pc.inFlight, true
}

func sweeps(p *Pool) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sweeps
}

// waitFor polls cond until it holds, failing the test after waitTimeout.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", waitTimeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitSweeps waits until the pool swept n more times; every one of those
// sweeps started after waitSweeps was called.
func waitSweeps(t *testing.T, p *Pool, n uint64) {
	t.Helper()
	start := sweeps(p)
	waitFor(t, "the pool to sweep", func() bool { return sweeps(p) >= start+n })
}

// sweepRunning reports whether a sweep goroutine of any pool is alive.
func sweepRunning() bool {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Contains(string(buf[:n]), "(*Pool).sweepLoop")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// fakeClock is a clock that moves only when told to.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// gate holds client calls of one method before they are sent, until open.
type gate struct {
	method  string
	entered chan struct{}
	opened  chan struct{}
}

func newGate(method string) *gate {
	return &gate{method: method, entered: make(chan struct{}, 1), opened: make(chan struct{})}
}

func (g *gate) open() { close(g.opened) }

func (g *gate) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if method == g.method {
		select {
		case g.entered <- struct{}{}:
		default:
		}
		select {
		case <-g.opened:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// connRecorder records the connection of every client call.
type connRecorder struct {
	mu   sync.Mutex
	conn *grpc.ClientConn
}

func (r *connRecorder) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	r.mu.Lock()
	r.conn = cc
	r.mu.Unlock()
	return invoker(ctx, method, req, reply, cc, opts...)
}

// last is the connection of the latest call.
func (r *connRecorder) last() *grpc.ClientConn {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.conn
}

// poolCall is one of the pool's calls against the fake provider.
type poolCall struct {
	name string
	// methods are the gRPC methods the call makes.
	methods []string
	call    func(ctx context.Context, p *Pool, ac *v1alpha1.AdmissionCheck) error
}

var poolCalls = []poolCall{
	{name: "Evaluate", methods: []string{checksv1.CheckService_Evaluate_FullMethodName},
		call: func(ctx context.Context, p *Pool, ac *v1alpha1.AdmissionCheck) error {
			_, err := p.Evaluate(ctx, ac, request())
			return err
		}},
	{name: "Release", methods: []string{checksv1.CheckService_Release_FullMethodName},
		call: func(ctx context.Context, p *Pool, ac *v1alpha1.AdmissionCheck) error {
			return p.Release(ctx, ac, &checksv1.ReleaseRequest{CheckName: ac.Name, EvaluationKey: "uid/r1", Namespace: "ns", Name: "w"})
		}},
	{name: "Describe", methods: []string{checksv1.IdentityService_GetProviderInfo_FullMethodName, checksv1.IdentityService_Probe_FullMethodName},
		call: func(ctx context.Context, p *Pool, ac *v1alpha1.AdmissionCheck) error {
			info, probe, err := p.Describe(ctx, ac)
			if err == nil && (info.GetName() != fakecheck.ProviderName || !probe.GetReady()) {
				return status.Errorf(codes.Internal, "unexpected Describe answer %v %v", info, probe)
			}
			return err
		}},
}

func TestNewPoolOptions(t *testing.T) {
	tests := []struct {
		name      string
		opts      []grpc.DialOption
		wantIdle  time.Duration
		wantDials int // dial options passed on to rpc.Dial
	}{
		{name: "default", wantIdle: DefaultIdleTimeout},
		{name: "idle timeout", opts: []grpc.DialOption{WithIdleTimeout(time.Minute)}, wantIdle: time.Minute},
		{name: "idle timeout among dial options",
			opts:     []grpc.DialOption{grpc.WithUserAgent("a"), WithIdleTimeout(time.Second), grpc.WithUserAgent("b")},
			wantIdle: time.Second, wantDials: 2},
		{name: "disabled", opts: []grpc.DialOption{WithIdleTimeout(0)}, wantIdle: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newTestPool(t, tc.opts...)
			if p.idleTimeout != tc.wantIdle || len(p.opts) != tc.wantDials {
				t.Fatalf("idle timeout %s with %d dial options, want %s with %d", p.idleTimeout, len(p.opts), tc.wantIdle, tc.wantDials)
			}
		})
	}
}

// TestPoolClosesIdleConnections checks that a connection unused for the
// idle timeout is closed and forgotten, and that the next call dials again
// and succeeds.
func TestPoolClosesIdleConnections(t *testing.T) {
	for _, tc := range poolCalls {
		t.Run(tc.name, func(t *testing.T) {
			fake := fakecheck.StartT(t)
			var used connRecorder
			p := newTestPool(t, WithIdleTimeout(testIdleTimeout), grpc.WithChainUnaryInterceptor(used.intercept))
			ac := checkFor(fake.Target())

			if err := tc.call(testCtx(t), p, ac); err != nil {
				t.Fatalf("first %s: %v", tc.name, err)
			}
			first := used.last()
			// The sweep may already have closed it if this test was slow.
			if c, inFlight, ok := entry(p, fake.Target()); ok && (c != first || inFlight != 0) {
				t.Fatalf("after the call: pooled connection is the one used %v, %d calls in flight; want the used one, none", c == first, inFlight)
			}

			waitFor(t, "the idle connection to be closed and removed", func() bool {
				_, _, ok := entry(p, fake.Target())
				return !ok && first.GetState() == connectivity.Shutdown
			})
			waitFor(t, "the sweep of the empty pool to stop", func() bool { return !sweepRunning() })

			if err := tc.call(testCtx(t), p, ac); err != nil {
				t.Fatalf("%s after the idle close: %v", tc.name, err)
			}
			if second := used.last(); second == first {
				t.Fatal("the call after the idle close used the closed connection, want a new one")
			}
		})
	}
}

// TestPoolKeepsConnectionsInFlight checks that the sweep never closes a
// connection while a call holds it, however long ago it was last used,
// and that it is closed once the call is done and it went idle.
func TestPoolKeepsConnectionsInFlight(t *testing.T) {
	for _, tc := range poolCalls {
		for _, method := range tc.methods {
			t.Run(tc.name+"/"+method[strings.LastIndex(method, "/")+1:], func(t *testing.T) {
				fake := fakecheck.StartT(t)
				g := newGate(method)
				p := newTestPool(t, WithIdleTimeout(testIdleTimeout), grpc.WithChainUnaryInterceptor(g.intercept))
				clock := newFakeClock()
				p.now = clock.Now
				ac := checkFor(fake.Target())

				done := make(chan error, 1)
				go func() { done <- tc.call(testCtx(t), p, ac) }()
				select {
				case <-g.entered:
				case err := <-done:
					t.Fatalf("%s ended before it was held: %v", tc.name, err)
				case <-time.After(waitTimeout):
					t.Fatalf("%s was not held", method)
				}
				held, inFlight, ok := entry(p, fake.Target())
				if !ok || inFlight != 1 {
					t.Fatalf("with the call held: pooled %v with %d calls in flight, want pooled with 1", ok, inFlight)
				}

				clock.Advance(time.Hour)
				// Stop waiting early if the sweep wrongly took the connection.
				start := sweeps(p)
				waitFor(t, "the pool to sweep", func() bool {
					_, _, ok := entry(p, fake.Target())
					return !ok || sweeps(p) >= start+2
				})
				if c, n, ok := entry(p, fake.Target()); !ok || c != held || n != 1 || held.GetState() == connectivity.Shutdown {
					t.Fatalf("after sweeps past the idle timeout: pooled %v, same %v, in flight %d, state %s; want the held connection kept",
						ok, c == held, n, held.GetState())
				}

				// The held call is sent now, over the connection the sweeps saw.
				g.open()
				if err := <-done; err != nil {
					t.Fatalf("%s held over the sweeps: %v", tc.name, err)
				}
				if _, n, ok := entry(p, fake.Target()); !ok || n != 0 {
					t.Fatalf("after the call: pooled %v with %d calls in flight, want pooled with none", ok, n)
				}

				clock.Advance(time.Hour)
				waitFor(t, "the connection to be closed once idle", func() bool {
					_, _, ok := entry(p, fake.Target())
					return !ok && held.GetState() == connectivity.Shutdown
				})
			})
		}
	}
}

// TestPoolEndpointChange checks that when an AdmissionCheck's endpoint
// changes, the old endpoint's connection goes idle and is closed while the
// new one is kept.
func TestPoolEndpointChange(t *testing.T) {
	tests := []struct {
		name string
		// sameTime makes the old connection's last use as recent as the
		// new one's: then neither is idle yet.
		sameTime bool
	}{
		{name: "old endpoint idle"},
		{name: "old endpoint used recently", sameTime: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			oldFake, newFake := fakecheck.StartT(t), fakecheck.StartT(t)
			p := newTestPool(t, WithIdleTimeout(testIdleTimeout))
			clock := newFakeClock()
			p.now = clock.Now
			ac := checkFor(oldFake.Target())

			if _, err := p.Evaluate(testCtx(t), ac, request()); err != nil {
				t.Fatal(err)
			}
			old, _, _ := entry(p, oldFake.Target())
			ac.Spec.Endpoint = newFake.Target()
			if !tc.sameTime {
				clock.Advance(time.Hour)
			}
			if _, err := p.Evaluate(testCtx(t), ac, request()); err != nil {
				t.Fatal(err)
			}
			waitSweeps(t, p, 2)

			_, _, oldKept := entry(p, oldFake.Target())
			_, _, newKept := entry(p, newFake.Target())
			if oldKept != tc.sameTime || !newKept {
				t.Fatalf("old endpoint pooled %v, new endpoint pooled %v; want %v, true", oldKept, newKept, tc.sameTime)
			}
			if closed := old.GetState() == connectivity.Shutdown; closed == tc.sameTime {
				t.Fatalf("old connection closed %v, want %v", closed, !tc.sameTime)
			}
			if n := oldFake.EvaluateCount("ns", "w"); n != 1 {
				t.Fatalf("old provider evaluated %d times, want 1", n)
			}
			if n := newFake.EvaluateCount("ns", "w"); n != 1 {
				t.Fatalf("new provider evaluated %d times, want 1", n)
			}
		})
	}
}

// TestPoolClose checks that Close closes every connection and stops the
// sweep, and that the pool then refuses calls.
func TestPoolClose(t *testing.T) {
	tests := []struct {
		name string
		opts []grpc.DialOption
	}{
		{name: "default idle timeout"},
		{name: "short idle timeout", opts: []grpc.DialOption{WithIdleTimeout(testIdleTimeout)}},
		{name: "idle close disabled", opts: []grpc.DialOption{WithIdleTimeout(0)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fake := fakecheck.StartT(t)
			p := newTestPool(t, tc.opts...)
			p.now = newFakeClock().Now // nothing goes idle before Close
			ac := checkFor(fake.Target())
			if _, err := p.Evaluate(testCtx(t), ac, request()); err != nil {
				t.Fatal(err)
			}
			c, _, _ := entry(p, fake.Target())
			if got, want := sweepRunning(), p.idleTimeout > 0; got != want {
				t.Fatalf("sweep running %v, want %v", got, want)
			}

			closed := make(chan struct{})
			go func() { p.Close(); close(closed) }()
			select {
			case <-closed:
			case <-time.After(waitTimeout):
				t.Fatal("Close did not return")
			}
			if sweepRunning() {
				t.Fatal("the sweep goroutine outlived Close")
			}
			if _, _, ok := entry(p, fake.Target()); ok || c.GetState() != connectivity.Shutdown {
				t.Fatalf("after Close: pooled %v, state %s; want closed and removed", ok, c.GetState())
			}
			if _, err := p.Evaluate(testCtx(t), ac, request()); status.Code(err) != codes.Unavailable {
				t.Fatalf("Evaluate after Close: %v, want Unavailable", err)
			}
			p.Close() // again
		})
	}
}
