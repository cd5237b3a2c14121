package stream

import (
	"context"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	sluicev1 "github.com/sluice-dev/sluice/gen/sluice/v1"
	"github.com/sluice-dev/sluice/pkg/rpc"
)

// scriptedAdmitter answers the n-th WatchAdmissions call with script[n]
// and then ends the stream; calls past the script stay open.
type scriptedAdmitter struct {
	admitterv1.UnimplementedAdmitterServiceServer
	scripts [][]*admitterv1.WatchAdmissionsResponse

	mu       sync.Mutex
	requests []*admitterv1.WatchAdmissionsRequest
}

func (a *scriptedAdmitter) WatchAdmissions(req *admitterv1.WatchAdmissionsRequest, srv admitterv1.AdmitterService_WatchAdmissionsServer) error {
	a.mu.Lock()
	n := len(a.requests)
	a.requests = append(a.requests, req)
	a.mu.Unlock()
	if n >= len(a.scripts) {
		<-srv.Context().Done()
		return nil
	}
	for _, resp := range a.scripts[n] {
		if err := srv.Send(resp); err != nil {
			return err
		}
	}
	// INTERNAL is not retried by the client, so the follower sees it.
	return status.Error(codes.Internal, "scripted end of stream")
}

func (a *scriptedAdmitter) calls() []*admitterv1.WatchAdmissionsRequest {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.requests)
}

// recordingSink records what the follower hands over, as workload names.
type recordingSink struct {
	mu     sync.Mutex
	events []string
}

func (s *recordingSink) Snapshot(ds []*admitterv1.Decision) { s.add("snapshot", ds) }
func (s *recordingSink) Changes(ds []*admitterv1.Decision)  { s.add("changes", ds) }

func (s *recordingSink) add(kind string, ds []*admitterv1.Decision) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := kind + ":"
	for _, d := range ds {
		e += " " + d.GetWorkload().GetName()
	}
	s.events = append(s.events, e)
}

func (s *recordingSink) got() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.events)
}

func batch(kind admitterv1.WatchAdmissionsResponse_Kind, rev string, names ...string) *admitterv1.WatchAdmissionsResponse {
	resp := &admitterv1.WatchAdmissionsResponse{Kind: kind, Revision: rev}
	for _, n := range names {
		resp.Decisions = append(resp.Decisions, &admitterv1.Decision{
			Workload: &sluicev1.WorkloadRef{Namespace: "ns", Name: n},
			Action:   admitterv1.Decision_ACTION_ADMIT,
		})
	}
	return resp
}

const (
	snap    = admitterv1.WatchAdmissionsResponse_KIND_SNAPSHOT
	snapEnd = admitterv1.WatchAdmissionsResponse_KIND_SNAPSHOT_END
	change  = admitterv1.WatchAdmissionsResponse_KIND_CHANGE
)

func TestFollower(t *testing.T) {
	tests := []struct {
		name        string
		scripts     [][]*admitterv1.WatchAdmissionsResponse
		wantSink    []string
		wantResumes []string // resume_revision of each call
	}{
		{
			name: "snapshot in batches, changes, resume after a break",
			scripts: [][]*admitterv1.WatchAdmissionsResponse{
				{batch(snap, "", "a"), batch(snapEnd, "e:1", "b"), batch(change, "e:2", "c")},
				{batch(change, "e:3", "d")},
			},
			wantSink:    []string{"snapshot: a b", "changes: c", "changes: d"},
			wantResumes: []string{"", "e:2", "e:3"},
		},
		{
			name: "a snapshot broken off is dropped and the old revision kept",
			scripts: [][]*admitterv1.WatchAdmissionsResponse{
				{batch(snapEnd, "e:1", "a")},
				{batch(snap, "", "x")},
				{batch(snapEnd, "f:1", "y")},
			},
			wantSink:    []string{"snapshot: a", "snapshot: y"},
			wantResumes: []string{"", "e:1", "e:1", "f:1"},
		},
		{
			name: "a change inside a snapshot is refused",
			scripts: [][]*admitterv1.WatchAdmissionsResponse{
				{batch(snap, "", "a"), batch(change, "e:5", "b")},
			},
			wantSink:    nil,
			wantResumes: []string{"", ""},
		},
		{
			name: "empty snapshot",
			scripts: [][]*admitterv1.WatchAdmissionsResponse{
				{batch(snapEnd, "e:0")},
			},
			wantSink:    []string{"snapshot:"},
			wantResumes: []string{"", "e:0"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			adm := &scriptedAdmitter{scripts: tt.scripts}
			client := serve(t, adm)
			sink := &recordingSink{}
			f := New(client, sink, Options{MinBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond, Log: logr.Discard()})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- f.Run(ctx) }()

			deadline := time.Now().Add(10 * time.Second)
			for len(adm.calls()) < len(tt.wantResumes) || f.Ready(ctx) != nil {
				if time.Now().After(deadline) {
					t.Fatalf("follower made %d calls (ready: %v), want %d", len(adm.calls()), f.Ready(ctx), len(tt.wantResumes))
				}
				time.Sleep(5 * time.Millisecond)
			}
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run = %v, want nil after cancel", err)
			}
			var resumes []string
			for _, r := range adm.calls() {
				resumes = append(resumes, r.GetResumeRevision())
			}
			if !slices.Equal(resumes, tt.wantResumes) {
				t.Errorf("resume revisions = %q, want %q", resumes, tt.wantResumes)
			}
			if got := sink.got(); !slices.Equal(got, tt.wantSink) {
				t.Errorf("sink got %q, want %q", got, tt.wantSink)
			}
			if f.Ready(context.Background()) == nil {
				t.Errorf("ready after Run returned")
			}
		})
	}
}

// serve runs adm on a loopback gRPC server and returns a client for it.
func serve(t *testing.T, adm admitterv1.AdmitterServiceServer) admitterv1.AdmitterServiceClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := rpc.NewServer(logr.Discard())
	admitterv1.RegisterAdmitterServiceServer(srv, adm)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = srv.Run(ctx, lis); close(done) }()
	conn, err := rpc.Dial(lis.Addr().String(), logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); cancel(); <-done })
	return admitterv1.NewAdmitterServiceClient(conn)
}
