package grouper

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/apimachinery/pkg/api/resource"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	"github.com/sluice-dev/sluice/pkg/rpc"
)

// fakeAdmitter is a real gRPC AdmitterService on loopback that records what
// the grouper sends and lets a test push decisions down the stream. It keeps
// the decisions in force like the admitter does: a new stream resumes within
// the same epoch and gets a snapshot after the epoch changed.
type fakeAdmitter struct {
	admitterv1.UnimplementedAdmitterServiceServer

	srv  *rpc.Server
	addr string

	mu           sync.Mutex
	submissions  []recordedSubmit
	reports      []*admitterv1.ReportProgressRequest
	reportTries  int
	blockReports bool // answer ReportProgress with UNAVAILABLE
	// holdMissing holds, per workload, the reports that carry missing pods
	// until the channel is closed.
	holdMissing map[string]chan struct{}
	held        int // reports that waited on holdMissing
	watches     []*admitterv1.WatchAdmissionsRequest
	epoch       int
	seq         int
	inForce     map[string]*admitterv1.Decision
	queues      map[string]string // the queue each workload waits in
	updates     []*admitterv1.UpdateWorkloadRequest
	stream      *fakeStream
	// noPodsUntil answers, per workload, the next no_pods report with a
	// replacement window ending then.
	noPodsUntil map[string]time.Time
}

// recordedSubmit is one SubmitWorkload call and its trace header.
type recordedSubmit struct {
	req         *admitterv1.SubmitWorkloadRequest
	traceparent string
}

// fakeStream is the open WatchAdmissions call.
type fakeStream struct {
	send  chan *admitterv1.WatchAdmissionsResponse
	close chan error
}

func startFakeAdmitter() (*fakeAdmitter, error) {
	f := &fakeAdmitter{epoch: 1, inForce: map[string]*admitterv1.Decision{}, queues: map[string]string{}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("fake admitter: listen: %w", err)
	}
	f.addr = lis.Addr().String()
	f.srv = rpc.NewServer(logr.Discard())
	admitterv1.RegisterAdmitterServiceServer(f.srv, f)
	go func() { _ = f.srv.Run(context.Background(), lis) }()
	return f, nil
}

func (f *fakeAdmitter) stop() { f.srv.Stop() }

func (f *fakeAdmitter) SubmitWorkload(ctx context.Context, req *admitterv1.SubmitWorkloadRequest) (*admitterv1.SubmitWorkloadResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	var tp string
	if v := md.Get("traceparent"); len(v) > 0 {
		tp = v[0]
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	created := true
	for _, s := range f.submissions {
		if proto.Equal(s.req.GetWorkload().GetRef(), req.GetWorkload().GetRef()) {
			created = false
		}
	}
	f.submissions = append(f.submissions, recordedSubmit{req: req, traceparent: tp})
	ref := req.GetWorkload().GetRef()
	k := ref.GetNamespace() + "/" + ref.GetName()
	if !created {
		return &admitterv1.SubmitWorkloadResponse{Uid: "wl-uid", QueueName: f.queues[k]}, nil
	}
	f.queues[k] = req.GetWorkload().GetQueueName()
	return &admitterv1.SubmitWorkloadResponse{Uid: "wl-uid", Created: true, QueueName: f.queues[k]}, nil
}

func (f *fakeAdmitter) UpdateWorkload(_ context.Context, req *admitterv1.UpdateWorkloadRequest) (*admitterv1.UpdateWorkloadResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.updates = append(f.updates, req)
	if j := req.GetJoin(); j != nil {
		// Pods of more than 1 cpu do not fit the pod sets of the tests.
		if q := resource.MustParse(cmp.Or(j.GetRequests()["cpu"], "0")); q.Cmp(resource.MustParse("1")) > 0 {
			return nil, status.Errorf(codes.FailedPrecondition, "pod %s requests cpu %s, more than pod set %s reserves", j.GetPodName(), q.String(), j.GetPodSet())
		}
		return &admitterv1.UpdateWorkloadResponse{}, nil
	}
	k := req.GetWorkload().GetNamespace() + "/" + req.GetWorkload().GetName()
	changed := f.queues[k] != req.GetQueueName()
	f.queues[k] = req.GetQueueName()
	return &admitterv1.UpdateWorkloadResponse{Changed: changed}, nil
}

// updatesFor returns the UpdateWorkload calls for workload name.
func (f *fakeAdmitter) updatesFor(name string) []*admitterv1.UpdateWorkloadRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*admitterv1.UpdateWorkloadRequest
	for _, u := range f.updates {
		if u.GetWorkload().GetName() == name {
			out = append(out, u)
		}
	}
	return out
}

func (f *fakeAdmitter) ReportProgress(ctx context.Context, req *admitterv1.ReportProgressRequest) (*admitterv1.ReportProgressResponse, error) {
	f.mu.Lock()
	hold := f.holdMissing[req.GetWorkload().GetName()]
	f.mu.Unlock()
	if hold != nil && req.GetMissing() != nil {
		f.mu.Lock()
		f.held++
		f.mu.Unlock()
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reportTries++
	if f.blockReports {
		return nil, status.Error(codes.Unavailable, "reports blocked by the test")
	}
	f.reports = append(f.reports, req)
	if until, ok := f.noPodsUntil[req.GetWorkload().GetName()]; ok && req.GetNoPods() {
		delete(f.noPodsUntil, req.GetWorkload().GetName())
		return &admitterv1.ReportProgressResponse{NoPodsUntil: timestamppb.New(until)}, nil
	}
	return &admitterv1.ReportProgressResponse{}, nil
}

// answerNoPodsUntil makes the next no_pods report of workload name be
// answered with a replacement window that ends at until.
func (f *fakeAdmitter) answerNoPodsUntil(name string, until time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.noPodsUntil == nil {
		f.noPodsUntil = map[string]time.Time{}
	}
	f.noPodsUntil[name] = until
}

func (f *fakeAdmitter) WatchAdmissions(req *admitterv1.WatchAdmissionsRequest, srv admitterv1.AdmitterService_WatchAdmissionsServer) error {
	st := &fakeStream{send: make(chan *admitterv1.WatchAdmissionsResponse, 64), close: make(chan error, 1)}
	f.mu.Lock()
	f.watches = append(f.watches, req)
	if f.stream != nil {
		f.stream.close <- status.Error(codes.Aborted, "replaced by a newer stream")
	}
	f.stream = st
	if req.GetResumeRevision() != f.revisionLocked() {
		// Not resumable (first connection, or another epoch): snapshot,
		// split in two batches to exercise the assembly.
		var all []*admitterv1.Decision
		for _, d := range f.inForce {
			all = append(all, d)
		}
		half := len(all) / 2
		st.send <- &admitterv1.WatchAdmissionsResponse{Kind: admitterv1.WatchAdmissionsResponse_KIND_SNAPSHOT, Decisions: all[:half]}
		st.send <- &admitterv1.WatchAdmissionsResponse{Kind: admitterv1.WatchAdmissionsResponse_KIND_SNAPSHOT_END,
			Revision: f.revisionLocked(), Decisions: all[half:]}
	}
	f.mu.Unlock()

	for {
		select {
		case resp := <-st.send:
			if err := srv.Send(resp); err != nil {
				return err
			}
		case err := <-st.close:
			return err
		case <-srv.Context().Done():
			return nil
		}
	}
}

func (f *fakeAdmitter) revisionLocked() string { return fmt.Sprintf("%d:%d", f.epoch, f.seq) }

// push records decisions as in force and sends them as one change batch;
// it returns the batch's revision.
func (f *fakeAdmitter) push(decisions ...*admitterv1.Decision) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, d := range decisions {
		k := d.GetWorkload().GetNamespace() + "/" + d.GetWorkload().GetName()
		if d.GetAction() == admitterv1.Decision_ACTION_FORGET {
			delete(f.inForce, k)
		} else {
			f.inForce[k] = d
		}
	}
	f.seq++
	rev := f.revisionLocked()
	if f.stream != nil {
		f.stream.send <- &admitterv1.WatchAdmissionsResponse{Kind: admitterv1.WatchAdmissionsResponse_KIND_CHANGE,
			Revision: rev, Decisions: decisions}
	}
	return rev
}

// breakStream ends the open stream with UNAVAILABLE. With newEpoch the
// next stream cannot resume and gets a snapshot, as after an admitter
// restart.
func (f *fakeAdmitter) breakStream(newEpoch bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if newEpoch {
		f.epoch++
		f.seq = 0
	}
	if f.stream != nil {
		f.stream.close <- status.Error(codes.Unavailable, "stream broken by the test")
		f.stream = nil
	}
}

// holdMissingReports makes reports of workload name that carry missing
// pods wait until the returned function is called.
func (f *fakeAdmitter) holdMissingReports(name string) (release func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.holdMissing == nil {
		f.holdMissing = map[string]chan struct{}{}
	}
	ch := make(chan struct{})
	f.holdMissing[name] = ch
	return sync.OnceFunc(func() {
		f.mu.Lock()
		delete(f.holdMissing, name)
		f.mu.Unlock()
		close(ch)
	})
}

// heldReports counts the reports that waited on holdMissingReports.
func (f *fakeAdmitter) heldReports() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.held
}

func (f *fakeAdmitter) setBlockReports(block bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.blockReports = block
}

// snapshot returns copies of the recorded calls.
func (f *fakeAdmitter) snapshot() (subs []recordedSubmit, reports []*admitterv1.ReportProgressRequest, reportTries int, watches []*admitterv1.WatchAdmissionsRequest) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]recordedSubmit(nil), f.submissions...), append([]*admitterv1.ReportProgressRequest(nil), f.reports...),
		f.reportTries, append([]*admitterv1.WatchAdmissionsRequest(nil), f.watches...)
}

// submissionsFor returns the recorded submissions of workload name.
func (f *fakeAdmitter) submissionsFor(name string) []recordedSubmit {
	subs, _, _, _ := f.snapshot()
	var out []recordedSubmit
	for _, s := range subs {
		if s.req.GetWorkload().GetRef().GetName() == name {
			out = append(out, s)
		}
	}
	return out
}

// reportsFor returns the successful reports of workload name.
func (f *fakeAdmitter) reportsFor(name string) []*admitterv1.ReportProgressRequest {
	_, reports, _, _ := f.snapshot()
	var out []*admitterv1.ReportProgressRequest
	for _, r := range reports {
		if r.GetWorkload().GetName() == name {
			out = append(out, r)
		}
	}
	return out
}
