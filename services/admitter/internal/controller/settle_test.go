package controller

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/sluice-dev/sluice/services/admitter/internal/lifecycle"
)

func TestNotWrittenTrustsOnlyAnswersThatProveNothingLanded(t *testing.T) {
	gr := schema.GroupResource{Group: "sluice.dev", Resource: "workloads"}
	wrap := func(err error) error { return fmt.Errorf("reserve: patch status of workload ns/w: %w", err) }
	tests := []struct {
		err  error
		want bool
	}{
		{lifecycle.ErrMoved, true},
		{lifecycle.ErrStale, true},
		{wrap(apierrors.NewInvalid(schema.GroupKind{Group: "sluice.dev", Kind: "Workload"}, "w", nil)), true},
		{wrap(apierrors.NewForbidden(gr, "w", errors.New("denied"))), true},
		{wrap(apierrors.NewBadRequest("bad patch")), true},
		{wrap(apierrors.NewTimeoutError("lost", 0)), false},
		{wrap(apierrors.NewServerTimeout(gr, "patch", 0)), false},
		{wrap(apierrors.NewInternalError(errors.New("etcd"))), false},
		{wrap(apierrors.NewServiceUnavailable("restarting")), false},
		{wrap(apierrors.NewTooManyRequests("slow down", 1)), false},
		{wrap(context.DeadlineExceeded), false},
		{wrap(context.Canceled), false},
		{wrap(io.ErrUnexpectedEOF), false},
	}
	for _, tc := range tests {
		if got := notWritten(tc.err); got != tc.want {
			t.Errorf("notWritten(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
