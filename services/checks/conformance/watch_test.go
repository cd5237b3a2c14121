package conformance

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/services/checks/sdk"
	"github.com/sluice-dev/sluice/services/checks/sdk/sdktest"
)

// watchingChecker answers READY and keeps the Notifier the SDK gives it,
// so that a test's trigger can push.
type watchingChecker struct {
	notifier sdk.Notifier
}

func (*watchingChecker) Evaluate(context.Context, *checksv1.EvaluateRequest) (*checksv1.EvaluateResponse, error) {
	return sdk.Ready(), nil
}

func (*watchingChecker) Release(context.Context, *checksv1.ReleaseRequest) error { return nil }

func (c *watchingChecker) SetNotifier(n sdk.Notifier) { c.notifier = n }

// startWatching serves a watchingChecker through the SDK.
func startWatching(t *testing.T) (*grpc.ClientConn, *watchingChecker) {
	t.Helper()
	c := &watchingChecker{}
	info := sdk.Info{Name: "watch.checks.example.com", Capabilities: []checksv1.Capability{checksv1.Capability_CAPABILITY_WATCH_CHANGES}}
	conn, err := Dial(sdktest.Start(t, info, c))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, c
}

// watchDefect is how a hand-written provider that advertises
// CAPABILITY_WATCH_CHANGES gets WatchChanges wrong.
type watchDefect int

const (
	watchUnimplemented watchDefect = iota // answers UNIMPLEMENTED, as the generated stub does
	watchEndsEarly                        // ends the stream, without an error, soon after it opens
	watchSendsEmptyKey                    // pushes "" as soon as the stream opens
)

// rawWatcher is a rawProvider that advertises CAPABILITY_WATCH_CHANGES
// and serves WatchChanges with a defect.
type rawWatcher struct {
	*rawProvider
	defect watchDefect
}

func (p rawWatcher) GetProviderInfo(ctx context.Context, req *checksv1.GetProviderInfoRequest) (*checksv1.GetProviderInfoResponse, error) {
	info, err := p.rawProvider.GetProviderInfo(ctx, req)
	if err == nil {
		info.Capabilities = append(info.Capabilities, checksv1.Capability_CAPABILITY_WATCH_CHANGES)
	}
	return info, err
}

func (p rawWatcher) WatchChanges(_ *checksv1.WatchChangesRequest, stream grpc.ServerStreamingServer[checksv1.WatchChangesResponse]) error {
	switch p.defect {
	case watchEndsEarly:
		select {
		case <-time.After(200 * time.Millisecond):
			return nil
		case <-stream.Context().Done():
			return stream.Context().Err()
		}
	case watchSendsEmptyKey:
		if err := stream.Send(&checksv1.WatchChangesResponse{EvaluationKeys: []string{""}}); err != nil {
			return err
		}
		<-stream.Context().Done()
		return stream.Context().Err()
	default:
		return status.Error(codes.Unimplemented, "method WatchChanges not implemented")
	}
}

func startRawWatcher(t *testing.T, defect watchDefect) *grpc.ClientConn {
	p := rawWatcher{rawProvider: &rawProvider{evaluated: map[string]int{}, released: map[string]bool{}, licenses: map[string]string{}}, defect: defect}
	return serveGRPC(t, []grpc.ServerOption{permitKitPings}, func(gs *grpc.Server) {
		checksv1.RegisterIdentityServiceServer(gs, p)
		checksv1.RegisterCheckServiceServer(gs, p)
	})
}

func TestWatchChanges(t *testing.T) {
	type trigger func(c *watchingChecker) func(context.Context, string) error
	pushKey := func(c *watchingChecker) func(context.Context, string) error {
		return func(_ context.Context, key string) error { return c.notifier.Changed(key) }
	}
	tests := []struct {
		name       string
		conn       func(t *testing.T) (*grpc.ClientConn, *watchingChecker)
		trigger    trigger
		wantOpen   Outcome
		wantPushed Outcome
		wantDetail map[string]string // case -> substring of its detail
	}{
		{
			name: "SDK provider that pushes the changed key", conn: startWatching, trigger: pushKey,
			wantOpen: Passed, wantPushed: Passed,
		},
		{
			name: "SDK provider without a trigger", conn: startWatching,
			wantOpen: Passed, wantPushed: Skipped,
			wantDetail: map[string]string{"WatchChanges/PushedKeys": "--trigger-change-command"},
		},
		{
			name: "provider that never pushes", conn: startWatching,
			trigger: func(*watchingChecker) func(context.Context, string) error {
				return func(context.Context, string) error { return nil }
			},
			wantOpen: Passed, wantPushed: Failed,
			wantDetail: map[string]string{"WatchChanges/PushedKeys": "did not push key"},
		},
		{
			name: "provider that pushes a key the kit never sent", conn: startWatching,
			trigger: func(c *watchingChecker) func(context.Context, string) error {
				return func(context.Context, string) error { return c.notifier.Changed("someone-else/res-1/check") }
			},
			wantOpen: Passed, wantPushed: Failed,
			wantDetail: map[string]string{"WatchChanges/PushedKeys": `pushed key "someone-else/res-1/check", which the kit never sent`},
		},
		{
			name: "trigger that fails", conn: startWatching,
			trigger: func(*watchingChecker) func(context.Context, string) error {
				return func(context.Context, string) error { return errors.New("backend down") }
			},
			wantOpen: Passed, wantPushed: Failed,
			wantDetail: map[string]string{"WatchChanges/PushedKeys": "making the provider change its answer for key"},
		},
		{
			name: "capability without WatchChanges", conn: rawWatcherConn(watchUnimplemented), trigger: pushKey,
			wantOpen: Failed, wantPushed: Skipped,
			wantDetail: map[string]string{
				"WatchChanges/Open":       "WatchChanges answered UNIMPLEMENTED",
				"WatchChanges/PushedKeys": "needs the stream of WatchChanges/Open",
			},
		},
		{
			name: "stream that ends on its own", conn: rawWatcherConn(watchEndsEarly),
			wantOpen: Failed, wantPushed: Skipped,
			wantDetail: map[string]string{"WatchChanges/Open": "ended the WatchChanges stream after"},
		},
		{
			name: "empty key pushed", conn: rawWatcherConn(watchSendsEmptyKey),
			wantOpen: Failed, wantPushed: Skipped,
			wantDetail: map[string]string{"WatchChanges/Open": "evaluation_keys[0] empty"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn, checker := tt.conn(t)
			opts := Options{ReadyTimeout: 500 * time.Millisecond, Timeout: 2 * time.Second, WatchIdle: time.Second}
			if tt.trigger != nil {
				opts.TriggerChange = tt.trigger(checker)
			}
			got := resultsByName(RunAll(t.Context(), conn, opts))
			for name, want := range map[string]Outcome{"WatchChanges/Open": tt.wantOpen, "WatchChanges/PushedKeys": tt.wantPushed} {
				if got[name].Outcome != want {
					t.Errorf("%s = %s %q, want %s", name, got[name].Outcome, got[name].Detail, want)
				}
			}
			for name, w := range tt.wantDetail {
				if !strings.Contains(got[name].Detail, w) {
					t.Errorf("%s detail %q does not contain %q", name, got[name].Detail, w)
				}
			}
		})
	}
}

// rawWatcherConn starts a rawWatcher with defect; it has no checker.
func rawWatcherConn(defect watchDefect) func(t *testing.T) (*grpc.ClientConn, *watchingChecker) {
	return func(t *testing.T) (*grpc.ClientConn, *watchingChecker) {
		return startRawWatcher(t, defect), &watchingChecker{}
	}
}

func resultsByName(results []Result) map[string]Result {
	m := map[string]Result{}
	for _, r := range results {
		m[r.Name] = r
	}
	return m
}

// TestWatchChangesRunAsSubtests runs the kit as a vendor's Go test does:
// the stream Open leaves must outlive Open's subtest for PushedKeys.
func TestWatchChangesRunAsSubtests(t *testing.T) {
	conn, checker := startWatching(t)
	triggered := false
	Run(t, conn, Options{
		WatchIdle: 500 * time.Millisecond,
		TriggerChange: func(_ context.Context, key string) error {
			triggered = true
			return checker.notifier.Changed(key)
		},
	})
	// Run fails t if PushedKeys fails; it must not have skipped either.
	if !triggered {
		t.Fatal("WatchChanges/PushedKeys never triggered a change")
	}
}
