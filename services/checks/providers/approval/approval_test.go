package approval

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/pkg/checkvalidate"
	"github.com/sluice-dev/sluice/services/checks/conformance"
	"github.com/sluice-dev/sluice/services/checks/sdk/sdktest"
)

// fakeWorkloads is an in-memory Workloads. Like the informer, it changes
// what Get sees before it tells the handler.
type fakeWorkloads struct {
	mu       sync.Mutex
	objs     map[Ref]Workload
	unsynced bool
	onChange func(Ref) error
}

func newFakeWorkloads() *fakeWorkloads { return &fakeWorkloads{objs: map[Ref]Workload{}} }

func (f *fakeWorkloads) Get(ref Ref) (Workload, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w, ok := f.objs[ref]
	return w, ok
}

func (f *fakeWorkloads) HasSynced() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.unsynced
}

func (f *fakeWorkloads) OnApprovalChange(fn func(Ref) error) { f.onChange = fn }

// set stores w as ref's object and tells the handler if its approval
// changed.
func (f *fakeWorkloads) set(t *testing.T, ref Ref, w Workload) {
	t.Helper()
	f.mu.Lock()
	old := f.objs[ref]
	f.objs[ref] = w
	f.mu.Unlock()
	if old.Approved != w.Approved && f.onChange != nil {
		if err := f.onChange(ref); err != nil {
			t.Errorf("approval change of %v: %v", ref, err)
		}
	}
}

// fakeNotifier records every push.
type fakeNotifier struct {
	mu     sync.Mutex
	pushes [][]string
}

func (n *fakeNotifier) Changed(keys ...string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.pushes = append(n.pushes, slices.Clone(keys))
	return nil
}

func (n *fakeNotifier) take() [][]string {
	n.mu.Lock()
	defer n.mu.Unlock()
	p := n.pushes
	n.pushes = nil
	return p
}

var (
	trainRef = Ref{Namespace: "team-a", Name: "train-1"}
	otherRef = Ref{Namespace: "team-b", Name: "serve-2"}
)

const trainUID = "8f7c0c4e-0000-4000-8000-000000000001"

func request(key string, ref Ref, uid string) *checksv1.EvaluateRequest {
	return &checksv1.EvaluateRequest{
		CheckName:     "approval",
		EvaluationKey: key,
		Workload: &checksv1.Workload{
			Namespace: ref.Namespace,
			Name:      ref.Name,
			Uid:       uid,
			PodSets:   []*checksv1.PodSet{{Name: "main", Count: 1}},
		},
	}
}

func newChecker(t *testing.T) (*Checker, *fakeWorkloads, *fakeNotifier) {
	t.Helper()
	w, n := newFakeWorkloads(), &fakeNotifier{}
	c := New(w)
	c.SetNotifier(n)
	return c, w, n
}

func TestEvaluate(t *testing.T) {
	const wantCommand = "kubectl annotate workloads.sluice.dev -n team-a train-1 approval.checks.sluice.dev/approved-by=$USER"
	tests := []struct {
		name        string
		obj         *Workload // nil: no such Workload
		unsynced    bool
		params      map[string]any
		wantCode    codes.Code
		wantState   checksv1.State
		wantReason  string
		wantMessage string // a substring
	}{
		{name: "not found", wantState: checksv1.State_STATE_PENDING, wantReason: ReasonAwaitingApproval, wantMessage: wantCommand},
		{name: "not approved", obj: &Workload{UID: trainUID}, wantState: checksv1.State_STATE_PENDING, wantReason: ReasonAwaitingApproval, wantMessage: wantCommand},
		{name: "approved", obj: &Workload{UID: trainUID, Approved: true, Approver: "alice"}, wantState: checksv1.State_STATE_READY, wantReason: ReasonApproved, wantMessage: "approved by alice"},
		{name: "approved without a name", obj: &Workload{UID: trainUID, Approved: true}, wantState: checksv1.State_STATE_READY, wantReason: ReasonApproved, wantMessage: "approved"},
		{name: "approver too long for a message", obj: &Workload{UID: trainUID, Approved: true, Approver: strings.Repeat("é", 1000)}, wantState: checksv1.State_STATE_READY, wantReason: ReasonApproved, wantMessage: "..."},
		{name: "another object of the same name", obj: &Workload{UID: "another", Approved: true, Approver: "alice"}, wantState: checksv1.State_STATE_PENDING, wantReason: ReasonAwaitingApproval, wantMessage: wantCommand},
		{name: "cache not synced", unsynced: true, wantCode: codes.FailedPrecondition},
		{name: "unknown parameter", params: map[string]any{"approvers": "alice"}, wantCode: codes.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, w, _ := newChecker(t)
			w.unsynced = tt.unsynced
			if tt.obj != nil {
				w.set(t, trainRef, *tt.obj)
			}
			req := request("k1", trainRef, trainUID)
			if tt.params != nil {
				p, err := structpb.NewStruct(tt.params)
				if err != nil {
					t.Fatal(err)
				}
				req.Parameters = p
			}
			resp, err := c.Evaluate(t.Context(), req)
			if tt.wantCode != codes.OK {
				if status.Code(err) != tt.wantCode {
					t.Fatalf("Evaluate error = %v, want code %s", err, tt.wantCode)
				}
				return
			}
			if err != nil {
				t.Fatalf("Evaluate: %v", err)
			}
			if resp.GetState() != tt.wantState || resp.GetReason() != tt.wantReason || !strings.Contains(resp.GetMessage(), tt.wantMessage) {
				t.Errorf("Evaluate = %v %s %q, want %v %s and a message containing %q", resp.GetState(), resp.GetReason(), resp.GetMessage(), tt.wantState, tt.wantReason, tt.wantMessage)
			}
			if err := checkvalidate.EvaluateResponse(req, resp, Info("test").Capabilities); err != nil {
				t.Errorf("answer breaks the contract: %v", err)
			}
		})
	}
}

// TestRevocation approves and then revokes one workload of two: each
// change pushes exactly that workload's held keys, and the answer follows.
func TestRevocation(t *testing.T) {
	c, w, n := newChecker(t)
	ctx := t.Context()
	w.set(t, otherRef, Workload{UID: "other", Approved: true})
	n.take()
	for _, r := range []*checksv1.EvaluateRequest{request("train/check-a", trainRef, trainUID), request("train/check-b", trainRef, trainUID), request("other/check-a", otherRef, "other")} {
		if _, err := c.Evaluate(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	wantKeys := [][]string{{"train/check-a", "train/check-b"}}

	w.set(t, trainRef, Workload{UID: trainUID, Approved: true, Approver: "alice"})
	if got := n.take(); !equalPushes(got, wantKeys) {
		t.Errorf("approval pushed %v, want %v", got, wantKeys)
	}
	assertState(ctx, t, c, request("train/check-a", trainRef, trainUID), checksv1.State_STATE_READY)

	w.set(t, trainRef, Workload{UID: trainUID})
	if got := n.take(); !equalPushes(got, wantKeys) {
		t.Errorf("revocation pushed %v, want %v", got, wantKeys)
	}
	assertState(ctx, t, c, request("train/check-a", trainRef, trainUID), checksv1.State_STATE_PENDING)
	assertState(ctx, t, c, request("other/check-a", otherRef, "other"), checksv1.State_STATE_READY)
}

// TestReleaseForgetsKeys checks that a released key is not pushed, and
// that releasing unknown or released keys succeeds.
func TestReleaseForgetsKeys(t *testing.T) {
	c, w, n := newChecker(t)
	ctx := t.Context()
	w.set(t, trainRef, Workload{UID: trainUID, Approved: true})
	for _, k := range []string{"k1", "k2"} {
		if _, err := c.Evaluate(ctx, request(k, trainRef, trainUID)); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"k1", "k1", "never-evaluated"} {
		if err := c.Release(ctx, &checksv1.ReleaseRequest{EvaluationKey: k}); err != nil {
			t.Fatalf("Release(%s): %v", k, err)
		}
	}
	w.set(t, trainRef, Workload{UID: trainUID})
	if got, want := n.take(), [][]string{{"k2"}}; !equalPushes(got, want) {
		t.Errorf("revocation pushed %v, want %v", got, want)
	}
	if err := c.Release(ctx, &checksv1.ReleaseRequest{EvaluationKey: "k2"}); err != nil {
		t.Fatal(err)
	}
	if c.holds.len() != 0 {
		t.Errorf("%d keys held after every Release, want 0", c.holds.len())
	}
	w.set(t, trainRef, Workload{UID: trainUID, Approved: true})
	if got := n.take(); len(got) != 0 {
		t.Errorf("approval with no key held pushed %v, want nothing", got)
	}
}

func TestProbe(t *testing.T) {
	c, w, _ := newChecker(t)
	w.unsynced = true
	if ready, msg, err := c.Probe(t.Context()); ready || err != nil || msg == "" {
		t.Errorf("Probe before sync = %v, %q, %v; want not ready, with a message", ready, msg, err)
	}
	w.unsynced = false
	if ready, _, err := c.Probe(t.Context()); !ready || err != nil {
		t.Errorf("Probe after sync = %v, %v; want ready", ready, err)
	}
}

// TestConformance runs the kit against the check served by the SDK. The
// kit's workload has no object, so every Evaluate case gets PENDING; the
// trigger approves it and removes the annotation again.
func TestConformance(t *testing.T) {
	c, w, _ := newChecker(t)
	addr := sdktest.Start(t, Info("test"), c)
	conn, err := conformance.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	kitRef := Ref{Namespace: "conformance", Name: "kit-workload"}
	conformance.Run(t, conn, conformance.Options{
		CheckName: "approval",
		Workload:  &checksv1.Workload{Namespace: kitRef.Namespace, Name: kitRef.Name, PodSets: []*checksv1.PodSet{{Name: "main", Count: 1}}},
		TriggerChange: func(context.Context, string) error {
			w.set(t, kitRef, Workload{Approved: true, Approver: "conformance"})
			w.set(t, kitRef, Workload{})
			return nil
		},
	})
}

func assertState(ctx context.Context, t *testing.T, c *Checker, req *checksv1.EvaluateRequest, want checksv1.State) {
	t.Helper()
	resp, err := c.Evaluate(ctx, req)
	if err != nil {
		t.Fatalf("Evaluate(%s): %v", req.GetEvaluationKey(), err)
	}
	if resp.GetState() != want {
		t.Errorf("Evaluate(%s) = %v %q, want %v", req.GetEvaluationKey(), resp.GetState(), resp.GetMessage(), want)
	}
}

func equalPushes(a, b [][]string) bool {
	return slices.EqualFunc(a, b, func(x, y []string) bool { return slices.Equal(x, y) })
}
