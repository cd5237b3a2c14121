package checks

import (
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/checkvalidate"
	"github.com/sluice-dev/sluice/pkg/podset"
)

// Answer is a provider's answer read as a check state.
type Answer struct {
	// State is the check's state for the workload.
	State v1alpha1.CheckState
	// Reason and Message are shown on the workload.
	Reason, Message string
	// Updates are the pod set updates of a READY answer.
	Updates []v1alpha1.PodSetUpdate
	// RetryAfter is the provider's wish: for Pending when to ask again,
	// for Retry how long the workload waits before it is queued again.
	RetryAfter time.Duration
	// NoAnswer is set when the provider failed or answered garbage; the
	// caller backs off before asking again.
	NoAnswer bool
	// Final is set for failures that repeating the same request cannot
	// fix (INVALID_ARGUMENT, UNIMPLEMENTED); the caller waits the longest
	// backoff.
	Final bool
}

// Read turns the outcome of an Evaluate call into an Answer. An error or an
// invalid response is no answer: the check stays Pending with a message
// that says why, unless ac's failurePolicy is Ignore, which makes it Ready
// without updates. A TLS failure is no answer whatever the policy: Ignore
// is for a provider that cannot answer, not for one that cannot be
// verified.
func Read(ac *v1alpha1.AdmissionCheck, req *checksv1.EvaluateRequest, resp *checksv1.EvaluateResponse, callErr error) Answer {
	if tlsErr, ok := AsTLSError(callErr); ok {
		return tlsFailure(ac, tlsErr)
	}
	var failure string
	final := false
	switch {
	case callErr != nil:
		st := status.Convert(callErr)
		switch st.Code() {
		case codes.InvalidArgument, codes.Unimplemented:
			final = true
			failure = fmt.Sprintf("the provider refused the request (%s): %s", st.Code(), st.Message())
		case codes.FailedPrecondition:
			failure = fmt.Sprintf("the provider is not ready: %s", st.Message())
		case codes.DeadlineExceeded:
			failure = fmt.Sprintf("no answer from the provider within the check's timeout of %s (%s): %s", Timeout(ac), st.Code(), st.Message())
		default:
			failure = fmt.Sprintf("no answer from the provider (%s): %s", st.Code(), st.Message())
		}
	default:
		if err := checkvalidate.EvaluateResponse(req, resp, Capabilities(ac)); err != nil {
			failure = fmt.Sprintf("invalid answer from the provider: %v", err)
		}
	}
	if failure != "" {
		if ac.Spec.FailurePolicy == v1alpha1.IgnoreFailure {
			return Answer{State: v1alpha1.CheckStateReady, Reason: "FailureIgnored",
				Message: failure + " (ignored: failurePolicy is Ignore)"}
		}
		return Answer{State: v1alpha1.CheckStatePending, Reason: "NoAnswer", Message: failure, NoAnswer: true, Final: final}
	}
	a := Answer{Reason: resp.GetReason(), Message: resp.GetMessage()}
	if ra := resp.GetRetryAfter(); ra != nil {
		a.RetryAfter = ra.AsDuration()
	}
	switch resp.GetState() {
	case checksv1.State_STATE_READY:
		a.State = v1alpha1.CheckStateReady
		a.Updates = podset.UpdatesFromChecks(resp.GetPodSetUpdates())
	case checksv1.State_STATE_RETRY:
		a.State = v1alpha1.CheckStateRetry
	case checksv1.State_STATE_REJECTED:
		a.State = v1alpha1.CheckStateRejected
	default:
		a.State = v1alpha1.CheckStatePending
	}
	return a
}

// tlsFailure is the answer to a call that failed to secure its connection:
// Pending, with the TLS reason.
func tlsFailure(ac *v1alpha1.AdmissionCheck, err *TLSError) Answer {
	msg := err.Error()
	if ac.Spec.FailurePolicy == v1alpha1.IgnoreFailure {
		msg += " (not ignored: failurePolicy Ignore does not cover TLS failures)"
	}
	return Answer{State: v1alpha1.CheckStatePending, Reason: err.Reason, Message: msg, NoAnswer: true}
}
