package conformance

import (
	"context"
	"fmt"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/pkg/checkvalidate"
)

// cases are run in this order; later ones use what earlier ones learned
// (the capabilities, the first answer).
func cases() []testCase {
	return []testCase{
		{"Identity/GetProviderInfo", getProviderInfo},
		{"Identity/GetProviderInfoStable", getProviderInfoStable},
		{"Identity/Probe", probe},
		{"Health/Serving", healthServing},
		{"Evaluate/ValidAnswer", evaluateValid},
		{"Evaluate/Repeatable", evaluateRepeatable},
		{"Evaluate/NewReservation", evaluateNewReservation},
		{"Evaluate/MissingEvaluationKey", evaluateMissingKey},
		{"Evaluate/MissingWorkload", evaluateMissingWorkload},
		{"Evaluate/PodSetUpdates", evaluatePodSetUpdates},
		{"Release/UnknownKey", releaseUnknown},
		{"Release/Twice", releaseTwice},
		{"Release/ThenNewReservation", releaseThenNewReservation},
	}
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
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func healthServing(ctx context.Context, s *suite) error {
	cctx, cancel := s.call(ctx)
	defer cancel()
	resp, err := s.health.Check(cctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return fmt.Errorf("grpc.health.v1 Check failed: %w (serve the standard health service; Kubernetes probes use it)", err)
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("grpc.health.v1 status is %s, want SERVING", resp.GetStatus())
	}
	return nil
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
	if !sameUpdates(first.GetPodSetUpdates(), again.GetPodSetUpdates()) {
		return fmt.Errorf("the same request got other pod_set_updates the second time: %v, then %v", first.GetPodSetUpdates(), again.GetPodSetUpdates())
	}
	return nil
}

func sameUpdates(a, b []*checksv1.PodSetUpdate) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

func evaluateNewReservation(ctx context.Context, s *suite) error {
	_, err := s.evaluate(ctx, s.request("reservation-b"))
	return err
}

func evaluateMissingKey(ctx context.Context, s *suite) error {
	req := s.request("reservation-a")
	req.EvaluationKey = ""
	cctx, cancel := s.call(ctx)
	defer cancel()
	_, err := s.checks.Evaluate(cctx, req)
	return wantInvalidArgument(err, "Evaluate without evaluation_key")
}

func evaluateMissingWorkload(ctx context.Context, s *suite) error {
	req := s.request("reservation-a")
	req.Workload = nil
	cctx, cancel := s.call(ctx)
	defer cancel()
	_, err := s.checks.Evaluate(cctx, req)
	return wantInvalidArgument(err, "Evaluate without workload")
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

func releaseUnknown(ctx context.Context, s *suite) error {
	req := s.release(s.request("never-evaluated-"+randomHex(8)), checksv1.ReleaseReason_RELEASE_REASON_DELETED)
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
