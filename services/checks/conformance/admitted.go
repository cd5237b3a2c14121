package conformance

import (
	"context"
	"errors"
	"fmt"
	"strings"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
)

// admittedWaitingCap bounds how many evaluations of a workload that is not
// admitted Evaluate/AdmittedFirst asks for: enough to use up the small
// capacity its parameters should give the provider.
const admittedWaitingCap = 16

// evaluateAdmittedFirst checks the rule of EvaluateRequest.admitted
// (revision 3): what the provider holds for evaluations that are not
// admitted never makes its answer to an admitted one worse. This is what
// keeps a provider that restarted, and lost what it held, from stopping a
// running workload for a waiting one that the caller happened to ask
// about first.
//
// It asks about the sample workload as admitted under a fresh key (the
// baseline; PENDING is asked again, as fixtures are) and releases that
// key; then about it as not admitted, under fresh keys one after another,
// until an answer is not READY or admittedWaitingCap is reached, so that
// the provider holds whatever it gives waiting workloads; then about it as
// admitted under a fresh key again (PENDING asked again only when the
// baseline is READY). That answer must be no worse than the baseline
// (READY > PENDING > RETRY > REJECTED). Every key is released at
// the end, so the cases after it find nothing of it held.
func evaluateAdmittedFirst(ctx context.Context, s *suite) (err error) {
	var held []*checksv1.EvaluateRequest
	defer func() {
		if rerr := s.releaseAll(ctx, held); rerr != nil && err == nil {
			err = rerr
		}
	}()

	first := s.admittedRequest("admitted-first", true)
	held = append(held, first)
	baseline, _, err := s.askUntilSettled(ctx, first, checksv1.State_STATE_READY, s.evaluate)
	if err != nil {
		return fmt.Errorf("admitted workload (admitted=true, key %q): %w", first.GetEvaluationKey(), err)
	}
	if s.has(checksv1.Capability_CAPABILITY_RELEASE) {
		if err := s.releaseCall(ctx, s.release(first, checksv1.ReleaseReason_RELEASE_REASON_FINISHED)); err != nil {
			return fmt.Errorf("Release of the admitted workload's key %q failed: %w", first.GetEvaluationKey(), err)
		}
		held = held[:0]
	}

	var last *checksv1.EvaluateResponse
	waiting := 0
	for waiting < admittedWaitingCap && (last == nil || last.GetState() == checksv1.State_STATE_READY) {
		req := s.admittedRequest(fmt.Sprintf("admitted-waiting-%d", waiting), false)
		held = append(held, req)
		waiting++
		if last, err = s.evaluate(ctx, req); err != nil {
			return fmt.Errorf("workload not admitted (admitted=false, key %q): %w", req.GetEvaluationKey(), err)
		}
	}

	again := s.admittedRequest("admitted-again", true)
	held = append(held, again)
	// PENDING is asked again only while it is worse than the baseline: a
	// provider that answers PENDING for long costs the wait once.
	want := checksv1.State_STATE_READY
	if baseline.GetState() != checksv1.State_STATE_READY {
		want = checksv1.State_STATE_PENDING
	}
	after, note, err := s.askUntilSettled(ctx, again, want, s.evaluate)
	if err != nil {
		return fmt.Errorf("admitted workload (admitted=true, key %q) after %d evaluations of it not admitted: %w", again.GetEvaluationKey(), waiting, err)
	}
	if stateRank(after.GetState()) >= stateRank(baseline.GetState()) {
		return nil
	}
	msg := fmt.Sprintf("the admitted workload (admitted=true) was answered %s under key %q, and %s under key %q after %d evaluations of it not admitted (admitted=false; the last answered %s): "+
		"what a provider holds for evaluations that are not admitted must never make its answer to an admitted one worse (EvaluateRequest.admitted); count admitted evaluations first and give way with the others",
		baseline.GetState(), first.GetEvaluationKey(), after.GetState(), again.GetEvaluationKey(), waiting, last.GetState())
	if note != "" {
		msg += " (" + note + ")"
	}
	return errors.New(msg)
}

// admittedRequest is request(res) with admitted set.
func (s *suite) admittedRequest(res string, admitted bool) *checksv1.EvaluateRequest {
	req := s.request(res)
	req.Admitted = admitted
	return req
}

// releaseAll releases the keys of reqs, all of them whatever fails, and
// names each that failed.
func (s *suite) releaseAll(ctx context.Context, reqs []*checksv1.EvaluateRequest) error {
	var failed []string
	for _, req := range reqs {
		if err := s.releaseCall(ctx, s.release(req, checksv1.ReleaseReason_RELEASE_REASON_DELETED)); err != nil {
			failed = append(failed, fmt.Sprintf("Release of key %q failed: %v", req.GetEvaluationKey(), err))
		}
	}
	if len(failed) > 0 {
		return errors.New(strings.Join(failed, "; "))
	}
	return nil
}

// stateRank orders answers from worst to best for an admitted workload:
// REJECTED, RETRY, PENDING, READY.
func stateRank(st checksv1.State) int {
	switch st {
	case checksv1.State_STATE_READY:
		return 3
	case checksv1.State_STATE_PENDING:
		return 2
	case checksv1.State_STATE_RETRY:
		return 1
	}
	return 0
}
