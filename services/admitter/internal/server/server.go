// Package server implements sluice.admitter.v1.AdmitterService on top of
// the admitter's control loop and decision stream.
package server

import (
	"context"
	"errors"

	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	"github.com/sluice-dev/sluice/services/admitter/internal/controller"
	"github.com/sluice-dev/sluice/services/admitter/internal/lifecycle"
	"github.com/sluice-dev/sluice/services/admitter/internal/metrics"
	"github.com/sluice-dev/sluice/services/admitter/internal/startup"
	"github.com/sluice-dev/sluice/services/admitter/internal/stream"
	"github.com/sluice-dev/sluice/services/admitter/internal/workload"
)

// ServiceName is the gRPC health service name of AdmitterService.
const ServiceName = "sluice.admitter.v1.AdmitterService"

// Server serves AdmitterService.
type Server struct {
	admitterv1.UnimplementedAdmitterServiceServer
	admitter *controller.Admitter
	stream   *stream.Broadcaster
	metrics  *metrics.Metrics
	log      logr.Logger
}

// New returns a Server backed by a and s.
func New(a *controller.Admitter, s *stream.Broadcaster, m *metrics.Metrics, log logr.Logger) *Server {
	return &Server{admitter: a, stream: s, metrics: m, log: log}
}

var errNotLeader = status.Error(codes.Unavailable, "this admitter is not the leader; retry (the Service routes to the leader)")

// SubmitWorkload creates the Workload; an existing one is success with
// created=false.
func (s *Server) SubmitWorkload(ctx context.Context, req *admitterv1.SubmitWorkloadRequest) (*admitterv1.SubmitWorkloadResponse, error) {
	wl, err := workload.FromProto(req.GetWorkload())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	stored, created, err := s.admitter.Submit(ctx, wl)
	if err != nil {
		return nil, toStatus(err)
	}
	return &admitterv1.SubmitWorkloadResponse{Uid: string(stored.UID), Created: created, QueueName: stored.Spec.QueueName}, nil
}

// UpdateWorkload moves a submitted workload to the LocalQueue its pods
// name now, and answers whether a pod may join one of its pod sets.
func (s *Server) UpdateWorkload(ctx context.Context, req *admitterv1.UpdateWorkloadRequest) (*admitterv1.UpdateWorkloadResponse, error) {
	ref := req.GetWorkload()
	if ref.GetNamespace() == "" || ref.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "workload.namespace and workload.name are required")
	}
	join := req.GetJoin()
	if req.GetQueueName() == "" && join == nil {
		return nil, status.Error(codes.InvalidArgument, "one of queue_name and join is required")
	}
	key := types.NamespacedName{Namespace: ref.GetNamespace(), Name: ref.GetName()}
	if join != nil {
		j, err := workload.JoinFromProto(join)
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		if err := s.admitter.CheckJoin(ctx, key, types.UID(ref.GetUid()), j); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, status.Error(codes.NotFound, err.Error())
			}
			return nil, toStatus(err)
		}
	}
	if req.GetQueueName() == "" {
		return &admitterv1.UpdateWorkloadResponse{}, nil
	}
	if errs := validation.IsDNS1123Subdomain(req.GetQueueName()); len(errs) > 0 {
		return nil, status.Errorf(codes.InvalidArgument, "queue_name %q: %s", req.GetQueueName(), errs[0])
	}
	changed, err := s.admitter.UpdateQueue(ctx, key, types.UID(ref.GetUid()), req.GetQueueName())
	if err != nil {
		return nil, toStatus(err)
	}
	return &admitterv1.UpdateWorkloadResponse{Changed: changed}, nil
}

// ReportProgress records succeeded pods and the end of a workload.
func (s *Server) ReportProgress(ctx context.Context, req *admitterv1.ReportProgressRequest) (*admitterv1.ReportProgressResponse, error) {
	ref := req.GetWorkload()
	if ref.GetNamespace() == "" || ref.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "workload.namespace and workload.name are required")
	}
	for name, n := range req.GetSucceededPods() {
		if n < 0 {
			return nil, status.Errorf(codes.InvalidArgument, "succeeded_pods[%q] %d: must not be negative", name, n)
		}
	}
	p := lifecycle.Progress{
		UID:         types.UID(ref.GetUid()),
		Reservation: req.GetReservationId(),
		Succeeded:   req.GetSucceededPods(),
	}
	if f := req.GetFinish(); f != nil {
		p.Finished, p.FinishSucceeded, p.FinishMessage = true, f.GetSucceeded(), f.GetMessage()
	}
	if st := req.GetStopped(); st != nil {
		p.Stopped, p.StoppedReservation = true, st.GetReservationId()
	}
	if m := req.GetMissing(); m != nil {
		p.Missing = map[string]int32{}
		for name, n := range m.GetPods() {
			if n < 0 {
				return nil, status.Errorf(codes.InvalidArgument, "missing.pods[%q] %d: must not be negative", name, n)
			}
			p.Missing[name] = n
		}
	}
	if st := req.GetStarted(); st != nil {
		counts, err := startedCounts(st)
		if err != nil {
			return nil, err
		}
		p.Started = counts
	}
	if req.GetNoPods() {
		if ref.GetUid() == "" {
			return nil, status.Error(codes.InvalidArgument, "workload.uid is required with no_pods: the report must not end a later workload of the same name")
		}
		// A report of no pods is judged alone (as ReportProgress would),
		// and its answer may carry the end of a replacement window.
		until, err := s.admitter.NoPods(ctx, types.NamespacedName{Namespace: ref.GetNamespace(), Name: ref.GetName()}, p.UID)
		if err != nil {
			return nil, toStatus(err)
		}
		resp := &admitterv1.ReportProgressResponse{}
		if !until.IsZero() {
			resp.NoPodsUntil = timestamppb.New(until)
		}
		return resp, nil
	}
	if err := s.admitter.ReportProgress(ctx, types.NamespacedName{Namespace: ref.GetNamespace(), Name: ref.GetName()}, p); err != nil {
		return nil, toStatus(err)
	}
	return &admitterv1.ReportProgressResponse{}, nil
}

// WatchAdmissions streams a snapshot (or the changes since the client's
// revision) and then every change, until the client leaves, falls behind,
// or this admitter stops leading.
func (s *Server) WatchAdmissions(req *admitterv1.WatchAdmissionsRequest, srv admitterv1.AdmitterService_WatchAdmissionsServer) error {
	if !s.admitter.Leading() {
		return errNotLeader
	}
	shard := stream.Shard{Index: req.GetShard().GetIndex(), Count: req.GetShard().GetCount()}
	sub, err := s.stream.Subscribe(req.GetResumeRevision(), shard)
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	defer sub.Close()
	for _, resp := range sub.Initial {
		if err := srv.Send(resp); err != nil {
			return err
		}
		sub.Sent(resp)
	}
	ctx := srv.Context()
	for {
		select {
		case <-ctx.Done():
			return nil
		case resp, ok := <-sub.C:
			if !ok {
				err := sub.Err()
				if errors.Is(err, stream.ErrFellBehind) {
					s.metrics.SlowSubscribers.Inc()
					return status.Error(codes.ResourceExhausted, err.Error())
				}
				if err == nil {
					return nil
				}
				return status.Error(codes.Unavailable, err.Error())
			}
			if err := srv.Send(resp); err != nil {
				return err
			}
			sub.Sent(resp)
		}
	}
}

// toStatus maps the control loop's errors to gRPC codes the caller can act
// on: retry (Unavailable), fix the request (InvalidArgument) or the
// cluster (FailedPrecondition).
func toStatus(err error) error {
	switch {
	case errors.Is(err, controller.ErrNotLeader):
		return errNotLeader
	case errors.Is(err, lifecycle.ErrPodSetsChanged), errors.Is(err, workload.ErrJoinRefused),
		errors.Is(err, lifecycle.ErrNoPriorityClass):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, controller.ErrStale), errors.Is(err, lifecycle.ErrPastRun):
		return status.Error(codes.Unavailable, err.Error())
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err), apierrors.IsRequestEntityTooLargeError(err):
		return status.Error(codes.InvalidArgument, err.Error())
	case apierrors.IsNotFound(err):
		return status.Error(codes.FailedPrecondition, err.Error())
	case apierrors.IsForbidden(err):
		return status.Error(codes.PermissionDenied, err.Error())
	case apierrors.IsConflict(err), apierrors.IsTimeout(err), apierrors.IsServerTimeout(err),
		apierrors.IsTooManyRequests(err), apierrors.IsServiceUnavailable(err), apierrors.IsInternalError(err):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	default:
		return status.Error(codes.Internal, err.Error())
	}
}

// startedCounts reads a Started report; a negative count is refused.
func startedCounts(st *admitterv1.Started) (*startup.Counts, error) {
	for field, counts := range map[string]map[string]int32{"scheduled": st.GetScheduled(), "ready": st.GetReady()} {
		for name, n := range counts {
			if n < 0 {
				return nil, status.Errorf(codes.InvalidArgument, "started.%s[%q] %d: must not be negative", field, name, n)
			}
		}
	}
	return &startup.Counts{Scheduled: st.GetScheduled(), Ready: st.GetReady()}, nil
}
