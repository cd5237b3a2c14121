package checks

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

func check(policy v1alpha1.FailurePolicy, caps ...string) *v1alpha1.AdmissionCheck {
	ac := &v1alpha1.AdmissionCheck{ObjectMeta: metav1.ObjectMeta{Name: "c"}}
	ac.Spec.FailurePolicy = policy
	ac.Status.Provider = &v1alpha1.ProviderInfo{Name: "p", Capabilities: caps}
	return ac
}

func request() *checksv1.EvaluateRequest {
	return &checksv1.EvaluateRequest{EvaluationKey: "uid/r1", Workload: &checksv1.Workload{
		Namespace: "ns", Name: "w", PodSets: []*checksv1.PodSet{{Name: "main", Count: 1}},
	}}
}

func TestRead(t *testing.T) {
	updates := []*checksv1.PodSetUpdate{{Name: "main", Labels: map[string]string{"team": "a"}}}
	unverified := &TLSError{Reason: v1alpha1.ReasonTLSHandshakeFailed, Err: errors.New("x509: certificate signed by unknown authority")}
	missingSecret := &TLSError{Reason: v1alpha1.ReasonTLSConfigInvalid, Err: errors.New("spec.tls.caSecretRef: Secret sluice-system/ca not found")}
	tests := []struct {
		name      string
		ac        *v1alpha1.AdmissionCheck
		resp      *checksv1.EvaluateResponse
		err       error
		want      v1alpha1.CheckState
		reason    string // checked when set
		noAnswer  bool
		final     bool
		msg       string
		updates   int
		retryWait time.Duration
	}{
		{name: "ready with updates", ac: check(v1alpha1.FailClosed, "CAPABILITY_POD_SET_UPDATES"),
			resp: &checksv1.EvaluateResponse{State: checksv1.State_STATE_READY, PodSetUpdates: updates},
			want: v1alpha1.CheckStateReady, updates: 1},
		{name: "pending with retry_after", ac: check(v1alpha1.FailClosed),
			resp: &checksv1.EvaluateResponse{State: checksv1.State_STATE_PENDING, Message: "queued", RetryAfter: durationpb.New(3 * time.Second)},
			want: v1alpha1.CheckStatePending, msg: "queued", retryWait: 3 * time.Second},
		{name: "retry", ac: check(v1alpha1.FailClosed),
			resp: &checksv1.EvaluateResponse{State: checksv1.State_STATE_RETRY, RetryAfter: durationpb.New(time.Minute)},
			want: v1alpha1.CheckStateRetry, retryWait: time.Minute},
		{name: "rejected", ac: check(v1alpha1.FailClosed),
			resp: &checksv1.EvaluateResponse{State: checksv1.State_STATE_REJECTED, Message: "no"},
			want: v1alpha1.CheckStateRejected, msg: "no"},
		{name: "updates without the capability are no answer", ac: check(v1alpha1.FailClosed),
			resp: &checksv1.EvaluateResponse{State: checksv1.State_STATE_READY, PodSetUpdates: updates},
			want: v1alpha1.CheckStatePending, noAnswer: true, msg: "invalid answer from the provider: pod_set_updates"},
		{name: "unspecified state is no answer", ac: check(v1alpha1.FailClosed),
			resp: &checksv1.EvaluateResponse{},
			want: v1alpha1.CheckStatePending, noAnswer: true, msg: "state: required"},
		{name: "unavailable stays pending", ac: check(v1alpha1.FailClosed),
			err:  status.Error(codes.Unavailable, "connection refused"),
			want: v1alpha1.CheckStatePending, noAnswer: true, msg: "no answer from the provider (Unavailable): connection refused"},
		{name: "a timeout names the check's timeout", ac: check(v1alpha1.FailClosed),
			err:  status.Error(codes.DeadlineExceeded, "context deadline exceeded"),
			want: v1alpha1.CheckStatePending, noAnswer: true,
			msg: "no answer from the provider within the check's timeout of 10s (DeadlineExceeded): context deadline exceeded"},
		{name: "invalid argument is final", ac: check(v1alpha1.FailClosed),
			err:  status.Error(codes.InvalidArgument, "bad parameters"),
			want: v1alpha1.CheckStatePending, noAnswer: true, final: true, msg: "refused the request (InvalidArgument)"},
		{name: "not ready", ac: check(v1alpha1.FailClosed),
			err:  status.Error(codes.FailedPrecondition, "warming up"),
			want: v1alpha1.CheckStatePending, noAnswer: true, msg: "not ready: warming up"},
		{name: "failurePolicy Ignore makes a failure Ready", ac: check(v1alpha1.IgnoreFailure),
			err:  errors.New("boom"),
			want: v1alpha1.CheckStateReady, reason: "FailureIgnored", msg: "ignored: failurePolicy is Ignore"},
		{name: "failurePolicy Ignore makes an unreachable provider Ready", ac: check(v1alpha1.IgnoreFailure),
			err:  status.Error(codes.Unavailable, "connection refused"),
			want: v1alpha1.CheckStateReady, reason: "FailureIgnored", msg: "no answer from the provider (Unavailable)"},
		{name: "a certificate that does not verify stays pending", ac: check(v1alpha1.FailClosed),
			err:  unverified,
			want: v1alpha1.CheckStatePending, reason: v1alpha1.ReasonTLSHandshakeFailed, noAnswer: true,
			msg: "TLS handshake with the provider failed: x509: certificate signed by unknown authority"},
		{name: "failurePolicy Ignore does not ignore a certificate that does not verify", ac: check(v1alpha1.IgnoreFailure),
			err:  fmt.Errorf("evaluate: %w", unverified),
			want: v1alpha1.CheckStatePending, reason: v1alpha1.ReasonTLSHandshakeFailed, noAnswer: true,
			msg: "x509: certificate signed by unknown authority (not ignored: failurePolicy Ignore does not cover TLS failures)"},
		{name: "failurePolicy Ignore does not ignore TLS settings that cannot be used", ac: check(v1alpha1.IgnoreFailure),
			err:  missingSecret,
			want: v1alpha1.CheckStatePending, reason: v1alpha1.ReasonTLSConfigInvalid, noAnswer: true,
			msg: "Secret sluice-system/ca not found (not ignored"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Read(tc.ac, request(), tc.resp, tc.err)
			if got.State != tc.want || got.NoAnswer != tc.noAnswer || got.Final != tc.final {
				t.Fatalf("Read = %+v, want state %s noAnswer %v final %v", got, tc.want, tc.noAnswer, tc.final)
			}
			if tc.reason != "" && got.Reason != tc.reason {
				t.Fatalf("reason %q, want %q", got.Reason, tc.reason)
			}
			if !strings.Contains(got.Message, tc.msg) {
				t.Fatalf("message %q, want it to contain %q", got.Message, tc.msg)
			}
			if len(got.Updates) != tc.updates || got.RetryAfter != tc.retryWait {
				t.Fatalf("updates %d retryAfter %s, want %d %s", len(got.Updates), got.RetryAfter, tc.updates, tc.retryWait)
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	ac := &v1alpha1.AdmissionCheck{}
	custom := &v1alpha1.AdmissionCheck{Spec: v1alpha1.AdmissionCheckSpec{Retry: &v1alpha1.RetryPolicy{
		InitialBackoff: &metav1.Duration{Duration: 100 * time.Millisecond},
		MaxBackoff:     &metav1.Duration{Duration: time.Second},
	}}}
	tests := []struct {
		ac      *v1alpha1.AdmissionCheck
		attempt int
		want    time.Duration
	}{
		{ac, 0, time.Second},
		{ac, 3, 8 * time.Second},
		{ac, 30, 5 * time.Minute},
		{custom, 0, 100 * time.Millisecond},
		{custom, 2, 400 * time.Millisecond},
		{custom, 10, time.Second},
	}
	for _, tc := range tests {
		if got := Backoff(tc.ac, tc.attempt); got != tc.want {
			t.Errorf("Backoff(attempt %d) = %s, want %s", tc.attempt, got, tc.want)
		}
	}
}

func TestActivity(t *testing.T) {
	good := &checksv1.GetProviderInfoResponse{Name: "fake.checks.sluice.dev", ContractVersions: []string{"sluice.checks.v1"}}
	tests := []struct {
		name   string
		info   *checksv1.GetProviderInfoResponse
		probe  *checksv1.ProbeResponse
		err    error
		active bool
		reason string
	}{
		{"ready", good, &checksv1.ProbeResponse{Ready: true}, nil, true, "ProviderReady"},
		{"unreachable", nil, nil, errors.New("refused"), false, "ProviderUnreachable"},
		{"wrong contract", &checksv1.GetProviderInfoResponse{Name: "x.dev", ContractVersions: []string{"other.v9"}},
			&checksv1.ProbeResponse{Ready: true}, nil, false, "InvalidProviderInfo"},
		{"not ready", good, &checksv1.ProbeResponse{Ready: false, Message: "warming"}, nil, false, "ProviderNotReady"},
		{"probe failed", good, nil, errors.New("probe: boom"), false, "ProbeFailed"},
		{"certificate not verified", nil, nil,
			fmt.Errorf("GetProviderInfo: %w", &TLSError{Reason: v1alpha1.ReasonTLSHandshakeFailed, Err: errors.New("x509: unknown authority")}),
			false, v1alpha1.ReasonTLSHandshakeFailed},
		{"TLS settings cannot be used", nil, nil,
			fmt.Errorf("GetProviderInfo: %w", &TLSError{Reason: v1alpha1.ReasonTLSConfigInvalid, Err: errors.New("Secret not found")}),
			false, v1alpha1.ReasonTLSConfigInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			active, reason, msg := Activity(tc.info, tc.probe, tc.err)
			if active != tc.active || reason != tc.reason || msg == "" {
				t.Fatalf("Activity = %v %q %q, want %v %q", active, reason, msg, tc.active, tc.reason)
			}
		})
	}
}

func TestParameters(t *testing.T) {
	ac := &v1alpha1.AdmissionCheck{ObjectMeta: metav1.ObjectMeta{Name: "c"}}
	if p, err := Parameters(ac); p != nil || err != nil {
		t.Fatalf("no parameters = %v, %v", p, err)
	}
	ac.Spec.Parameters = &apiextensionsv1.JSON{Raw: []byte(`{"pool":"a","max":3}`)}
	p, err := Parameters(ac)
	if err != nil || p.GetFields()["pool"].GetStringValue() != "a" || p.GetFields()["max"].GetNumberValue() != 3 {
		t.Fatalf("Parameters = %v, %v", p, err)
	}
	ac.Spec.Parameters = &apiextensionsv1.JSON{Raw: []byte(`[1,2]`)}
	if _, err := Parameters(ac); err == nil || !strings.Contains(err.Error(), "spec.parameters") {
		t.Fatalf("array parameters: err = %v, want one naming spec.parameters", err)
	}
}
