package fakecheck

import (
	"context"
	"fmt"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
)

// watchBuffer bounds the pushes a stream may fall behind by; a stream
// further behind is dropped, as a real provider would drop a slow caller.
const watchBuffer = 256

// watchStream is one open WatchChanges stream.
type watchStream struct {
	keys chan []string
	drop chan struct{} // closed to end the stream with UNAVAILABLE
}

// watchInterceptor serves CheckService.WatchChanges for a fake that
// declares CAPABILITY_WATCH_CHANGES, in place of the SDK's handler: the
// fake pushes what the test says, when it says it. Other calls pass.
func (p *Provider) watchInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if info.FullMethod != checksv1.CheckService_WatchChanges_FullMethodName || !slices.Contains(p.caps, checksv1.Capability_CAPABILITY_WATCH_CHANGES) {
		return handler(srv, ss)
	}
	var req checksv1.WatchChangesRequest
	if err := ss.RecvMsg(&req); err != nil {
		return err
	}
	w, err := p.openWatch()
	if err != nil {
		return err
	}
	defer p.closeWatch(w)
	// Registered first, then the headers: a caller that sees them open
	// misses no push made after.
	if err := ss.SendHeader(metadata.MD{}); err != nil {
		return err
	}
	for {
		select {
		case keys := <-w.keys:
			if err := ss.SendMsg(&checksv1.WatchChangesResponse{EvaluationKeys: keys}); err != nil {
				return err
			}
		case <-w.drop:
			return status.Error(codes.Unavailable, "fakecheck: stream dropped by the test")
		case <-ss.Context().Done():
			return status.FromContextError(ss.Context().Err()).Err()
		}
	}
}

// openWatch registers a new stream, or refuses it as SetWatchRefusal says.
func (p *Provider) openWatch() (*watchStream, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	defer p.notifyLocked()
	if p.watchRefusal != codes.OK {
		p.watchRefused++
		return nil, status.Errorf(p.watchRefusal, "fakecheck: WatchChanges refused by the test")
	}
	w := &watchStream{keys: make(chan []string, watchBuffer), drop: make(chan struct{})}
	p.watches[w] = struct{}{}
	p.watchOpens++
	return w, nil
}

func (p *Provider) closeWatch(w *watchStream) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.watches, w)
	p.notifyLocked()
}

// Push sends the evaluation keys, as one message, on every open
// WatchChanges stream. A stream whose buffer is full is dropped instead.
// It returns how many streams it was sent on.
func (p *Provider) Push(keys ...string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for w := range p.watches {
		select {
		case w.keys <- slices.Clone(keys):
			n++
		default:
			p.dropLocked(w)
		}
	}
	return n
}

// DropWatches ends every open WatchChanges stream with UNAVAILABLE, as a
// provider whose connection broke.
func (p *Provider) DropWatches() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for w := range p.watches {
		p.dropLocked(w)
	}
}

func (p *Provider) dropLocked(w *watchStream) {
	delete(p.watches, w)
	close(w.drop)
}

// SetWatchRefusal makes new WatchChanges streams fail with code at once
// (codes.OK: accept them again). Streams already open are not affected;
// DropWatches ends them.
func (p *Provider) SetWatchRefusal(code codes.Code) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.watchRefusal = code
}

// WatchOpens is the number of WatchChanges streams the fake accepted.
func (p *Provider) WatchOpens() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.watchOpens
}

// WatchRefusals is the number of WatchChanges streams the fake refused.
func (p *Provider) WatchRefusals() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.watchRefused
}

// OpenWatches is the number of WatchChanges streams open now.
func (p *Provider) OpenWatches() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.watches)
}

// WaitWatchOpens waits until the fake accepted at least n WatchChanges
// streams and one is open, or ctx ends.
func (p *Provider) WaitWatchOpens(ctx context.Context, n int) error {
	return p.waitFor(ctx, func() bool { return p.WatchOpens() >= n && p.OpenWatches() > 0 },
		func() string { return fmt.Sprintf("%d WatchChanges streams opened, one open", n) })
}

// WaitWatchRefusals waits until the fake refused at least n WatchChanges
// streams, or ctx ends.
func (p *Provider) WaitWatchRefusals(ctx context.Context, n int) error {
	return p.waitFor(ctx, func() bool { return p.WatchRefusals() >= n },
		func() string { return fmt.Sprintf("%d WatchChanges streams refused", n) })
}
