package changewatch

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/services/admitter/internal/checks"
	"github.com/sluice-dev/sluice/services/admitter/internal/metrics"
)

const waitLimit = 10 * time.Second

func check(name, endpoint string, caps ...checksv1.Capability) *v1alpha1.AdmissionCheck {
	ac := &v1alpha1.AdmissionCheck{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.AdmissionCheckSpec{Endpoint: endpoint}}
	if caps != nil {
		ac.Status.Provider = &v1alpha1.ProviderInfo{Name: "p.example.com"}
		for _, c := range caps {
			ac.Status.Provider.Capabilities = append(ac.Status.Provider.Capabilities, c.String())
		}
	}
	return ac
}

const watchCap = checksv1.Capability_CAPABILITY_WATCH_CHANGES

// fakeConns names a connection by endpoint and opens fake streams, failing
// the opens its script says.
type fakeConns struct {
	mu      sync.Mutex
	connErr map[string]error   // by check name
	script  map[string][]error // by endpoint: the result of each open in turn
	opens   map[string]int     // by endpoint
	streams chan *fakeStream   // every stream opened
}

func newFakeConns() *fakeConns {
	return &fakeConns{connErr: map[string]error{}, script: map[string][]error{}, opens: map[string]int{}, streams: make(chan *fakeStream, 64)}
}

func (f *fakeConns) ConnID(_ context.Context, ac *v1alpha1.AdmissionCheck) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.connErr[ac.Name]; err != nil {
		return "", err
	}
	return ac.Spec.Endpoint, nil
}

func (f *fakeConns) WatchChanges(ctx context.Context, ac *v1alpha1.AdmissionCheck) (checks.ChangeStream, error) {
	ep := ac.Spec.Endpoint
	f.mu.Lock()
	n := f.opens[ep]
	f.opens[ep]++
	var err error
	if n < len(f.script[ep]) {
		err = f.script[ep][n]
	}
	f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	s := &fakeStream{ctx: ctx, endpoint: ep, keys: make(chan []string, 16), broken: make(chan error, 1), closed: make(chan struct{})}
	f.streams <- s
	return s, nil
}

func (f *fakeConns) openCount(ep string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.opens[ep]
}

type fakeStream struct {
	ctx      context.Context
	endpoint string
	keys     chan []string
	broken   chan error
	once     sync.Once
	closed   chan struct{}
}

func (s *fakeStream) Opened() error { return nil }

func (s *fakeStream) Recv() ([]string, error) {
	select {
	case k := <-s.keys:
		return k, nil
	case err := <-s.broken:
		return nil, err
	case <-s.ctx.Done():
		return nil, s.ctx.Err()
	case <-s.closed:
		return nil, errors.New("closed")
	}
}

func (s *fakeStream) Close() { s.once.Do(func() { close(s.closed) }) }

// catalog is the AdmissionChecks a test changes under a running Manager.
type catalog struct {
	mu  sync.Mutex
	acs map[string]*v1alpha1.AdmissionCheck
}

func (c *catalog) get() map[string]*v1alpha1.AdmissionCheck {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]*v1alpha1.AdmissionCheck, len(c.acs))
	for k, v := range c.acs {
		out[k] = v
	}
	return out
}

func (c *catalog) set(acs ...*v1alpha1.AdmissionCheck) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.acs = map[string]*v1alpha1.AdmissionCheck{}
	for _, ac := range acs {
		c.acs[ac.Name] = ac
	}
}

// harness runs a Manager over fake connections and records what it says.
type harness struct {
	conns   *fakeConns
	catalog *catalog
	m       *Manager
	metrics *metrics.Metrics
	opened  chan []string
	changed chan Key
	held    func(Key) bool
}

func start(t *testing.T, h *harness, acs ...*v1alpha1.AdmissionCheck) {
	t.Helper()
	m, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	h.metrics = m
	if h.conns == nil {
		h.conns = newFakeConns()
	}
	if h.held == nil {
		h.held = func(Key) bool { return true }
	}
	h.catalog = &catalog{}
	h.catalog.set(acs...)
	h.opened = make(chan []string, 64)
	h.changed = make(chan Key, 64)
	h.m = New(Config{
		Conns:   h.conns,
		Checks:  h.catalog.get,
		Opened:  func(names []string) { h.opened <- names },
		Changed: func(k Key) bool { h.changed <- k; return h.held(k) },
		Metrics: m,
		// Short, so that reopening takes milliseconds; the growth is
		// TestBackoff's.
		InitialBackoff: time.Millisecond, MaxBackoff: 4 * time.Millisecond,
		Resync: time.Hour, OpenGrace: time.Second,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); h.m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(waitLimit):
			t.Error("Run did not return after its context ended")
		}
	})
}

func next[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitLimit):
		t.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}

func TestWanted(t *testing.T) {
	badTLS := errors.New("spec.tls: Secret missing")
	tests := []struct {
		name    string
		acs     []*v1alpha1.AdmissionCheck
		connErr map[string]error
		want    map[string][]string
	}{
		{
			name: "only checks that declare WATCH_CHANGES",
			acs: []*v1alpha1.AdmissionCheck{
				check("watching", "e1", watchCap),
				check("plain", "e2", checksv1.Capability_CAPABILITY_RELEASE),
				check("unprobed", "e3"),
			},
			want: map[string][]string{"e1": {"watching"}},
		},
		{
			name: "one stream per connection, for all its checks",
			acs:  []*v1alpha1.AdmissionCheck{check("b", "e1", watchCap), check("a", "e1", watchCap), check("c", "e2", watchCap)},
			want: map[string][]string{"e1": {"a", "b"}, "e2": {"c"}},
		},
		{
			name:    "none while the connection cannot be named",
			acs:     []*v1alpha1.AdmissionCheck{check("a", "e1", watchCap), check("b", "e2", watchCap)},
			connErr: map[string]error{"b": badTLS},
			want:    map[string][]string{"e1": {"a"}},
		},
		{name: "nothing to watch", want: map[string][]string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conns := newFakeConns()
			for k, v := range tt.connErr {
				conns.connErr[k] = v
			}
			acs := map[string]*v1alpha1.AdmissionCheck{}
			for _, ac := range tt.acs {
				acs[ac.Name] = ac
			}
			got := wanted(context.Background(), conns, acs)
			if len(got) != len(tt.want) {
				t.Fatalf("wanted = %v, want %v", got, tt.want)
			}
			for id, names := range tt.want {
				if !slices.Equal(got[id], names) {
					t.Fatalf("wanted = %v, want %v", got, tt.want)
				}
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	const initial, maxWait = time.Second, 10 * time.Second
	tests := []struct {
		attempt int
		r       float64
		want    time.Duration
	}{
		{0, 0, time.Second},
		{1, 0, 2 * time.Second},
		{3, 0, 8 * time.Second},
		{4, 0, maxWait},
		{60, 0, maxWait},
		{0, 0.5, 900 * time.Millisecond}, // jitter takes off up to 20%
		{60, 0.5, 9 * time.Second},
	}
	for _, tt := range tests {
		got := backoff(initial, maxWait, tt.attempt, tt.r)
		if diff := got - tt.want; diff < -time.Microsecond || diff > time.Microsecond {
			t.Errorf("backoff(attempt %d, r %v) = %s, want %s", tt.attempt, tt.r, got, tt.want)
		}
	}
}

// A stream that cannot be opened is tried again after a backoff, and
// every open — the first and each after a break — asks again every
// evaluation of the checks it serves.
func TestReopensAndReevaluatesOnEveryOpen(t *testing.T) {
	h := &harness{conns: newFakeConns()}
	unavailable := status.Error(codes.Unavailable, "provider down")
	h.conns.script["e1"] = []error{unavailable, unavailable}
	start(t, h, check("a", "e1", watchCap), check("b", "e1", watchCap))

	first := next(t, h.conns.streams, "the first stream to open")
	if n := h.conns.openCount("e1"); n != 3 {
		t.Fatalf("opened after %d attempts, want 3 (two refused, then open)", n)
	}
	if got := next(t, h.opened, "re-evaluation on the first open"); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("Opened(%v), want every check of the connection [a b]", got)
	}

	first.broken <- unavailable
	next(t, h.conns.streams, "the stream to open again after it broke")
	if got := next(t, h.opened, "re-evaluation on the second open"); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("Opened(%v) after reopening, want [a b]", got)
	}
	if got := testutil.ToFloat64(h.metrics.WatchStreamOpens.WithLabelValues("e1")); got != 2 {
		t.Fatalf("watch_stream_opens_total = %v, want 2", got)
	}
}

// Pushed keys reach the admitter only when they parse and name a check
// the stream serves; the admitter's own answer decides the rest.
func TestRoutesPushedKeys(t *testing.T) {
	h := &harness{held: func(k Key) bool { return k.UID == "u1" }}
	start(t, h, check("a", "e1", watchCap), check("b", "e1", watchCap), check("other", "e2", watchCap))
	var s *fakeStream
	for s == nil || s.endpoint != "e1" {
		s = next(t, h.conns.streams, "the stream of e1")
	}
	next(t, h.opened, "the open")

	s.keys <- []string{"u1/r1/a", "not-a-key", "u2/r2/other", "u3/r3/b", "u4/r4/a/extra"}
	want := []Key{{UID: "u1", ReservationID: "r1", Check: "a"}, {UID: "u3", ReservationID: "r3", Check: "b"}}
	for _, w := range want {
		if got := next(t, h.changed, "a key handed on"); got != w {
			t.Fatalf("Changed(%+v), want %+v", got, w)
		}
	}
	waitUntil(t, "the keys counted", func() bool {
		return testutil.ToFloat64(h.metrics.WatchKeys.WithLabelValues("evaluate")) == 1 &&
			testutil.ToFloat64(h.metrics.WatchKeys.WithLabelValues("ignored")) == 4
	})
	select {
	case k := <-h.changed:
		t.Fatalf("Changed(%+v) for a key that is not this stream's", k)
	default:
	}
}

// A stream ends when no watchable check leads to its connection any more,
// and one opens on the connection a check moves to.
func TestFollowsTheChecks(t *testing.T) {
	h := &harness{}
	start(t, h, check("a", "e1", watchCap))
	s1 := next(t, h.conns.streams, "the stream of e1")
	next(t, h.opened, "the open")

	h.catalog.set(check("a", "e1", checksv1.Capability_CAPABILITY_RELEASE))
	h.m.Trigger()
	waitDone(t, s1, "the stream of a check that lost WATCH_CHANGES to end")

	h.catalog.set(check("a", "e2", watchCap))
	h.m.Trigger()
	s2 := next(t, h.conns.streams, "a stream on the new endpoint")
	if s2.endpoint != "e2" {
		t.Fatalf("stream opened on %s, want e2", s2.endpoint)
	}
	next(t, h.opened, "the open on e2")

	h.catalog.set(check("a", "e2", watchCap), check("b", "e2", watchCap))
	h.m.Trigger()
	if got := next(t, h.opened, "a check joining an open stream"); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("Opened(%v) for a check joining the stream, want [b]", got)
	}

	h.catalog.set()
	h.m.Trigger()
	waitDone(t, s2, "the stream of deleted checks to end")
}

func waitDone(t *testing.T, s *fakeStream, what string) {
	t.Helper()
	select {
	case <-s.ctx.Done():
	case <-time.After(waitLimit):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
