package sdk

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/pkg/checkvalidate"
)

func TestAnswers(t *testing.T) {
	tests := []struct {
		name string
		got  *checksv1.EvaluateResponse
		want *checksv1.EvaluateResponse
	}{
		{name: "ready", got: Ready(&checksv1.PodSetUpdate{Name: "main"}),
			want: &checksv1.EvaluateResponse{State: checksv1.State_STATE_READY, PodSetUpdates: []*checksv1.PodSetUpdate{{Name: "main"}}}},
		{name: "pending with retry", got: Pending("3 nodes short", 2*time.Second),
			want: &checksv1.EvaluateResponse{State: checksv1.State_STATE_PENDING, Message: "3 nodes short", RetryAfter: optionalDuration(2 * time.Second)}},
		{name: "pending with caller backoff", got: Pending("wait", 0),
			want: &checksv1.EvaluateResponse{State: checksv1.State_STATE_PENDING, Message: "wait"}},
		{name: "retry", got: Retry("capacity revoked", time.Minute),
			want: &checksv1.EvaluateResponse{State: checksv1.State_STATE_RETRY, Message: "capacity revoked", RetryAfter: optionalDuration(time.Minute)}},
		{name: "rejected", got: Rejected("BudgetExhausted", "team budget is spent"),
			want: &checksv1.EvaluateResponse{State: checksv1.State_STATE_REJECTED, Reason: "BudgetExhausted", Message: "team budget is spent"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !proto.Equal(tt.got, tt.want) {
				t.Errorf("got %v, want %v", tt.got, tt.want)
			}
		})
	}
}

func TestUpdateEveryPodSet(t *testing.T) {
	req := &checksv1.EvaluateRequest{Workload: &checksv1.Workload{PodSets: []*checksv1.PodSet{{Name: "driver"}, {Name: "workers"}}}}
	tmpl := &checksv1.PodSetUpdate{
		Name:         "ignored",
		NodeSelector: map[string]string{"pool": "a"},
		Tolerations:  []*checksv1.Toleration{{Key: "pool", Value: "a", TolerationSeconds: proto.Int64(3)}},
	}
	got := UpdateEveryPodSet(req, tmpl)
	if len(got) != 2 || got[0].GetName() != "driver" || got[1].GetName() != "workers" {
		t.Fatalf("updates = %v, want one for driver and one for workers", got)
	}
	got[0].NodeSelector["pool"] = "changed"
	*got[0].Tolerations[0].TolerationSeconds = 9
	if got[1].NodeSelector["pool"] != "a" || tmpl.NodeSelector["pool"] != "a" || *tmpl.Tolerations[0].TolerationSeconds != 3 {
		t.Error("updates share maps or tolerations with each other or with the template")
	}
}

func TestTruncateMessage(t *testing.T) {
	limit := checkvalidate.MaxMessageBytes
	tests := []struct {
		name    string
		in      string
		wantLen int
		cut     bool
	}{
		{name: "short", in: "fits", wantLen: 4},
		{name: "exactly the limit", in: strings.Repeat("a", limit), wantLen: limit},
		{name: "one over", in: strings.Repeat("a", limit+1), wantLen: limit, cut: true},
		// "é" is two bytes: the cut moves back to a character boundary.
		{name: "multi-byte at the cut", in: strings.Repeat("é", limit), wantLen: limit - 1, cut: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := TruncateMessage(tt.in)
			if len(got) != tt.wantLen {
				t.Errorf("len = %d, want %d", len(got), tt.wantLen)
			}
			if !utf8.ValidString(got) {
				t.Errorf("result is not valid UTF-8")
			}
			if strings.HasSuffix(got, "...") != tt.cut {
				t.Errorf("ends with ...: %v, want %v", !tt.cut, tt.cut)
			}
			if !tt.cut && got != tt.in {
				t.Errorf("changed a message within the limit")
			}
		})
	}
}
