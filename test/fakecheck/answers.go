package fakecheck

import (
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
)

// InvalidAnswer is an answer that breaks one rule of the contract, with
// what sluice must say about it.
type InvalidAnswer struct {
	// Name says what is wrong, for test names.
	Name string
	// Answer breaks the rule; send it with SetAnswer or SetDefaultAnswer.
	Answer *checksv1.EvaluateResponse
	// Field is the path of the offending field, as sluice names it:
	// `pod_set_updates[0].labels["sluice.dev/owner"]`.
	Field string
	// Rule is part of sluice's statement of the broken rule.
	Rule string
}

// InvalidAnswers returns one answer per rule of the contract that an
// answer alone can break, for a workload whose pod sets include podSet
// (and no pod set named "not-" + podSet). Each breaks exactly one rule, so
// sluice must refuse it naming Field and Rule; the capability rule is left
// out, as it depends on the provider rather than the answer.
func InvalidAnswers(podSet string) []InvalidAnswer {
	ready := func(u ...*checksv1.PodSetUpdate) *checksv1.EvaluateResponse {
		return &checksv1.EvaluateResponse{State: checksv1.State_STATE_READY, Reason: "InvalidByTest", PodSetUpdates: u}
	}
	update := func(f func(*checksv1.PodSetUpdate)) *checksv1.PodSetUpdate {
		u := &checksv1.PodSetUpdate{Name: podSet}
		f(u)
		return u
	}
	tolerations := make([]*checksv1.Toleration, 9)
	for i := range tolerations {
		tolerations[i] = &checksv1.Toleration{Key: "example.com/t", Operator: checksv1.TolerationOperator_TOLERATION_OPERATOR_EXISTS}
	}
	return []InvalidAnswer{
		{
			Name:   "unspecified state",
			Answer: &checksv1.EvaluateResponse{Message: "no state"},
			Field:  "state", Rule: "STATE_UNSPECIFIED is not an answer",
		},
		{
			Name:   "reason not in condition syntax",
			Answer: &checksv1.EvaluateResponse{State: checksv1.State_STATE_PENDING, Reason: "not a reason"},
			Field:  "reason", Rule: "must consist of letters, digits",
		},
		{
			Name:   "message too long",
			Answer: &checksv1.EvaluateResponse{State: checksv1.State_STATE_PENDING, Message: strings.Repeat("m", 1025)},
			Field:  "message", Rule: "must be at most 1024 bytes",
		},
		{
			Name:   "negative retry_after",
			Answer: &checksv1.EvaluateResponse{State: checksv1.State_STATE_PENDING, RetryAfter: durationpb.New(-time.Second)},
			Field:  "retry_after", Rule: "must not be negative",
		},
		{
			Name: "updates without READY",
			Answer: &checksv1.EvaluateResponse{State: checksv1.State_STATE_PENDING,
				PodSetUpdates: []*checksv1.PodSetUpdate{update(func(u *checksv1.PodSetUpdate) { u.Labels = map[string]string{"example.com/team": "a"} })}},
			Field: "pod_set_updates", Rule: "only allowed with STATE_READY",
		},
		{
			Name:   "update for a pod set the workload lacks",
			Answer: ready(&checksv1.PodSetUpdate{Name: "not-" + podSet, Labels: map[string]string{"example.com/team": "a"}}),
			Field:  "pod_set_updates[0].name", Rule: "is not a pod set of the workload",
		},
		{
			Name:   "two updates for one pod set",
			Answer: ready(update(func(*checksv1.PodSetUpdate) {}), update(func(*checksv1.PodSetUpdate) {})),
			Field:  "pod_set_updates[1].name", Rule: "at most one per pod set",
		},
		{
			Name:   "label key under sluice.dev/",
			Answer: ready(update(func(u *checksv1.PodSetUpdate) { u.Labels = map[string]string{"sluice.dev/owner": "test"} })),
			Field:  `pod_set_updates[0].labels["sluice.dev/owner"]`, Rule: "key is under a reserved prefix",
		},
		{
			Name: "annotation key under kueue.x-k8s.io/",
			Answer: ready(update(func(u *checksv1.PodSetUpdate) {
				u.Annotations = map[string]string{"kueue.x-k8s.io/podset": "other"}
			})),
			Field: `pod_set_updates[0].annotations["kueue.x-k8s.io/podset"]`, Rule: "key is under a reserved prefix",
		},
		{
			Name:   "label value with a space",
			Answer: ready(update(func(u *checksv1.PodSetUpdate) { u.Labels = map[string]string{"example.com/team": "a b"} })),
			Field:  `pod_set_updates[0].labels["example.com/team"]`, Rule: "invalid value",
		},
		{
			Name:   "node selector key that is not a qualified name",
			Answer: ready(update(func(u *checksv1.PodSetUpdate) { u.NodeSelector = map[string]string{"-zone": "a"} })),
			Field:  `pod_set_updates[0].node_selector["-zone"]`, Rule: "invalid key",
		},
		{
			Name:   "too many tolerations",
			Answer: ready(update(func(u *checksv1.PodSetUpdate) { u.Tolerations = tolerations })),
			Field:  "pod_set_updates[0].tolerations", Rule: "at most 8 allowed",
		},
		{
			Name: "toleration value with operator EXISTS",
			Answer: ready(update(func(u *checksv1.PodSetUpdate) {
				u.Tolerations = []*checksv1.Toleration{{Key: "example.com/t", Operator: checksv1.TolerationOperator_TOLERATION_OPERATOR_EXISTS, Value: "x"}}
			})),
			Field: "pod_set_updates[0].tolerations[0].value", Rule: "must be empty with TOLERATION_OPERATOR_EXISTS",
		},
	}
}

// ConflictingReady returns two READY answers, each valid alone, whose
// updates for podSet set node_selector[key] to a and to b. Given by two
// checks of one workload they contradict each other, and sluice must not
// admit the workload.
func ConflictingReady(podSet, key, a, b string) (*checksv1.EvaluateResponse, *checksv1.EvaluateResponse) {
	answer := func(value string) *checksv1.EvaluateResponse {
		return &checksv1.EvaluateResponse{
			State: checksv1.State_STATE_READY, Reason: "PlacedByTest", Message: key + "=" + value,
			PodSetUpdates: []*checksv1.PodSetUpdate{{Name: podSet, NodeSelector: map[string]string{key: value}}},
		}
	}
	return answer(a), answer(b)
}
