package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	sluicev1 "github.com/sluice-dev/sluice/gen/sluice/v1"
	"github.com/sluice-dev/sluice/services/admitter/internal/controller"
	"github.com/sluice-dev/sluice/services/admitter/internal/lifecycle"
)

func TestToStatus(t *testing.T) {
	gr := schema.GroupResource{Group: "sluice.dev", Resource: "workloads"}
	tests := []struct {
		name string
		err  error
		want codes.Code
	}{
		{"not the leader", controller.ErrNotLeader, codes.Unavailable},
		{"lost a race", fmt.Errorf("write: %w", controller.ErrStale), codes.Unavailable},
		{"invalid object", apierrors.NewInvalid(schema.GroupKind{Group: "sluice.dev", Kind: "Workload"}, "w", nil), codes.InvalidArgument},
		{"namespace gone", apierrors.NewNotFound(gr, "w"), codes.FailedPrecondition},
		{"forbidden", apierrors.NewForbidden(gr, "w", errors.New("no")), codes.PermissionDenied},
		{"conflict", apierrors.NewConflict(gr, "w", errors.New("changed")), codes.Unavailable},
		{"throttled", apierrors.NewTooManyRequests("slow down", 1), codes.Unavailable},
		{"deadline", fmt.Errorf("call: %w", context.DeadlineExceeded), codes.DeadlineExceeded},
		{"canceled", context.Canceled, codes.Canceled},
		{"group pods changed", fmt.Errorf("submit: %w", lifecycle.ErrPodSetsChanged), codes.FailedPrecondition},
		{"anything else", errors.New("boom"), codes.Internal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := status.Code(toStatus(tt.err)); got != tt.want {
				t.Fatalf("code = %s, want %s", got, tt.want)
			}
		})
	}
}

// TestMalformedRequestsChangeNothing: requests that break the rules are
// refused with INVALID_ARGUMENT naming the field, before the admitter is
// asked anything (the server here has none).
func TestMalformedRequestsChangeNothing(t *testing.T) {
	s := &Server{}
	ref := &sluicev1.WorkloadRef{Namespace: "ns", Name: "w"}
	tests := []struct {
		name  string
		call  func() error
		field string
	}{
		{"submit without a workload", func() error {
			_, err := s.SubmitWorkload(context.Background(), &admitterv1.SubmitWorkloadRequest{})
			return err
		}, "workload"},
		{"update without a name", func() error {
			_, err := s.UpdateWorkload(context.Background(), &admitterv1.UpdateWorkloadRequest{Workload: &sluicev1.WorkloadRef{Namespace: "ns"}, QueueName: "q"})
			return err
		}, "workload.name"},
		{"update to a bad queue name", func() error {
			_, err := s.UpdateWorkload(context.Background(), &admitterv1.UpdateWorkloadRequest{Workload: ref, QueueName: "Not_A_Name"})
			return err
		}, "queue_name"},
		{"progress without a namespace", func() error {
			_, err := s.ReportProgress(context.Background(), &admitterv1.ReportProgressRequest{Workload: &sluicev1.WorkloadRef{Name: "w"}})
			return err
		}, "workload.namespace"},
		{"negative succeeded count", func() error {
			_, err := s.ReportProgress(context.Background(), &admitterv1.ReportProgressRequest{Workload: ref, SucceededPods: map[string]int32{"main": -1}})
			return err
		}, `succeeded_pods["main"]`},
		{"negative started count", func() error {
			_, err := s.ReportProgress(context.Background(), &admitterv1.ReportProgressRequest{Workload: ref,
				Started: &admitterv1.Started{Scheduled: map[string]int32{"main": 1}, Ready: map[string]int32{"main": -1}}})
			return err
		}, `started.ready["main"]`},
		{"no pods without a uid", func() error {
			_, err := s.ReportProgress(context.Background(), &admitterv1.ReportProgressRequest{Workload: ref, NoPods: true})
			return err
		}, "workload.uid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if status.Code(err) != codes.InvalidArgument || !containsField(err, tt.field) {
				t.Fatalf("err = %v, want INVALID_ARGUMENT naming %s", err, tt.field)
			}
		})
	}
}

func containsField(err error, field string) bool {
	return err != nil && strings.Contains(status.Convert(err).Message(), field)
}
