package checks

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

// ChangeStream is an open CheckService.WatchChanges stream.
type ChangeStream interface {
	// Opened blocks until the provider accepted the stream (its response
	// headers arrived) and returns nil, or returns the error that ended
	// the stream first (ErrEndedUnopened: Recv says why). It may run
	// concurrently with Recv.
	Opened() error
	// Recv returns the next evaluation keys the provider pushed, or the
	// error that ended the stream.
	Recv() ([]string, error)
	// Close ends the stream. It may be called more than once.
	Close()
}

// WatchesChanges reports whether ac's status records that its provider
// serves WatchChanges (CAPABILITY_WATCH_CHANGES).
func WatchesChanges(ac *v1alpha1.AdmissionCheck) bool {
	return slices.Contains(Capabilities(ac), checksv1.Capability_CAPABILITY_WATCH_CHANGES)
}

// ConnID names the pooled connection ac's calls go over: its endpoint and
// the fingerprint of the transport material they resolve to now. Two
// checks with the same ConnID share one connection (and one
// WatchChanges stream). Its errors are TLSConfigInvalid.
func (p *Pool) ConnID(ctx context.Context, ac *v1alpha1.AdmissionCheck) (string, error) {
	tr, err := p.secrets.transport(ctx, ac)
	if err != nil {
		return "", err
	}
	return ac.Spec.Endpoint + "|" + tr.fingerprint(), nil
}

// WatchChanges opens ac's provider's WatchChanges stream on the pooled
// connection, with the transport ac asks for. The stream has no deadline:
// it lives until ctx ends, Close, or the provider ends it. While it is
// open it counts as a call in flight, so the idle sweep never closes its
// connection.
func (p *Pool) WatchChanges(ctx context.Context, ac *v1alpha1.AdmissionCheck) (ChangeStream, error) {
	const method = "WatchChanges"
	pc, err := p.acquire(ctx, ac)
	if err != nil {
		code := "dial"
		if tlsErr, ok := AsTLSError(err); ok {
			code = tlsErr.Reason
		}
		p.metrics.CheckCallErrors.WithLabelValues(ac.Name, method, code).Inc()
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &changeStream{pool: p, pc: pc, cancel: cancel, check: ac.Name}
	st, err := checksv1.NewCheckServiceClient(pc.conn).WatchChanges(ctx, &checksv1.WatchChangesRequest{})
	if err != nil {
		return nil, s.fail(err)
	}
	s.st = st
	return s, nil
}

// changeStream is a WatchChanges stream that gives its connection back to
// the pool once it ends.
type changeStream struct {
	pool   *Pool
	pc     *poolConn
	st     grpc.ServerStreamingClient[checksv1.WatchChangesResponse]
	cancel context.CancelFunc
	check  string // for metrics

	once   sync.Once
	closed atomic.Bool // Close was called: what follows is no failure
}

// ErrEndedUnopened is what Opened returns for a stream that the provider
// ended without opening it (an error status alone, such as UNIMPLEMENTED):
// Recv returns why.
var ErrEndedUnopened = errors.New("the provider ended the WatchChanges stream without opening it")

func (s *changeStream) Opened() error {
	md, err := s.st.Header()
	switch {
	case err != nil:
		return s.fail(err)
	case md == nil:
		// grpc-go reports a stream that ended before its headers through
		// Recv, not Header; Recv may not be called here, since the caller
		// may be in Recv already.
		return ErrEndedUnopened
	}
	return nil
}

func (s *changeStream) Recv() ([]string, error) {
	resp, err := s.st.Recv()
	if err != nil {
		return nil, s.fail(err)
	}
	return resp.GetEvaluationKeys(), nil
}

func (s *changeStream) Close() {
	s.closed.Store(true)
	s.end()
}

// fail ends the stream and returns err as the pool explains it (a TLS
// failure as a *TLSError), counted in the call errors unless the stream
// was closed on purpose.
func (s *changeStream) fail(err error) error {
	err = s.pc.explain(err)
	s.end()
	if !s.closed.Load() {
		s.pool.metrics.CheckCallErrors.WithLabelValues(s.check, "WatchChanges", errorCode(err)).Inc()
	}
	return err
}

func (s *changeStream) end() {
	s.once.Do(func() {
		s.cancel()
		s.pool.release(s.pc)
	})
}
