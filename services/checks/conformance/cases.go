package conformance

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/pkg/checkvalidate"
)

// cases are run in this order; later ones use what earlier ones learned
// (the capabilities, the first answer). Evaluate/AdmittedFirst comes
// before every other Evaluate, so that nothing the kit evaluated is held
// yet. The fixtures come after the fixed cases, and the soak, the
// slowest, comes last.
//
// Each case has the contract revision that brought its rule (see
// testCase). The WatchChanges cases hold every provider that declares
// CAPABILITY_WATCH_CHANGES, and the fixtures are the vendor's own: both
// are of revision 1.
func cases(fixtures []Fixture) []testCase {
	cs := []testCase{
		{"Identity/GetProviderInfo", 1, getProviderInfo},
		{"Identity/GetProviderInfoStable", 1, getProviderInfoStable},
		{"Identity/Probe", 1, probe},
		{"Evaluate/AdmittedFirst", 3, evaluateAdmittedFirst},
		{"Evaluate/ValidAnswer", 1, evaluateValid},
		{"Evaluate/Repeatable", 1, evaluateRepeatable},
		{"Evaluate/NewReservation", 1, evaluateNewReservation},
		{"Evaluate/TwoChecksOneProvider", 2, evaluateTwoChecks},
		{"Evaluate/MissingEvaluationKey", 1, malformedEvaluate("Evaluate without evaluation_key", func(r *checksv1.EvaluateRequest) { r.EvaluationKey = "" })},
		{"Evaluate/MissingWorkload", 1, malformedEvaluate("Evaluate without workload", func(r *checksv1.EvaluateRequest) { r.Workload = nil })},
		{"Evaluate/LongEvaluationKey", 2, malformedEvaluate("Evaluate with a 513-byte evaluation_key", func(r *checksv1.EvaluateRequest) {
			r.EvaluationKey = strings.Repeat("k", checkvalidate.MaxEvaluationKeyBytes+1)
		})},
		{"Evaluate/MissingNamespace", 2, malformedEvaluate("Evaluate with an empty workload.namespace", func(r *checksv1.EvaluateRequest) { r.Workload.Namespace = "" })},
		{"Evaluate/MissingName", 2, malformedEvaluate("Evaluate with an empty workload.name", func(r *checksv1.EvaluateRequest) { r.Workload.Name = "" })},
		{"Evaluate/UnnamedPodSet", 2, malformedEvaluate("Evaluate with a pod set without a name", withPodSets("main", ""))},
		{"Evaluate/DuplicatePodSet", 2, malformedEvaluate(`Evaluate with two pod sets named "main"`, withPodSets("main", "main"))},
		{"Evaluate/PodSetUpdates", 1, evaluatePodSetUpdates},
		{"Release/MissingEvaluationKey", 2, releaseMissingKey},
		{"Release/UnknownKey", 1, releaseUnknown},
		{"Release/Twice", 1, releaseTwice},
		{"Release/ThenNewReservation", 1, releaseThenNewReservation},
		{"WatchChanges/Open", 1, watchOpen},
		{"WatchChanges/PushedKeys", 1, watchPushedKeys},
	}
	for _, f := range fixtures {
		cs = append(cs, testCase{"Fixture/" + f.Name, 1, f.run})
	}
	return append(cs, testCase{"Keepalive/Soak", 1, keepaliveSoak})
}

func getProviderInfo(ctx context.Context, s *suite) error {
	cctx, cancel := s.call(ctx)
	defer cancel()
	info, err := s.identity.GetProviderInfo(cctx, &checksv1.GetProviderInfoRequest{})
	if err != nil {
		return fmt.Errorf("GetProviderInfo failed: %w", err)
	}
	s.info = info
	if err := checkvalidate.ProviderInfo(info); err != nil {
		return fmt.Errorf("GetProviderInfo answer breaks the contract: %w", err)
	}
	return nil
}

func getProviderInfoStable(ctx context.Context, s *suite) error {
	if s.info == nil {
		return skip("needs the answer of Identity/GetProviderInfo, which failed")
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	again, err := s.identity.GetProviderInfo(cctx, &checksv1.GetProviderInfoRequest{})
	if err != nil {
		return fmt.Errorf("second GetProviderInfo failed: %w", err)
	}
	if !proto.Equal(s.info, again) {
		return fmt.Errorf("GetProviderInfo changed between calls: first %v, then %v; it must not change while the process runs", s.info, again)
	}
	return nil
}

func probe(ctx context.Context, s *suite) error {
	deadline := time.Now().Add(s.opts.ReadyTimeout)
	for {
		cctx, cancel := s.call(ctx)
		resp, err := s.identity.Probe(cctx, &checksv1.ProbeRequest{})
		cancel()
		if err != nil {
			return fmt.Errorf("Probe failed (an error means unhealthy): %w", err)
		}
		if resp.GetReady() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("Probe still answers ready=false (%q) after %s", resp.GetMessage(), s.opts.ReadyTimeout)
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

func evaluateValid(ctx context.Context, s *suite) error {
	resp, err := s.evaluate(ctx, s.request("reservation-a"))
	if err != nil {
		return err
	}
	s.first = resp
	return nil
}

// evaluateRepeatable sends the same request again: the answer must be the
// same, or more final when the first was PENDING.
func evaluateRepeatable(ctx context.Context, s *suite) error {
	req := s.request("reservation-a")
	first := s.first
	if first == nil {
		var err error
		if first, err = s.evaluate(ctx, req); err != nil {
			return err
		}
	}
	again, err := s.evaluate(ctx, req)
	if err != nil {
		return fmt.Errorf("repeated request: %w", err)
	}
	if first.GetState() == checksv1.State_STATE_PENDING {
		return nil
	}
	if again.GetState() != first.GetState() {
		return fmt.Errorf("the same request was answered %s, then %s; a final answer must not change", first.GetState(), again.GetState())
	}
	if changes := answerChanges(first, again); changes != "" {
		return fmt.Errorf("the same request got other pod_set_updates the second time (want: the first answer): %s; a final answer must not change", changes)
	}
	return nil
}

func evaluateNewReservation(ctx context.Context, s *suite) error {
	_, err := s.evaluate(ctx, s.request("reservation-b"))
	return err
}

// evaluateTwoChecks evaluates one reservation under two check names, as
// sluice does when a provider serves two AdmissionChecks of one queue, and
// releases the first: the second's final answer must not change, since
// each check has its own evaluation key.
func evaluateTwoChecks(ctx context.Context, s *suite) error {
	first := s.requestFor(s.opts.CheckName, "reservation-f")
	second := s.requestFor(s.opts.CheckName+"-second", "reservation-f")
	if _, err := s.evaluate(ctx, first); err != nil {
		return fmt.Errorf("check %q: %w", first.GetCheckName(), err)
	}
	before, err := s.evaluate(ctx, second)
	if err != nil {
		return fmt.Errorf("check %q, same reservation: %w", second.GetCheckName(), err)
	}
	if err := s.releaseCall(ctx, s.release(first, checksv1.ReleaseReason_RELEASE_REASON_CHECK_REMOVED)); err != nil {
		return fmt.Errorf("Release of check %q's key %q failed: %w", first.GetCheckName(), first.GetEvaluationKey(), err)
	}
	after, err := s.evaluate(ctx, second)
	if err != nil {
		return fmt.Errorf("check %q after check %q's key was released: %w", second.GetCheckName(), first.GetCheckName(), err)
	}
	if before.GetState() == checksv1.State_STATE_PENDING {
		return nil
	}
	if changes := answerChanges(before, after); changes != "" {
		return fmt.Errorf("check %q (key %q) answered otherwise after a Release of check %q's key %q: %s; a Release frees only what its own key holds, so key what you hold by the whole evaluation key",
			second.GetCheckName(), second.GetEvaluationKey(), first.GetCheckName(), first.GetEvaluationKey(), changes)
	}
	return nil
}

// answerChanges says how a final answer changed, field by field, with the
// earlier answer as "want"; "" when it did not.
func answerChanges(before, after *checksv1.EvaluateResponse) string {
	if before.GetState() != after.GetState() {
		return fmt.Sprintf("state: want %s, got %s", before.GetState(), after.GetState())
	}
	return strings.Join(diffUpdates(before.GetPodSetUpdates(), after.GetPodSetUpdates()), "; ")
}

// malformedEvaluate is a case that sends a valid request broken by
// breakIt, which the contract says must be answered INVALID_ARGUMENT.
func malformedEvaluate(what string, breakIt func(*checksv1.EvaluateRequest)) func(context.Context, *suite) error {
	return func(ctx context.Context, s *suite) error {
		req := s.request("reservation-malformed")
		breakIt(req)
		cctx, cancel := s.call(ctx)
		defer cancel()
		_, err := s.checks.Evaluate(cctx, req)
		return wantInvalidArgument(err, what)
	}
}

// withPodSets replaces the request's pod sets with sample ones named so.
func withPodSets(names ...string) func(*checksv1.EvaluateRequest) {
	return func(r *checksv1.EvaluateRequest) {
		r.Workload.PodSets = nil
		for i, n := range names {
			r.Workload.PodSets = append(r.Workload.PodSets, samplePodSet(n, int32(i+1)))
		}
	}
}

func evaluatePodSetUpdates(ctx context.Context, s *suite) error {
	if !s.has(checksv1.Capability_CAPABILITY_POD_SET_UPDATES) {
		return skip("provider does not advertise CAPABILITY_POD_SET_UPDATES")
	}
	_, err := s.evaluate(ctx, s.request("reservation-c", "driver", "workers"))
	if err != nil {
		return fmt.Errorf("workload with pod sets driver and workers: %w", err)
	}
	return nil
}

func releaseMissingKey(ctx context.Context, s *suite) error {
	req := s.release(s.request("reservation-a"), checksv1.ReleaseReason_RELEASE_REASON_DELETED)
	req.EvaluationKey = ""
	return wantInvalidArgument(s.releaseCall(ctx, req), "Release without evaluation_key")
}

func releaseUnknown(ctx context.Context, s *suite) error {
	req := s.release(s.request("never-evaluated"), checksv1.ReleaseReason_RELEASE_REASON_DELETED)
	if err := s.releaseCall(ctx, req); err != nil {
		return fmt.Errorf("Release of a key never evaluated failed: %w; releasing an unknown key must succeed", err)
	}
	return nil
}

func releaseTwice(ctx context.Context, s *suite) error {
	req := s.release(s.request("reservation-a"), checksv1.ReleaseReason_RELEASE_REASON_FINISHED)
	for i := 1; i <= 2; i++ {
		if err := s.releaseCall(ctx, req); err != nil {
			return fmt.Errorf("Release call %d of the same key failed: %w; Release must be idempotent", i, err)
		}
	}
	return nil
}

func releaseThenNewReservation(ctx context.Context, s *suite) error {
	if !s.has(checksv1.Capability_CAPABILITY_RELEASE) {
		return skip("provider does not advertise CAPABILITY_RELEASE")
	}
	held := s.request("reservation-d")
	if _, err := s.evaluate(ctx, held); err != nil {
		return err
	}
	if err := s.releaseCall(ctx, s.release(held, checksv1.ReleaseReason_RELEASE_REASON_EVICTED)); err != nil {
		return fmt.Errorf("Release after Evaluate failed: %w", err)
	}
	if _, err := s.evaluate(ctx, s.request("reservation-e")); err != nil {
		return fmt.Errorf("new reservation after Release: %w", err)
	}
	return nil
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
