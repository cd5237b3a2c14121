package checks

import (
	"errors"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/test/fakecheck"
)

// An open WatchChanges stream is a call in flight: the idle sweep leaves
// its connection alone until the stream ends.
func TestWatchChangesHoldsItsConnection(t *testing.T) {
	fake := fakecheck.StartT(t, fakecheck.WithCapabilities(checksv1.Capability_CAPABILITY_WATCH_CHANGES))
	p := newTestPool(t, WithIdleTimeout(testIdleTimeout))
	ac := checkFor(fake.Target())
	st, err := p.WatchChanges(testCtx(t), ac)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Opened(); err != nil {
		t.Fatalf("Opened: %v", err)
	}
	if _, inFlight, ok := entry(p, fake.Target()); !ok || inFlight != 1 {
		t.Fatalf("pool entry held %v with %d calls in flight, want the stream counted", ok, inFlight)
	}
	// Sweeps every idle timeout / 2: four of them span more than the
	// idle timeout.
	waitSweeps(t, p, 4)
	if _, _, ok := entry(p, fake.Target()); !ok {
		t.Fatal("the connection of an open stream was swept as idle")
	}

	if n := fake.Push("u/r/c"); n != 1 {
		t.Fatalf("pushed on %d streams, want 1", n)
	}
	if keys, err := st.Recv(); err != nil || !slices.Equal(keys, []string{"u/r/c"}) {
		t.Fatalf("Recv = %v, %v; want the pushed key", keys, err)
	}
	fake.DropWatches()
	if _, err := st.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("Recv after the provider dropped the stream: %v, want UNAVAILABLE", err)
	}
	waitFor(t, "the idle connection swept once the stream ended", func() bool {
		_, _, ok := entry(p, fake.Target())
		return !ok
	})
}

// A provider that does not serve WatchChanges ends the stream unopened;
// Recv says why, and the connection is given back.
func TestWatchChangesUnimplemented(t *testing.T) {
	fake := fakecheck.StartT(t)
	p := newTestPool(t, WithIdleTimeout(0))
	st, err := p.WatchChanges(testCtx(t), checkFor(fake.Target()))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Opened(); !errors.Is(err, ErrEndedUnopened) {
		t.Fatalf("Opened = %v, want ErrEndedUnopened", err)
	}
	if _, err := st.Recv(); status.Code(err) != codes.Unimplemented {
		t.Fatalf("Recv = %v, want UNIMPLEMENTED", err)
	}
	if _, inFlight, _ := entry(p, fake.Target()); inFlight != 0 {
		t.Fatalf("%d calls in flight after the stream ended, want 0", inFlight)
	}
	st.Close() // after the end, and twice, is fine
	st.Close()
}
