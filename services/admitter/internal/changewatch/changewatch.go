// Package changewatch is the admitter's side of CheckService.WatchChanges.
// It keeps one stream open per provider connection that serves an
// AdmissionCheck whose status records CAPABILITY_WATCH_CHANGES, reopens it
// with exponential backoff (with jitter) when it breaks, and stops it when
// no such check leads to the connection any more (deleted, capability
// gone, endpoint or TLS material changed). It decides nothing itself: it
// tells the admitter, every time a stream opens, which checks' evaluations
// must all be asked again (so a change made while no stream was open is
// never lost; ReaskOrder asks admitted workloads first), and, for every
// key a provider pushes, which evaluation to ask again. Only the leader
// runs it.
package changewatch

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/services/admitter/internal/checks"
	"github.com/sluice-dev/sluice/services/admitter/internal/metrics"
	"github.com/sluice-dev/sluice/services/admitter/internal/workload"
)

// Defaults for Config.
const (
	DefaultInitialBackoff = time.Second
	DefaultMaxBackoff     = time.Minute
	DefaultResync         = 30 * time.Second
	DefaultOpenGrace      = time.Second
	// jitter is the largest fraction taken off a backoff at random, so
	// that streams broken together (a provider restarted) do not all
	// reopen, and re-evaluate everything, at the same instant.
	jitter = 0.2
)

// Conns opens streams over the provider connections; *checks.Pool is one.
type Conns interface {
	// ConnID names the connection ac's calls go over.
	ConnID(ctx context.Context, ac *v1alpha1.AdmissionCheck) (string, error)
	// WatchChanges opens ac's provider's stream on that connection.
	WatchChanges(ctx context.Context, ac *v1alpha1.AdmissionCheck) (checks.ChangeStream, error)
}

// Key is a pushed evaluation key: one check's evaluation of one
// reservation of one workload.
type Key struct {
	UID           types.UID
	ReservationID string
	Check         string
}

// Config is what a Manager needs.
type Config struct {
	Conns Conns
	// Checks returns the AdmissionChecks by name, as last seen.
	Checks func() map[string]*v1alpha1.AdmissionCheck
	// Opened is told, every time a stream opens, the checks it serves:
	// every evaluation the admitter holds with them must be asked again,
	// in ReaskOrder (admitted workloads first).
	Opened func(checks []string)
	// Changed is told of each well-formed key pushed for a check the
	// stream serves, and reports whether the admitter holds that
	// evaluation (and will ask again).
	Changed func(Key) bool
	Metrics *metrics.Metrics
	// InitialBackoff, doubling up to MaxBackoff, is the wait before a
	// stream is opened again after it failed or broke. A stream that
	// stayed open for MaxBackoff starts over from InitialBackoff.
	InitialBackoff, MaxBackoff time.Duration
	// Resync is how often the streams wanted are computed again without
	// a Trigger.
	Resync time.Duration
	// OpenGrace is how long to wait for a provider's response headers
	// before counting its stream open anyway: a provider may send none
	// until its first change.
	OpenGrace time.Duration
}

// Manager runs the streams.
type Manager struct {
	cfg     Config
	trigger chan struct{}
	// streams by connection id; only Run's goroutine touches the map.
	streams map[string]*stream
	wg      sync.WaitGroup
}

// New returns a Manager that opens nothing until Run.
func New(cfg Config) *Manager {
	if cfg.InitialBackoff <= 0 {
		cfg.InitialBackoff = DefaultInitialBackoff
	}
	if cfg.MaxBackoff < cfg.InitialBackoff {
		cfg.MaxBackoff = max(DefaultMaxBackoff, cfg.InitialBackoff)
	}
	if cfg.Resync <= 0 {
		cfg.Resync = DefaultResync
	}
	if cfg.OpenGrace <= 0 {
		cfg.OpenGrace = DefaultOpenGrace
	}
	return &Manager{cfg: cfg, trigger: make(chan struct{}, 1), streams: map[string]*stream{}}
}

// Trigger asks for the streams wanted to be computed again: an
// AdmissionCheck or a Secret changed. It never blocks.
func (m *Manager) Trigger() {
	select {
	case m.trigger <- struct{}{}:
	default:
	}
}

// Run keeps the wanted streams open until ctx ends, then closes them.
func (m *Manager) Run(ctx context.Context) {
	t := time.NewTicker(m.cfg.Resync)
	defer t.Stop()
	for {
		m.reconcile(ctx)
		select {
		case <-ctx.Done():
			for _, s := range m.streams {
				s.cancel()
			}
			m.wg.Wait()
			return
		case <-m.trigger:
		case <-t.C:
		}
	}
}

// wanted groups the watchable checks by the connection they use: one
// stream per connection, serving the checks listed (sorted). A check whose
// connection cannot be named (its TLS settings cannot be used) gets none
// until they are fixed; the Secret's change triggers a new look.
func wanted(ctx context.Context, conns Conns, acs map[string]*v1alpha1.AdmissionCheck) map[string][]string {
	out := map[string][]string{}
	for name, ac := range acs {
		if !checks.WatchesChanges(ac) {
			continue
		}
		id, err := conns.ConnID(ctx, ac)
		if err != nil {
			ctrl.LoggerFrom(ctx).V(1).Info("no WatchChanges stream for the check", "check", name, "error", err.Error())
			continue
		}
		out[id] = append(out[id], name)
	}
	for _, names := range out {
		slices.Sort(names)
	}
	return out
}

// reconcile starts the streams wanted and stops the others.
func (m *Manager) reconcile(ctx context.Context) {
	want := wanted(ctx, m.cfg.Conns, m.cfg.Checks())
	for id, s := range m.streams {
		if _, ok := want[id]; !ok {
			s.cancel()
			delete(m.streams, id)
		}
	}
	for id, names := range want {
		if s, ok := m.streams[id]; ok {
			// A check that joins an open stream was not watched before:
			// ask its evaluations again, as an open would.
			if added, open := s.setChecks(names); open && len(added) > 0 {
				m.cfg.Opened(added)
			}
			continue
		}
		sctx, cancel := context.WithCancel(ctx)
		s := &stream{id: id, cancel: cancel, checks: names}
		m.streams[id] = s
		m.wg.Go(func() { m.run(sctx, s) })
	}
}

// stream is one connection's stream and the checks it serves.
type stream struct {
	id     string
	cancel context.CancelFunc

	mu     sync.Mutex
	checks []string // sorted
	open   bool
}

// setChecks replaces the checks served and returns those added, and
// whether the stream is open.
func (s *stream) setChecks(names []string) ([]string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var added []string
	for _, n := range names {
		if !slices.Contains(s.checks, n) {
			added = append(added, n)
		}
	}
	s.checks = names
	return added, s.open
}

func (s *stream) names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.checks)
}

func (s *stream) serves(check string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Contains(s.checks, check)
}

func (s *stream) setOpen(open bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.open = open
}

// run opens s's stream, reads it, and opens it again after a backoff
// whenever it fails or breaks, until ctx ends.
func (m *Manager) run(ctx context.Context, s *stream) {
	log := ctrl.LoggerFrom(ctx).WithValues("connection", s.id)
	for attempt := 0; ; {
		lasted, err := m.serve(ctx, s)
		if ctx.Err() != nil {
			return
		}
		if lasted >= m.cfg.MaxBackoff {
			attempt = 0
		}
		wait := backoff(m.cfg.InitialBackoff, m.cfg.MaxBackoff, attempt, rand.Float64())
		attempt++
		log.V(1).Info("WatchChanges stream down; opening it again after a backoff", "checks", s.names(), "backoff", wait.String(), "error", err.Error())
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// backoff is the wait before the attempt-th reopening (from 0): initial
// doubled attempt times, capped at maxWait, less up to the jitter fraction
// of it (r in [0, 1) picks how much).
func backoff(initial, maxWait time.Duration, attempt int, r float64) time.Duration {
	d := initial
	for i := 0; i < attempt && d < maxWait; i++ {
		d *= 2
	}
	d = min(d, maxWait)
	return d - time.Duration(float64(d)*jitter*r)
}

// serve opens s's stream once and reads it until it breaks. It returns
// how long the stream was open (zero: it never opened) and why it ended.
func (m *Manager) serve(ctx context.Context, s *stream) (time.Duration, error) {
	ac := m.representative(s)
	if ac == nil {
		return 0, errors.New("none of the stream's checks is watchable any more")
	}
	st, err := m.cfg.Conns.WatchChanges(ctx, ac)
	if err != nil {
		return 0, fmt.Errorf("open WatchChanges to %s: %w", ac.Spec.Endpoint, err)
	}
	defer st.Close()
	if err := awaitOpen(st, m.cfg.OpenGrace); err != nil {
		return 0, fmt.Errorf("open WatchChanges to %s: %w", ac.Spec.Endpoint, err)
	}
	start := time.Now()
	m.cfg.Metrics.WatchStreamOpens.WithLabelValues(ac.Spec.Endpoint).Inc()
	m.cfg.Metrics.WatchStreamsOpen.Inc()
	defer m.cfg.Metrics.WatchStreamsOpen.Dec()
	s.setOpen(true)
	defer s.setOpen(false)
	// The provider sends changes from now on; whatever changed before
	// (while no stream was open, or before this admitter led) is found by
	// asking again.
	m.cfg.Opened(s.names())
	for {
		keys, err := st.Recv()
		if err != nil {
			return time.Since(start), fmt.Errorf("WatchChanges stream to %s broke: %w", ac.Spec.Endpoint, err)
		}
		m.changed(s, keys)
	}
}

// representative is the check whose spec the stream is opened with: the
// first of s's checks that is still watchable. Every check of s leads to
// the same connection.
func (m *Manager) representative(s *stream) *v1alpha1.AdmissionCheck {
	acs := m.cfg.Checks()
	for _, name := range s.names() {
		if ac := acs[name]; ac != nil && checks.WatchesChanges(ac) {
			return ac
		}
	}
	return nil
}

// awaitOpen waits for the provider to accept st, or for grace: a
// provider that sends no headers until its first change is taken to have
// opened it, as long as it did not end it meanwhile.
func awaitOpen(st checks.ChangeStream, grace time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- st.Opened() }()
	t := time.NewTimer(grace)
	defer t.Stop()
	var err error
	select {
	case err = <-done:
	case <-t.C:
		return nil
	}
	if errors.Is(err, checks.ErrEndedUnopened) {
		if _, recvErr := st.Recv(); recvErr != nil {
			err = recvErr
		}
	}
	return err
}

// changed hands the pushed keys on. Keys that do not parse, or name a
// check this stream does not serve, are ignored: a provider speaks only
// for its own checks.
func (m *Manager) changed(s *stream, keys []string) {
	for _, k := range keys {
		uid, reservation, check, ok := workload.ParseEvaluationKey(k)
		outcome := "ignored"
		if ok && s.serves(check) && m.cfg.Changed(Key{UID: uid, ReservationID: reservation, Check: check}) {
			outcome = "evaluate"
		}
		m.cfg.Metrics.WatchKeys.WithLabelValues(outcome).Inc()
	}
}
