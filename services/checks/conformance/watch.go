package conformance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/pkg/checkvalidate"
)

// DefaultWatchIdle is how long WatchChanges/Open holds the stream open
// with nothing to send.
const DefaultWatchIdle = 3 * time.Second

// skipWithoutWatch is why the WatchChanges cases skip a provider that does
// not declare the capability.
const skipWithoutWatch = "provider does not advertise CAPABILITY_WATCH_CHANGES; sluice never opens its WatchChanges stream"

// watchStream is the WatchChanges stream WatchChanges/Open opened and
// WatchChanges/PushedKeys reads.
type watchStream struct {
	opened time.Time
	cancel context.CancelFunc
	msgs   chan *checksv1.WatchChangesResponse // closed when the stream ends
	err    error                               // why it ended; read once msgs is closed
}

// openWatch opens a stream that lives until closeWatch, whatever ctx (a
// subtest's) does, and receives from it in the background.
func (s *suite) openWatch(ctx context.Context) (*watchStream, error) {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stream, err := s.checks.WatchChanges(sctx, &checksv1.WatchChangesRequest{})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("opening WatchChanges failed: %w", err)
	}
	w := &watchStream{opened: time.Now(), cancel: cancel, msgs: make(chan *checksv1.WatchChangesResponse)}
	go func() {
		defer close(w.msgs)
		for {
			resp, err := stream.Recv()
			if err != nil {
				w.err = err
				return
			}
			select {
			case w.msgs <- resp:
			case <-sctx.Done():
				w.err = sctx.Err()
				return
			}
		}
	}()
	return w, nil
}

// closeWatch ends the stream, if one is open, and waits for its receiver.
func (s *suite) closeWatch() {
	if s.watch == nil {
		return
	}
	s.watch.cancel()
	for range s.watch.msgs {
	}
	s.watch = nil
}

// watchOpen opens the stream sluice keeps open and holds it idle: it must
// not end on its own.
func watchOpen(ctx context.Context, s *suite) error {
	if !s.has(checksv1.Capability_CAPABILITY_WATCH_CHANGES) {
		return skip(skipWithoutWatch)
	}
	w, err := s.openWatch(ctx)
	if err != nil {
		return err
	}
	idle := time.NewTimer(s.opts.WatchIdle)
	defer idle.Stop()
	for {
		select {
		case <-ctx.Done():
			w.cancel()
			return ctx.Err()
		case <-idle.C:
			s.watch = w
			return nil
		case resp, open := <-w.msgs:
			if !open {
				w.cancel()
				return streamEnded(w)
			}
			// Keys of evaluations the kit does not hold (another caller's)
			// are allowed here: callers ignore them.
			if err := checkPushedKeys(resp); err != nil {
				w.cancel()
				return err
			}
		}
	}
}

// watchPushedKeys makes the provider change the answer of an evaluation
// the kit holds, through Options.TriggerChange, and waits for its key on
// the stream WatchChanges/Open holds.
func watchPushedKeys(ctx context.Context, s *suite) error {
	defer s.closeWatch()
	switch {
	case !s.has(checksv1.Capability_CAPABILITY_WATCH_CHANGES):
		return skip(skipWithoutWatch)
	case s.watch == nil:
		return skip("needs the stream of WatchChanges/Open, which failed")
	case s.opts.TriggerChange == nil:
		return skip("no way to make the provider change an answer; --trigger-change-command (Options.TriggerChange) names one")
	}
	req := s.request("reservation-watch")
	if _, err := s.evaluate(ctx, req); err != nil {
		return err
	}
	key := req.GetEvaluationKey()
	if err := s.trigger(ctx, key); err != nil {
		return err
	}
	if err := s.awaitPush(ctx, key); err != nil {
		return err
	}
	if _, err := s.evaluate(ctx, req); err != nil {
		return fmt.Errorf("Evaluate after the provider pushed the key: %w", err)
	}
	return nil
}

func (s *suite) trigger(ctx context.Context, key string) error {
	cctx, cancel := s.call(ctx)
	defer cancel()
	if err := s.opts.TriggerChange(cctx, key); err != nil {
		return fmt.Errorf("making the provider change its answer for key %q failed (--trigger-change-command): %w", key, err)
	}
	return nil
}

// awaitPush waits, for at most the call timeout, until key arrives on the
// stream; every key that arrives must be one the kit sent.
func (s *suite) awaitPush(ctx context.Context, key string) error {
	deadline := time.NewTimer(s.opts.Timeout)
	defer deadline.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("the provider did not push key %q within %s (--timeout) of changing its answer; push every changed key to every open WatchChanges stream", key, s.opts.Timeout)
		case resp, open := <-s.watch.msgs:
			if !open {
				return streamEnded(s.watch)
			}
			if err := checkPushedKeys(resp); err != nil {
				return err
			}
			for _, k := range resp.GetEvaluationKeys() {
				if !s.sent[k] {
					return fmt.Errorf("the provider pushed key %q, which the kit never sent; push only evaluation keys you were given in Evaluate requests (and run the kit against a provider nothing else calls)", k)
				}
			}
			if slices.Contains(resp.GetEvaluationKeys(), key) {
				return nil
			}
		}
	}
}

// checkPushedKeys checks a message's keys as Evaluate requests' keys are
// checked.
func checkPushedKeys(resp *checksv1.WatchChangesResponse) error {
	for i, k := range resp.GetEvaluationKeys() {
		switch {
		case k == "":
			return fmt.Errorf("WatchChanges sent evaluation_keys[%d] empty; push only evaluation keys you were given", i)
		case len(k) > checkvalidate.MaxEvaluationKeyBytes:
			return fmt.Errorf("WatchChanges sent evaluation_keys[%d] of %d bytes, longer than any evaluation key (%d)", i, len(k), checkvalidate.MaxEvaluationKeyBytes)
		}
	}
	return nil
}

// streamEnded says why a stream that should have stayed open ended.
func streamEnded(w *watchStream) error {
	after := time.Since(w.opened).Round(time.Millisecond)
	switch {
	case status.Code(w.err) == codes.Unimplemented:
		return fmt.Errorf("WatchChanges answered UNIMPLEMENTED (%v), but the provider advertises CAPABILITY_WATCH_CHANGES: serve WatchChanges, or do not advertise the capability", w.err)
	case errors.Is(w.err, io.EOF):
		return fmt.Errorf("the provider ended the WatchChanges stream after %s without an error; keep it open until the caller ends it (sluice keeps one open while it holds evaluations)", after)
	default:
		return fmt.Errorf("the WatchChanges stream ended after %s: %w; keep it open until the caller ends it", after, w.err)
	}
}
