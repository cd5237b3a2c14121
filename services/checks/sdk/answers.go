package sdk

import (
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/durationpb"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/pkg/checkvalidate"
)

// TruncateMessage cuts s to the contract's limit on messages
// (checkvalidate.MaxMessageBytes) on a character boundary, ending it with
// "..." when it cut: an answer with a longer message would be refused.
func TruncateMessage(s string) string {
	n := checkvalidate.MaxMessageBytes
	if len(s) <= n {
		return s
	}
	const ellipsis = "..."
	cut := n - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}

// Ready lets the workload start, adding updates to its pods (at most one
// per pod set; the provider needs CAPABILITY_POD_SET_UPDATES for any).
// Set Reason and Message on the result to explain the decision.
func Ready(updates ...*checksv1.PodSetUpdate) *checksv1.EvaluateResponse {
	return &checksv1.EvaluateResponse{State: checksv1.State_STATE_READY, PodSetUpdates: updates}
}

// Pending says "not decided yet": sluice asks again after after, or with
// its own backoff when after is 0. message is shown on the workload.
func Pending(message string, after time.Duration) *checksv1.EvaluateResponse {
	return &checksv1.EvaluateResponse{State: checksv1.State_STATE_PENDING, Message: message, RetryAfter: optionalDuration(after)}
}

// Retry makes sluice release the workload's quota and queue it again
// after after (at once when 0).
func Retry(message string, after time.Duration) *checksv1.EvaluateResponse {
	return &checksv1.EvaluateResponse{State: checksv1.State_STATE_RETRY, Message: message, RetryAfter: optionalDuration(after)}
}

// Rejected says the workload can never pass; sluice deactivates it.
// reason is UpperCamelCase, such as "BudgetExhausted".
func Rejected(reason, message string) *checksv1.EvaluateResponse {
	return &checksv1.EvaluateResponse{State: checksv1.State_STATE_REJECTED, Reason: reason, Message: message}
}

// UpdateEveryPodSet returns one copy of update per pod set of req, each
// named after its pod set, in the workload's order. update's own name is
// ignored.
func UpdateEveryPodSet(req *checksv1.EvaluateRequest, update *checksv1.PodSetUpdate) []*checksv1.PodSetUpdate {
	var out []*checksv1.PodSetUpdate
	for _, ps := range req.GetWorkload().GetPodSets() {
		u := &checksv1.PodSetUpdate{
			Name:         ps.GetName(),
			Labels:       copyMap(update.GetLabels()),
			Annotations:  copyMap(update.GetAnnotations()),
			NodeSelector: copyMap(update.GetNodeSelector()),
		}
		for _, t := range update.GetTolerations() {
			u.Tolerations = append(u.Tolerations, cloneToleration(t))
		}
		out = append(out, u)
	}
	return out
}

func optionalDuration(d time.Duration) *durationpb.Duration {
	if d <= 0 {
		return nil
	}
	return durationpb.New(d)
}

func copyMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func cloneToleration(t *checksv1.Toleration) *checksv1.Toleration {
	c := &checksv1.Toleration{Key: t.GetKey(), Operator: t.GetOperator(), Value: t.GetValue(), Effect: t.GetEffect()}
	if t.TolerationSeconds != nil {
		s := *t.TolerationSeconds
		c.TolerationSeconds = &s
	}
	return c
}
