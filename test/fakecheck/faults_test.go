package fakecheck

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/checkvalidate"
	"github.com/sluice-dev/sluice/pkg/podset"
)

var updatesCap = []checksv1.Capability{checksv1.Capability_CAPABILITY_POD_SET_UPDATES}

// listening reports whether something accepts TCP connections on addr.
func listening(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func TestErrorCycle(t *testing.T) {
	p := StartT(t)
	client, _ := dial(t, p)
	call := func() codes.Code {
		t.Helper()
		_, err := client.Evaluate(ctxT(t), request("ns", "w", "k"))
		return status.Code(err)
	}

	steps := []struct {
		name string
		set  func()
		want []codes.Code
	}{
		{name: "cycle", set: func() { p.SetErrorCycle(codes.Unavailable, codes.OK, codes.Internal) },
			want: []codes.Code{codes.Unavailable, codes.OK, codes.Internal, codes.Unavailable, codes.OK, codes.Internal}},
		{name: "setting a cycle starts it over", set: func() { p.SetErrorCycle(codes.OK, codes.Aborted) },
			want: []codes.Code{codes.OK, codes.Aborted, codes.OK}},
		{name: "empty cycle answers", set: func() { p.SetErrorCycle() },
			want: []codes.Code{codes.OK, codes.OK}},
		{name: "SetError fails every call", set: func() { p.SetError(codes.ResourceExhausted) },
			want: []codes.Code{codes.ResourceExhausted, codes.ResourceExhausted}},
		{name: "SetError(OK) answers", set: func() { p.SetError(codes.OK) },
			want: []codes.Code{codes.OK}},
	}
	total := 0
	for _, st := range steps {
		st.set()
		for i, want := range st.want {
			if got := call(); got != want {
				t.Errorf("%s: call %d failed with %s, want %s", st.name, i, got, want)
			}
		}
		total += len(st.want)
	}
	if got := p.EvaluateCount("ns", "w"); got != total {
		t.Errorf("EvaluateCount = %d, want %d: failed calls are recorded too", got, total)
	}
}

func TestDownAndUp(t *testing.T) {
	p := StartT(t)
	target := p.Target()
	client, _ := dial(t, p)
	ready := &checksv1.EvaluateResponse{State: checksv1.State_STATE_READY, Reason: "Back"}

	if _, err := client.Evaluate(ctxT(t), request("ns", "w", "k")); err != nil {
		t.Fatalf("Evaluate while serving: %v", err)
	}
	// A call in flight when the fake goes down is cut off.
	p.SetDelay(time.Minute)
	inFlight := make(chan error, 1)
	go func() {
		_, err := client.Evaluate(ctxT(t), request("ns", "w", "k"))
		inFlight <- err
	}()
	if err := p.WaitEvaluated(ctxT(t), "ns", "w", 2); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	p.Down()
	if d := time.Since(started); d > 5*time.Second {
		t.Errorf("Down took %s with a call in flight, want about the 1s shutdown timeout", d)
	}
	if err := <-inFlight; status.Code(err) != codes.Unavailable {
		t.Errorf("call in flight at Down: %v, want UNAVAILABLE", err)
	}
	p.SetDelay(0)
	p.Down() // idempotent

	if p.Serving() || listening(target) {
		t.Fatalf("after Down: Serving %t, %s accepts connections %t; want neither", p.Serving(), target, listening(target))
	}
	short, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := client.Evaluate(short, request("ns", "w", "k")); status.Code(err) != codes.Unavailable {
		t.Fatalf("Evaluate while down: %v, want UNAVAILABLE", err)
	}
	p.SetAnswer("ns", "w", ready) // the fake takes settings while down

	if err := p.Up(); err != nil {
		t.Fatal(err)
	}
	if err := p.Up(); err != nil { // idempotent
		t.Fatalf("second Up: %v", err)
	}
	if !p.Serving() || p.Target() != target || !listening(target) {
		t.Fatalf("after Up: Serving %t, target %s (want %s), listening %t", p.Serving(), p.Target(), target, listening(target))
	}
	// The client that saw the fake go reconnects on its own (after its
	// reconnect backoff) and gets the answer set while the fake was down.
	var resp *checksv1.EvaluateResponse
	var err error
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err = client.Evaluate(ctx, request("ns", "w", "k"))
		cancel()
		if err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || !proto.Equal(resp, ready) {
		t.Fatalf("Evaluate after Up = %v, %v; want %v", resp, err, ready)
	}
	if got := p.EvaluateCount("ns", "w"); got < 3 {
		t.Errorf("EvaluateCount = %d after Up, want the calls from before Down kept (at least 3)", got)
	}

	p.Stop()
	if err := p.Up(); err == nil || !strings.Contains(err.Error(), "stopped") {
		t.Errorf("Up after Stop = %v, want an error saying the fake was stopped", err)
	}
	if p.Serving() || listening(target) {
		t.Errorf("after Stop and Up: Serving %t, listening %t; want neither", p.Serving(), listening(target))
	}
}

func TestStartDown(t *testing.T) {
	p := StartT(t, WithDown(), WithDefaultAnswer(&checksv1.EvaluateResponse{State: checksv1.State_STATE_READY}))
	if p.Serving() || listening(p.Target()) {
		t.Fatalf("started WithDown, yet serving (%t) or listening on %s (%t)", p.Serving(), p.Target(), listening(p.Target()))
	}
	if p.Addr().String() != p.Target() {
		t.Errorf("Addr %s, Target %s; want the same address", p.Addr(), p.Target())
	}
	if err := p.Up(); err != nil {
		t.Fatal(err)
	}
	client, identity := dial(t, p)
	if resp, err := client.Evaluate(ctxT(t), request("ns", "w", "k")); err != nil || resp.GetState() != checksv1.State_STATE_READY {
		t.Fatalf("Evaluate after Up = %v, %v; want READY", resp, err)
	}
	if probe, err := identity.Probe(ctxT(t), &checksv1.ProbeRequest{}); err != nil || !probe.GetReady() {
		t.Fatalf("Probe after Up = %v, %v; want ready", probe, err)
	}
}

func TestUpAfterContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	p, err := Start(ctx, WithDown())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	cancel()
	if err := p.Up(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Up after Start's context ended = %v, want context.Canceled", err)
	}
}

func TestFlap(t *testing.T) {
	p := StartT(t)
	if err := p.Flap(context.Background(), 0, time.Second); err == nil {
		t.Error("Flap with up=0 returned nil, want an error")
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	flapped := make(chan error, 1)
	go func() { flapped <- p.Flap(ctx, 150*time.Millisecond, 150*time.Millisecond) }()

	// Watch the address until it has gone down and come back twice.
	changes, was := 0, true
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(20 * time.Second)
	for changes < 4 {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("saw %d changes between serving and not serving in 20s, want 4", changes)
		}
		if now := listening(p.Target()); now != was {
			changes++
			was = now
		}
	}
	cancel()
	if err := <-flapped; err != nil {
		t.Fatalf("Flap = %v, want nil when its context ends", err)
	}
	if !p.Serving() || !listening(p.Target()) {
		t.Errorf("after Flap: Serving %t, listening %t; want the fake left serving", p.Serving(), listening(p.Target()))
	}
}

// TestInvalidAnswers: the fake sends every invalid answer as it is, and
// each breaks exactly the rule it claims, which validation names with its
// field.
func TestInvalidAnswers(t *testing.T) {
	p := StartT(t)
	client, _ := dial(t, p)
	seen := map[string]bool{}
	for _, ia := range InvalidAnswers("main") {
		t.Run(ia.Name, func(t *testing.T) {
			if seen[ia.Name] {
				t.Fatalf("two invalid answers are named %q", ia.Name)
			}
			seen[ia.Name] = true
			p.SetAnswer("ns", ia.Name, ia.Answer)
			req := request("ns", ia.Name, "k")
			resp, err := client.Evaluate(ctxT(t), req)
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(resp, ia.Answer) {
				t.Fatalf("the fake sent %v, want %v unchanged", resp, ia.Answer)
			}
			err = checkvalidate.EvaluateResponse(req, resp, updatesCap)
			var list checkvalidate.ErrorList
			if !errors.As(err, &list) {
				t.Fatalf("validation = %v, want an ErrorList", err)
			}
			if len(list) != 1 || list[0].Path != ia.Field || !strings.Contains(list[0].Detail, ia.Rule) {
				t.Errorf("validation = %q, want exactly one error at %s saying %q", err, ia.Field, ia.Rule)
			}
		})
	}
}

// TestConflictingReady: two fakes answer READY with updates that are
// valid alone and conflict when one workload gets both.
func TestConflictingReady(t *testing.T) {
	a, b := ConflictingReady("main", "example.com/zone", "east", "west")
	fakeA, fakeB := StartT(t, WithDefaultAnswer(a)), StartT(t, WithDefaultAnswer(b))
	req := request("ns", "w", "k")
	var updates []podset.CheckUpdate
	for _, f := range []struct {
		check string
		p     *Provider
	}{{"check-a", fakeA}, {"check-b", fakeB}} {
		client, _ := dial(t, f.p)
		resp, err := client.Evaluate(ctxT(t), req)
		if err != nil {
			t.Fatalf("%s: %v", f.check, err)
		}
		if err := checkvalidate.EvaluateResponse(req, resp, updatesCap); err != nil {
			t.Fatalf("%s answered %v, which is invalid alone: %v", f.check, resp, err)
		}
		for _, u := range resp.GetPodSetUpdates() {
			updates = append(updates, podset.CheckUpdate{CheckName: f.check,
				Update: v1alpha1.PodSetUpdate{Name: u.GetName(), NodeSelector: u.GetNodeSelector()}})
		}
	}
	_, err := podset.Merge(podset.Input{Name: "main", Updates: updates})
	var conflict *podset.ConflictError
	if !errors.As(err, &conflict) {
		t.Fatalf("merging both answers = %v, want a conflict", err)
	}
	want := podset.ConflictError{PodSet: "main", Check: "check-b", Field: podset.FieldNodeSelector, Key: "example.com/zone",
		Existing: "east", New: "west", ExistingFrom: podset.Source{Kind: podset.SourceCheck, Name: "check-a"}}
	if *conflict != want {
		t.Errorf("conflict = %+v, want %+v", *conflict, want)
	}
}
