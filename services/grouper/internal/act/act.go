// Package act is what the grouper does to pods and asks of the admitter,
// for single pods and groups alike: submissions and queue moves, progress
// reports, ungate patches, stops and finalizer removals, each with its
// span, metrics and events.
package act

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	sluicev1 "github.com/sluice-dev/sluice/gen/sluice/v1"
	"github.com/sluice-dev/sluice/pkg/crashpoint"
	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/pkg/rpc"
	"github.com/sluice-dev/sluice/services/grouper/internal/metrics"
)

// Event reasons and actions on pods.
const (
	ReasonUngateFailed     = "UngateFailed"
	ReasonAdmissionInvalid = "AdmissionConflict"
	ReasonSubmitFailed     = "SubmitFailed"
	ReasonStopped          = "Stopped"
	ReasonEvictFailed      = "EvictFailed"

	ActionUngate = "Ungate"
	ActionSubmit = "Submit"
	actionEvict  = "Evict"
	actionDelete = "Delete"
)

// RecheckAfter is when a pod stuck on a problem it cannot fix itself (an
// admission it cannot apply, a refused submission) is looked at again;
// changes of the pod or its decision wake it earlier.
const RecheckAfter = 5 * time.Minute

// Spans continue pods' traces.
type Spans struct {
	// Tracer starts the spans.
	Tracer trace.Tracer
	// Propagator reads the trace context from the pod's annotation.
	Propagator propagation.TextMapPropagator
}

// Start continues the pod's trace (its sluice.dev/traceparent annotation)
// with a span for one step; the gRPC client carries it on.
func (s Spans) Start(ctx context.Context, pod *corev1.Pod, name string, ref *sluicev1.WorkloadRef) (context.Context, trace.Span) {
	if tp := pod.Annotations[podkeys.TraceparentAnnotation]; tp != "" && s.Propagator != nil {
		ctx = s.Propagator.Extract(ctx, propagation.MapCarrier{"traceparent": tp})
	}
	return s.Tracer.Start(ctx, name, trace.WithAttributes(
		attribute.String("k8s.namespace.name", pod.Namespace),
		attribute.String("k8s.pod.name", pod.Name),
		attribute.String("sluice.workload", ref.GetName()),
	))
}

func recordError(span trace.Span, err error) {
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}

// Events emits events on pods.
type Events struct {
	Recorder events.EventRecorder
}

// Warn emits a Warning event on pod.
func (e Events) Warn(pod *corev1.Pod, reason, action, format string, args ...any) {
	e.Recorder.Eventf(pod, nil, corev1.EventTypeWarning, reason, action, format, args...)
}

// Admitter makes the grouper's calls to the admitter, each bounded by
// Timeout.
type Admitter struct {
	Client  admitterv1.AdmitterServiceClient
	Timeout time.Duration
	Metrics *metrics.Metrics
	Spans   Spans
}

// Call bounds one admitter call.
func (a Admitter) Call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, a.Timeout)
}

// Submit sends wl to the admitter, in a span that continues pod's trace,
// counts the answer, and moves the workload to wl's LocalQueue when the
// admitter holds it in another one: every pod of it now names wl's. what
// names the workload in errors and in refused, which is set (and err nil)
// when the admitter refused the workload for good and only a change of
// its pods can help. existingOK takes an AlreadyExists answer for a
// submission of a workload the admitter has, as a single pod's
// submission always did; for a group it is an error.
func (a Admitter) Submit(ctx context.Context, pod *corev1.Pod, wl *sluicev1.Workload, what string, existingOK bool) (created bool, refused string, err error) {
	req := &admitterv1.SubmitWorkloadRequest{Workload: wl}
	if refused := tooLarge(req, what); refused != "" {
		a.Metrics.Submissions.WithLabelValues(metrics.ResultError).Inc()
		return false, refused, nil
	}
	ctx, span := a.Spans.Start(ctx, pod, "grouper.SubmitWorkload", wl.GetRef())
	defer span.End()
	cctx, cancel := a.Call(ctx)
	defer cancel()
	resp, err := a.Client.SubmitWorkload(cctx, req)
	switch {
	case err == nil:
		result := metrics.ResultExisting
		if resp.GetCreated() {
			result = metrics.ResultCreated
		}
		a.Metrics.Submissions.WithLabelValues(result).Inc()
	case existingOK && status.Code(err) == grpccodes.AlreadyExists:
		a.Metrics.Submissions.WithLabelValues(metrics.ResultExisting).Inc()
	default:
		a.Metrics.Submissions.WithLabelValues(metrics.ResultError).Inc()
		recordError(span, err)
		if permanent(err) {
			return false, fmt.Sprintf("the admitter refused the %s: %s", what, status.Convert(err).Message()), nil
		}
		return false, "", fmt.Errorf("submit %s: %w", what, err)
	}
	crashpoint.Hit("grouper/submit")
	if existing := resp.GetQueueName(); existing != "" && existing != wl.GetQueueName() {
		if err := a.MoveQueue(ctx, wl); err != nil {
			return false, "", err
		}
	}
	return resp.GetCreated(), "", nil
}

// tooLarge says why req cannot reach the admitter when it is over the
// admitter's message limit: sending it would only earn a ResourceExhausted
// the grouper would retry for ever. (The admitter refuses Workloads far
// smaller than that; this is for what it would never get to read.)
func tooLarge(req *admitterv1.SubmitWorkloadRequest, what string) string {
	n := proto.Size(req)
	if n <= rpc.MaxMessageBytes {
		return ""
	}
	return fmt.Sprintf("the %s is %d bytes, over the %d a call to the admitter may carry: each pod set copies the "+
		"labels and annotations of its role's first pod; make them smaller, or the roles fewer", what, n, rpc.MaxMessageBytes)
}

// MoveQueue tells the admitter the workload's pods now name another
// LocalQueue.
func (a Admitter) MoveQueue(ctx context.Context, wl *sluicev1.Workload) error {
	cctx, cancel := a.Call(ctx)
	defer cancel()
	_, err := a.Client.UpdateWorkload(cctx, &admitterv1.UpdateWorkloadRequest{Workload: wl.GetRef(), QueueName: wl.GetQueueName()})
	if err != nil {
		return fmt.Errorf("move workload %s to LocalQueue %s: %w", wl.GetRef().GetName(), wl.GetQueueName(), err)
	}
	return nil
}

// Progress sends one progress report, in a span that continues pod's
// trace when pod is not nil. A workload the admitter does not know (never
// created, or already gone) needs no report: that answer is nil. what
// names the report in its error.
func (a Admitter) Progress(ctx context.Context, pod *corev1.Pod, req *admitterv1.ReportProgressRequest, what string) (*admitterv1.ReportProgressResponse, error) {
	var span trace.Span
	if pod != nil {
		ctx, span = a.Spans.Start(ctx, pod, "grouper.ReportProgress", req.GetWorkload())
		defer span.End()
	}
	cctx, cancel := a.Call(ctx)
	defer cancel()
	resp, err := a.Client.ReportProgress(cctx, req)
	if err != nil && status.Code(err) != grpccodes.NotFound {
		a.Metrics.Reports.WithLabelValues(metrics.ResultError).Inc()
		if span != nil {
			recordError(span, err)
		}
		return nil, fmt.Errorf("report %s: %w", what, err)
	}
	a.Metrics.Reports.WithLabelValues(metrics.ResultOK).Inc()
	return resp, nil
}

// permanent reports whether an admitter error will not go away by
// retrying the same request.
func permanent(err error) bool {
	switch status.Code(err) {
	case grpccodes.InvalidArgument, grpccodes.FailedPrecondition, grpccodes.PermissionDenied,
		grpccodes.Unimplemented, grpccodes.OutOfRange:
		return true
	}
	return false
}
