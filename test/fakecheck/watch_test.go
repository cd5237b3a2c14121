package fakecheck

import (
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
)

var watchCaps = WithCapabilities(checksv1.Capability_CAPABILITY_RELEASE, checksv1.Capability_CAPABILITY_WATCH_CHANGES)

func TestWatchPushesDropsAndRefuses(t *testing.T) {
	p := StartT(t, watchCaps)
	client, _ := dial(t, p)
	ctx := ctxT(t)

	st, err := client.WatchChanges(ctx, &checksv1.WatchChangesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if md, err := st.Header(); err != nil || md == nil {
		t.Fatalf("Header = %v, %v; want the headers sent on open", md, err)
	}
	if err := p.WaitWatchOpens(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if n := p.Push("u/r/c", "u/r/d"); n != 1 {
		t.Fatalf("Push sent on %d streams, want 1", n)
	}
	resp, err := st.Recv()
	if err != nil || !slices.Equal(resp.GetEvaluationKeys(), []string{"u/r/c", "u/r/d"}) {
		t.Fatalf("Recv = %v, %v; want the pushed keys", resp, err)
	}

	p.DropWatches()
	if _, err := st.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("Recv after DropWatches: %v, want UNAVAILABLE", err)
	}

	p.SetWatchRefusal(codes.Unavailable)
	refused, err := client.WatchChanges(ctx, &checksv1.WatchChangesRequest{})
	if err == nil {
		_, err = refused.Recv()
	}
	if status.Code(err) != codes.Unavailable || p.WatchRefusals() != 1 {
		t.Fatalf("WatchChanges while refused: %v (%d refusals), want UNAVAILABLE", err, p.WatchRefusals())
	}
	p.SetWatchRefusal(codes.OK)
	again, err := client.WatchChanges(ctx, &checksv1.WatchChangesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := again.Header(); err != nil {
		t.Fatal(err)
	}
	if err := p.WaitWatchOpens(ctx, 2); err != nil {
		t.Fatal(err)
	}
}

func TestWatchNeedsTheCapability(t *testing.T) {
	p := StartT(t)
	client, _ := dial(t, p)
	st, err := client.WatchChanges(ctxT(t), &checksv1.WatchChangesRequest{})
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("WatchChanges without CAPABILITY_WATCH_CHANGES: %v, want UNIMPLEMENTED", err)
	}
	if p.WatchOpens() != 0 {
		t.Fatalf("%d streams opened, want none", p.WatchOpens())
	}
}
