package sdk

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
)

// watchInfo declares CAPABILITY_WATCH_CHANGES.
var watchInfo = Info{
	Name:         "watch.checks.sluice.dev",
	Capabilities: []checksv1.Capability{checksv1.Capability_CAPABILITY_WATCH_CHANGES},
}

type keyStream = grpc.ServerStreamingClient[checksv1.WatchChangesResponse]

// openWatch opens a WatchChanges stream on conn and waits for its
// headers, which the SDK sends once the stream is registered.
func openWatch(t *testing.T, conn *grpc.ClientConn) keyStream {
	t.Helper()
	stream, err := checksv1.NewCheckServiceClient(conn).WatchChanges(callCtx(t), &checksv1.WatchChangesRequest{})
	if err != nil {
		t.Fatalf("WatchChanges: %v", err)
	}
	if _, err := stream.Header(); err != nil {
		t.Fatalf("WatchChanges headers: %v", err)
	}
	return stream
}

// recvMessage receives one message's keys; the stream's context bounds
// the wait.
func recvMessage(t *testing.T, stream keyStream) []string {
	t.Helper()
	resp, err := stream.Recv()
	if err != nil {
		t.Fatalf("Recv: %v", err)
	}
	return resp.GetEvaluationKeys()
}

// recvKeys receives messages until n keys have arrived and returns them
// in order.
func recvKeys(t *testing.T, stream keyStream, n int) []string {
	t.Helper()
	var keys []string
	for len(keys) < n {
		keys = append(keys, recvMessage(t, stream)...)
	}
	return keys
}

// dialServer connects to srv, served on 127.0.0.1 until the test ends,
// with extra dial options.
func dialServer(t *testing.T, srv *Server, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve returned %v after shutdown, want nil", err)
		}
	})
	return conn
}

func TestWatchChangesWithoutCapability(t *testing.T) {
	conn, srv := serve(t, &scripted{})
	stream, err := checksv1.NewCheckServiceClient(conn).WatchChanges(callCtx(t), &checksv1.WatchChangesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = stream.Recv()
	if status.Code(err) != codes.Unimplemented || !strings.Contains(status.Convert(err).Message(), "does not declare CAPABILITY_WATCH_CHANGES") {
		t.Fatalf("Recv = %v, want UNIMPLEMENTED saying the capability is not declared", err)
	}
	if err := srv.Changed("k"); err == nil || !strings.Contains(err.Error(), "does not declare CAPABILITY_WATCH_CHANGES") {
		t.Fatalf("Changed = %v, want an error saying the capability is not declared", err)
	}
}

func TestChangedReachesEveryOpenStream(t *testing.T) {
	conn, srv := serveInfo(t, watchInfo, &scripted{})
	otherConn, err := grpc.NewClient(conn.Target(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer otherConn.Close()
	// Two streams on one connection and one on another, as replicas of
	// a caller would hold them.
	streams := []keyStream{openWatch(t, conn), openWatch(t, conn), openWatch(t, otherConn)}

	if err := srv.Changed("uid-1/res-1/a", "uid-2/res-1/a"); err != nil {
		t.Fatal(err)
	}
	for i, s := range streams {
		if got, want := recvKeys(t, s, 2), []string{"uid-1/res-1/a", "uid-2/res-1/a"}; !slices.Equal(got, want) {
			t.Errorf("stream %d received %q, want %q", i, got, want)
		}
	}
}

func TestChangedCoalescesWaitingKeys(t *testing.T) {
	conn, srv := serveInfo(t, watchInfo, &scripted{})
	stream := openWatch(t, conn)
	if err := srv.Changed("k1", "k2", "k1", "k1", "k2", "k3"); err != nil {
		t.Fatal(err)
	}
	if got, want := recvMessage(t, stream), []string{"k1", "k2", "k3"}; !slices.Equal(got, want) {
		t.Fatalf("first message = %q, want %q: each waiting key once, in push order", got, want)
	}
	// A key already sent is sent again when pushed again: it is a new change.
	if err := srv.Changed("k1"); err != nil {
		t.Fatal(err)
	}
	if got := recvMessage(t, stream); !slices.Equal(got, []string{"k1"}) {
		t.Fatalf("second message = %q, want [k1]", got)
	}
}

func TestChangeBuffer(t *testing.T) {
	tests := []struct {
		name           string
		capacity       int
		pushes         [][]string
		wantKeys       []string
		wantOverflowed bool
	}{
		{name: "keeps push order", capacity: 10, pushes: [][]string{{"a", "b"}, {"c"}}, wantKeys: []string{"a", "b", "c"}},
		{name: "coalesces within a push", capacity: 10, pushes: [][]string{{"a", "a", "b", "a"}}, wantKeys: []string{"a", "b"}},
		{name: "coalesces across pushes", capacity: 10, pushes: [][]string{{"a", "b"}, {"b", "a"}, {"c", "a"}}, wantKeys: []string{"a", "b", "c"}},
		{name: "duplicates do not count against capacity", capacity: 2, pushes: [][]string{{"a", "b"}, {"a", "b", "b"}}, wantKeys: []string{"a", "b"}},
		{name: "exactly full", capacity: 3, pushes: [][]string{{"a", "b", "c"}}, wantKeys: []string{"a", "b", "c"}},
		{name: "one more overflows", capacity: 3, pushes: [][]string{{"a", "b"}, {"c", "d"}}, wantOverflowed: true},
		{name: "overflow is final", capacity: 1, pushes: [][]string{{"a", "b"}, {"c"}}, wantOverflowed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newChangeBuffer(tt.capacity)
			for _, p := range tt.pushes {
				b.add(p)
			}
			select {
			case <-b.ready:
			default:
				t.Fatal("buffer not ready after pushes")
			}
			keys, overflowed := b.take()
			if overflowed != tt.wantOverflowed || !slices.Equal(keys, tt.wantKeys) {
				t.Fatalf("take() = %q, %v; want %q, %v", keys, overflowed, tt.wantKeys, tt.wantOverflowed)
			}
		})
	}
}

func TestStreamOpenedAfterPushMissesIt(t *testing.T) {
	conn, srv := serveInfo(t, watchInfo, &scripted{})
	early := openWatch(t, conn)
	if err := srv.Changed("old"); err != nil {
		t.Fatal(err)
	}
	if got := recvMessage(t, early); !slices.Equal(got, []string{"old"}) {
		t.Fatalf("open stream received %q, want [old]", got)
	}
	// The caller of a new stream re-evaluates everything, so it needs no
	// old pushes: its first message holds only what is pushed from now on.
	late := openWatch(t, conn)
	if err := srv.Changed("new"); err != nil {
		t.Fatal(err)
	}
	if got := recvMessage(t, late); !slices.Equal(got, []string{"new"}) {
		t.Fatalf("stream opened after the push received %q first, want [new]", got)
	}
}

func TestChangedRefusesInvalidKeys(t *testing.T) {
	longest := strings.Repeat("k", 512)
	tests := []struct {
		name    string
		keys    []string
		wantErr []string // substrings; none: no error
		wantOut []string // keys sent
	}{
		{name: "valid", keys: []string{"a", longest}, wantOut: []string{"a", longest}},
		{name: "empty", keys: []string{"a", ""}, wantErr: []string{"keys[1]: evaluation key is empty"}, wantOut: []string{"a"}},
		{name: "too long", keys: []string{longest + "k", "b"}, wantErr: []string{"keys[0]: evaluation key is 513 bytes, longer than 512"}, wantOut: []string{"b"}},
		{name: "all invalid", keys: []string{"", ""}, wantErr: []string{"keys[0]", "keys[1]"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn, srv := serveInfo(t, watchInfo, &scripted{})
			stream := openWatch(t, conn)
			err := srv.Changed(tt.keys...)
			if len(tt.wantErr) == 0 && err != nil {
				t.Fatalf("Changed = %v, want nil", err)
			}
			for _, w := range tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("Changed = %v, want an error containing %q", err, w)
				}
			}
			// A sentinel pushed after marks the end of what the call sent.
			if err := srv.Changed("sentinel"); err != nil {
				t.Fatal(err)
			}
			got := recvKeys(t, stream, len(tt.wantOut)+1)
			if want := append(slices.Clone(tt.wantOut), "sentinel"); !slices.Equal(got, want) {
				t.Fatalf("stream received %q, want %q", got, want)
			}
		})
	}
}

func TestChangedSplitsLargeBatches(t *testing.T) {
	conn, srv := serveInfo(t, watchInfo, &scripted{})
	stream := openWatch(t, conn)
	keys := make([]string, 2*maxKeysPerMessage+1)
	for i := range keys {
		keys[i] = fmt.Sprintf("uid-%d/res-1/check", i)
	}
	if err := srv.Changed(keys...); err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(got) < len(keys) {
		msg := recvMessage(t, stream)
		if len(msg) > maxKeysPerMessage {
			t.Fatalf("a message holds %d keys, want at most %d", len(msg), maxKeysPerMessage)
		}
		got = append(got, msg...)
	}
	if !slices.Equal(got, keys) {
		t.Fatalf("received %d keys, not the %d pushed in order", len(got), len(keys))
	}
}

// blockingStream is a WatchChanges stream whose Send blocks until
// released, as a caller that stopped reading makes it block.
type blockingStream struct {
	grpc.ServerStream // nil: only the methods below are called
	ctx               context.Context
	registered        chan struct{} // closed by SendHeader
	sending           chan []string // each Send's keys, before it blocks
	release           chan struct{} // closed to unblock every Send
}

func newBlockingStream(ctx context.Context) *blockingStream {
	return &blockingStream{ctx: ctx, registered: make(chan struct{}), sending: make(chan []string, 10), release: make(chan struct{})}
}

func (b *blockingStream) Context() context.Context { return b.ctx }

func (b *blockingStream) SendHeader(metadata.MD) error {
	close(b.registered)
	return nil
}

func (b *blockingStream) Send(m *checksv1.WatchChangesResponse) error {
	b.sending <- m.GetEvaluationKeys()
	<-b.release
	return nil
}

// TestOverflowEndsOnlyThatStream pushes to a stream whose caller stopped
// reading until its buffer overflows: Changed must not block, the other
// stream must get every key, and the stuck one must end with
// RESOURCE_EXHAUSTED once it can.
func TestOverflowEndsOnlyThatStream(t *testing.T) {
	const capacity = 3
	conn, srv := serveInfo(t, watchInfo, &scripted{}, WithChangeBuffer(capacity))
	reading := openWatch(t, conn)

	stuck := newBlockingStream(callCtx(t))
	ended := make(chan error, 1)
	go func() { ended <- (checkService{s: srv}).WatchChanges(&checksv1.WatchChangesRequest{}, stuck) }()
	<-stuck.registered

	push := func(keys ...string) {
		t.Helper()
		returned := make(chan error, 1)
		go func() { returned <- srv.Changed(keys...) }()
		select {
		case err := <-returned:
			if err != nil {
				t.Fatalf("Changed(%q) = %v", keys, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("Changed(%q) blocked on a stuck stream", keys)
		}
		if got := recvKeys(t, reading, len(keys)); !slices.Equal(got, keys) {
			t.Fatalf("reading stream received %q, want %q", got, keys)
		}
	}
	push("k1")
	if got := <-stuck.sending; !slices.Equal(got, []string{"k1"}) {
		t.Fatalf("stuck stream sends %q, want [k1]", got)
	}
	push("k2", "k3", "k4") // fills the stuck stream's buffer
	if n := srv.changes.streams(); n != 2 {
		t.Fatalf("%d streams registered with a full buffer, want 2", n)
	}
	push("k5") // one more than it holds
	if n := srv.changes.streams(); n != 1 {
		t.Fatalf("%d streams registered after the overflow, want 1", n)
	}
	push("k6") // the reading stream goes on

	close(stuck.release)
	select {
	case err := <-ended:
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "call Evaluate again for every evaluation") {
			t.Fatalf("stuck stream ended with %v, want RESOURCE_EXHAUSTED telling the caller to re-evaluate", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("stuck stream did not end after its Send returned")
	}
	select {
	case keys := <-stuck.sending:
		t.Fatalf("stuck stream sent %q after it overflowed, want nothing", keys)
	default:
	}
}

// TestOverflowOfACallerThatStopsReading is TestOverflowEndsOnlyThatStream
// over gRPC: the stuck caller's stream window fills, the SDK's Send
// blocks, and its buffer overflows.
func TestOverflowOfACallerThatStopsReading(t *testing.T) {
	srv, err := NewServer(watchInfo, &scripted{}, WithChangeBuffer(50))
	if err != nil {
		t.Fatal(err)
	}
	// A fixed 64 KiB window (no BDP growth): the stuck caller takes at
	// most that before the SDK's Send blocks.
	stuckConn := dialServer(t, srv, grpc.WithInitialWindowSize(1<<16), grpc.WithInitialConnWindowSize(1<<16))
	readingConn, err := grpc.NewClient(stuckConn.Target(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer readingConn.Close()
	stuck := openWatch(t, stuckConn)
	reading := openWatch(t, readingConn)

	pad := strings.Repeat("x", 400)
	deadline := time.Now().Add(20 * time.Second)
	for batch := 0; srv.changes.streams() == 2; batch++ {
		if time.Now().After(deadline) {
			t.Fatalf("the stuck stream has not overflowed after %d batches", batch)
		}
		keys := make([]string, 40)
		for i := range keys {
			keys[i] = fmt.Sprintf("%s/%d/%d", pad, batch, i)
		}
		start := time.Now()
		if err := srv.Changed(keys...); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("Changed took %s with a stuck stream, want no blocking", d)
		}
		if got := recvKeys(t, reading, len(keys)); !slices.Equal(got, keys) {
			t.Fatalf("batch %d: reading stream received %d keys, not the %d pushed", batch, len(got), len(keys))
		}
	}
	// Reading now drains what was sent, then the error.
	for {
		_, err := stuck.Recv()
		if err == nil {
			continue
		}
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("stuck stream ended with %v, want RESOURCE_EXHAUSTED", err)
		}
		break
	}
}

func TestServeEndsWatchStreams(t *testing.T) {
	// A long timeout: Serve must not wait for it because of open streams.
	srv, err := NewServer(watchInfo, &scripted{}, WithShutdownTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	streams := []keyStream{openWatch(t, conn), openWatch(t, conn)}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return within 10s with open WatchChanges streams (shutdown timeout 1m)")
	}
	for i, s := range streams {
		if _, err := s.Recv(); status.Code(err) != codes.Unavailable {
			t.Errorf("stream %d ended with %v, want UNAVAILABLE", i, err)
		}
	}
	if err := srv.Changed("after"); err != nil {
		t.Errorf("Changed after shutdown = %v, want nil (no stream to send to)", err)
	}
}

func TestCloseWatchStreamsRefusesNewStreams(t *testing.T) {
	conn, srv := serveInfo(t, watchInfo, &scripted{})
	srv.CloseWatchStreams()
	stream, err := checksv1.NewCheckServiceClient(conn).WatchChanges(callCtx(t), &checksv1.WatchChangesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("stream opened after CloseWatchStreams ended with %v, want UNAVAILABLE", err)
	}
}

// notified is a Checker that keeps the Notifier NewServer gives it.
type notified struct {
	scripted
	n Notifier
}

func (c *notified) SetNotifier(n Notifier) { c.n = n }

func TestNewServerGivesNotifier(t *testing.T) {
	tests := []struct {
		name    string
		info    Info
		opts    []Option
		wantErr string
	}{
		{name: "declared", info: watchInfo},
		{name: "not declared", info: testInfo, wantErr: "implements sdk.NotifierSetter"},
		{name: "zero buffer", info: watchInfo, opts: []Option{WithChangeBuffer(0)}, wantErr: "WithChangeBuffer(0): must be positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &notified{}
			srv, err := NewServer(tt.info, c, tt.opts...)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("NewServer = %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.n != Notifier(srv) {
				t.Fatalf("SetNotifier got %v, want the Server", c.n)
			}
		})
	}
}

// observing is a Checker that hears of every WatchChanges stream and
// pushes a key of its own from WatchOpened.
type observing struct {
	*scripted
	panics bool

	mu       sync.Mutex
	notifier Notifier
	opened   int
}

func (o *observing) SetNotifier(n Notifier) { o.notifier = n }

func (o *observing) WatchOpened() {
	if o.panics {
		panic("observer broke")
	}
	o.mu.Lock()
	o.opened++
	key := fmt.Sprintf("opened-%d", o.opened)
	o.mu.Unlock()
	// A key pushed now reaches the stream that just opened.
	if err := o.notifier.Changed(key); err != nil {
		panic(err)
	}
}

func (o *observing) openedCount() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.opened
}

// TestWatchObserver: WatchOpened is called once per stream, before the
// stream's headers, and what it pushes reaches that stream and every
// other open one.
func TestWatchObserver(t *testing.T) {
	checker := &observing{scripted: &scripted{}}
	conn, _ := serveInfo(t, watchInfo, checker)

	first := openWatch(t, conn)
	if n := checker.openedCount(); n != 1 {
		t.Fatalf("WatchOpened called %d times once the first stream's headers arrived, want 1", n)
	}
	if got := recvMessage(t, first); !slices.Equal(got, []string{"opened-1"}) {
		t.Fatalf("first stream received %q, want [opened-1]: the key pushed as it opened", got)
	}
	second := openWatch(t, conn)
	if n := checker.openedCount(); n != 2 {
		t.Fatalf("WatchOpened called %d times once the second stream's headers arrived, want 2", n)
	}
	for name, s := range map[string]keyStream{"first": first, "second": second} {
		if got := recvMessage(t, s); !slices.Equal(got, []string{"opened-2"}) {
			t.Errorf("%s stream received %q, want [opened-2]", name, got)
		}
	}
}

func TestWatchObserverPanicEndsTheStream(t *testing.T) {
	conn, _ := serveInfo(t, watchInfo, &observing{scripted: &scripted{}, panics: true})
	stream, err := checksv1.NewCheckServiceClient(conn).WatchChanges(callCtx(t), &checksv1.WatchChangesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = stream.Recv()
	if status.Code(err) != codes.Internal || !strings.Contains(status.Convert(err).Message(), "panicked in WatchOpened") {
		t.Fatalf("Recv = %v, want INTERNAL saying WatchOpened panicked", err)
	}
}
