package sdk

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/pkg/checkvalidate"
)

// Notifier tells sluice that answers changed. *Server implements it.
type Notifier interface {
	// Changed sends keys — evaluation keys the provider was given in
	// Evaluate requests and would now answer differently — to every open
	// WatchChanges stream; sluice then calls Evaluate again for each. It
	// never blocks: each stream buffers what it has not sent yet, and a
	// key already waiting on a stream is not queued twice. A stream whose
	// buffer is full (WithChangeBuffer) is ended with RESOURCE_EXHAUSTED
	// instead of dropping keys (one stuck sending to a caller that stopped
	// reading, once that send returns); the caller opens a new one and
	// calls Evaluate again for everything it holds, so no change is lost.
	//
	// A change made while no stream is open needs no push: every caller
	// re-evaluates everything when it opens a stream. So keys pushed
	// before a stream opened never reach it.
	//
	// Keys must be non-empty and at most 512 bytes, as in Evaluate
	// requests. Invalid keys are never sent: Changed sends the valid ones
	// and returns an error naming each invalid one. It returns an error,
	// and sends nothing, when Info does not declare
	// CAPABILITY_WATCH_CHANGES.
	Changed(keys ...string) error
}

// NotifierSetter is implemented by Checkers that change answers on their
// own (a budget cut, capacity reclaimed, an approval withdrawn) and so
// need a Notifier before the Server exists. NewServer calls SetNotifier
// once, before it returns; the Checker keeps n and calls n.Changed. Such a
// Checker's Info must declare CAPABILITY_WATCH_CHANGES.
type NotifierSetter interface {
	SetNotifier(n Notifier)
}

// WatchObserver is implemented by Checkers that want to know when sluice
// watches them: the Server calls WatchOpened each time a WatchChanges
// stream opens, once the stream is registered (so every key pushed from
// then on, also from within WatchOpened, reaches it) and before its
// headers go out. sluice opens a stream after it connects (also after
// the provider's restart) and then evaluates again everything it holds,
// admitted workloads first; a Checker that keeps its state in memory can
// wait for those calls before it decides for waiting workloads. It is
// called only for a provider that declares CAPABILITY_WATCH_CHANGES, and
// concurrently with any other method: WatchOpened must not block.
type WatchObserver interface {
	WatchOpened()
}

const (
	// defaultChangeBuffer is how many distinct keys one WatchChanges stream
	// holds unsent before it is ended: 10000 keys are at most 5 MiB.
	defaultChangeBuffer = 10000
	// maxKeysPerMessage keeps one WatchChangesResponse (at most about 515
	// KiB) well under grpc-go's default 4 MiB receive limit.
	maxKeysPerMessage = 1000
)

// WithChangeBuffer bounds how many distinct evaluation keys one
// WatchChanges stream holds while its caller is slow to read them
// (default 10000). A stream that would hold more is ended with
// RESOURCE_EXHAUSTED, which makes its caller reopen it and re-evaluate
// everything.
func WithChangeBuffer(keys int) Option {
	return func(c *config) { c.changeBuffer = keys }
}

// Changed implements Notifier.
func (s *Server) Changed(keys ...string) error {
	if !s.watchesChanges() {
		return fmt.Errorf("sdk: Changed: provider %s does not declare CAPABILITY_WATCH_CHANGES in its Info, so sluice never opens a WatchChanges stream to send changes on", s.info.GetName())
	}
	valid, err := validKeys(keys)
	for _, ended := range s.changes.publish(valid) {
		s.cfg.log.Info("ended a WatchChanges stream whose caller did not read its changes; the caller reopens it and calls Evaluate again for everything it holds",
			"bufferedKeys", ended.capacity)
	}
	if err != nil {
		return fmt.Errorf("sdk: Changed: %w", err)
	}
	return nil
}

// CloseWatchStreams ends every open WatchChanges stream with UNAVAILABLE
// and refuses new ones. Serve calls it as its shutdown begins, so that
// open streams do not hold up the drain of calls in flight; call it before
// GracefulStop of a gRPC server you run yourself (Register).
func (s *Server) CloseWatchStreams() { s.changes.close() }

func (s *Server) watchesChanges() bool {
	return slices.Contains(s.info.GetCapabilities(), checksv1.Capability_CAPABILITY_WATCH_CHANGES)
}

// validKeys returns the keys that may be sent and an error naming each
// that may not.
func validKeys(keys []string) ([]string, error) {
	valid := make([]string, 0, len(keys))
	var errs []error
	for i, k := range keys {
		switch {
		case k == "":
			errs = append(errs, fmt.Errorf("keys[%d]: evaluation key is empty", i))
		case len(k) > checkvalidate.MaxEvaluationKeyBytes:
			errs = append(errs, fmt.Errorf("keys[%d]: evaluation key is %d bytes, longer than %d", i, len(k), checkvalidate.MaxEvaluationKeyBytes))
		default:
			valid = append(valid, k)
		}
	}
	return valid, errors.Join(errs...)
}

// WatchChanges streams the keys the provider pushes with Changed until the
// caller ends the stream, its buffer overflows or Serve shuts down.
func (c checkService) WatchChanges(_ *checksv1.WatchChangesRequest, stream grpc.ServerStreamingServer[checksv1.WatchChangesResponse]) error {
	if !c.s.watchesChanges() {
		return status.Errorf(codes.Unimplemented, "provider %s does not declare CAPABILITY_WATCH_CHANGES", c.s.info.GetName())
	}
	buf, err := c.s.changes.open()
	if err != nil {
		return err
	}
	defer c.s.changes.remove(buf)
	if err := c.s.watchOpened(); err != nil {
		return err
	}
	// Headers say the stream is registered: a caller that has them gets
	// every key pushed from then on.
	if err := stream.SendHeader(nil); err != nil {
		return err
	}
	ctx := stream.Context()
	for {
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-c.s.changes.closed:
			return status.Errorf(codes.Unavailable, "provider %s is shutting down; open the stream again and call Evaluate again for every evaluation", c.s.info.GetName())
		case <-buf.ready:
		}
		keys, overflowed := buf.take()
		if overflowed {
			return c.s.callError("WatchChanges", status.Errorf(codes.ResourceExhausted,
				"more than %d changed evaluation keys waited to be sent on this stream; open it again and call Evaluate again for every evaluation", buf.capacity))
		}
		if err := sendKeys(stream, keys); err != nil {
			return err
		}
	}
}

// watchOpened tells a WatchObserver Checker that a stream opened; a
// panic in it ends the stream with INTERNAL.
func (s *Server) watchOpened() (err error) {
	o, ok := s.checker.(WatchObserver)
	if !ok {
		return nil
	}
	defer s.recoverPanic("WatchOpened", &err)
	o.WatchOpened()
	return nil
}

// sendKeys sends keys in messages of at most maxKeysPerMessage keys.
func sendKeys(stream grpc.ServerStreamingServer[checksv1.WatchChangesResponse], keys []string) error {
	for chunk := range slices.Chunk(keys, maxKeysPerMessage) {
		if err := stream.Send(&checksv1.WatchChangesResponse{EvaluationKeys: chunk}); err != nil {
			return err
		}
	}
	return nil
}

// changeHub fans the keys pushed with Changed out to the buffer of every
// open WatchChanges stream.
type changeHub struct {
	capacity int           // of each stream's buffer
	closed   chan struct{} // closed when the hub stops serving streams

	mu      sync.Mutex
	buffers map[*changeBuffer]struct{}
	done    bool // closed has been closed
}

func newChangeHub(capacity int) *changeHub {
	return &changeHub{capacity: capacity, closed: make(chan struct{}), buffers: map[*changeBuffer]struct{}{}}
}

// open registers a buffer for a new stream; after close it refuses.
func (h *changeHub) open() (*changeBuffer, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done {
		return nil, status.Error(codes.Unavailable, "provider is shutting down")
	}
	b := newChangeBuffer(h.capacity)
	h.buffers[b] = struct{}{}
	return b, nil
}

func (h *changeHub) remove(b *changeBuffer) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.buffers, b)
}

// publish adds keys to every buffer and returns the buffers that
// overflowed, which it no longer feeds.
func (h *changeHub) publish(keys []string) []*changeBuffer {
	if len(keys) == 0 {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var overflowed []*changeBuffer
	for b := range h.buffers {
		if !b.add(keys) {
			delete(h.buffers, b)
			overflowed = append(overflowed, b)
		}
	}
	return overflowed
}

// streams is how many streams are open, for tests.
func (h *changeHub) streams() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.buffers)
}

func (h *changeHub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.done {
		h.done = true
		close(h.closed)
	}
}

// changeBuffer holds the keys one stream has not sent yet, each once, in
// the order they were first pushed.
type changeBuffer struct {
	capacity int
	ready    chan struct{} // holds a token while keys wait or the buffer overflowed

	mu         sync.Mutex
	keys       []string
	queued     map[string]struct{}
	overflowed bool
}

func newChangeBuffer(capacity int) *changeBuffer {
	return &changeBuffer{capacity: capacity, ready: make(chan struct{}, 1), queued: map[string]struct{}{}}
}

// add queues the keys not already waiting. It reports false, and drops
// everything, when they do not fit: the stream must end.
func (b *changeBuffer) add(keys []string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.overflowed {
		return false
	}
	for _, k := range keys {
		if _, waiting := b.queued[k]; waiting {
			continue
		}
		if len(b.keys) == b.capacity {
			b.overflowed = true
			b.keys, b.queued = nil, nil
			b.wake()
			return false
		}
		b.queued[k] = struct{}{}
		b.keys = append(b.keys, k)
	}
	b.wake()
	return true
}

// take returns the waiting keys and empties the buffer.
func (b *changeBuffer) take() (keys []string, overflowed bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.overflowed {
		return nil, true
	}
	keys = b.keys
	b.keys, b.queued = nil, map[string]struct{}{}
	return keys, false
}

func (b *changeBuffer) wake() {
	select {
	case b.ready <- struct{}{}:
	default:
	}
}
