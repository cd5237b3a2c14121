package fakecheck

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/services/checks/conformance"
)

func dial(t *testing.T, p *Provider) (checksv1.CheckServiceClient, checksv1.IdentityServiceClient) {
	t.Helper()
	conn, err := grpc.NewClient(p.Target(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return checksv1.NewCheckServiceClient(conn), checksv1.NewIdentityServiceClient(conn)
}

func request(ns, name, key string) *checksv1.EvaluateRequest {
	return &checksv1.EvaluateRequest{
		CheckName:     "fake",
		EvaluationKey: key,
		Workload:      &checksv1.Workload{Namespace: ns, Name: name, PodSets: []*checksv1.PodSet{{Name: "main", Count: 1}}},
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestAnswers(t *testing.T) {
	p := StartT(t)
	client, _ := dial(t, p)
	ready := &checksv1.EvaluateResponse{State: checksv1.State_STATE_READY, PodSetUpdates: []*checksv1.PodSetUpdate{{Name: "main", Labels: map[string]string{"pool": "a"}}}}
	garbage := &checksv1.EvaluateResponse{} // STATE_UNSPECIFIED: sluice must refuse it
	p.SetAnswer("ns", "ready", ready)
	p.SetAnswer("ns", "garbage", garbage)

	tests := []struct {
		name string
		want *checksv1.EvaluateResponse
	}{
		{name: "other", want: DefaultAnswer()},
		{name: "ready", want: ready},
		{name: "garbage", want: garbage},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := client.Evaluate(ctxT(t), request("ns", tt.name, "k-"+tt.name))
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(resp, tt.want) {
				t.Errorf("answer %v, want %v", resp, tt.want)
			}
		})
	}

	p.ClearAnswer("ns", "ready")
	rejected := &checksv1.EvaluateResponse{State: checksv1.State_STATE_REJECTED, Reason: "No"}
	p.SetDefaultAnswer(rejected)
	resp, err := client.Evaluate(ctxT(t), request("ns", "ready", "k2"))
	if err != nil || !proto.Equal(resp, rejected) {
		t.Fatalf("after ClearAnswer and SetDefaultAnswer: %v, %v; want %v", resp, err, rejected)
	}
	if got := p.EvaluateCount("ns", "ready"); got != 2 {
		t.Errorf("EvaluateCount(ns, ready) = %d, want 2", got)
	}
	if calls := p.Calls(); len(calls) != 4 || calls[0].GetWorkload().GetName() != "other" || calls[3].GetEvaluationKey() != "k2" {
		t.Errorf("Calls = %v, want 4 in order", calls)
	}
}

func TestFaults(t *testing.T) {
	p := StartT(t)
	client, identity := dial(t, p)

	p.SetError(codes.Unavailable)
	_, err := client.Evaluate(ctxT(t), request("ns", "w", "k"))
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("with SetError(Unavailable): %v", err)
	}
	if p.EvaluateCount("ns", "w") != 1 {
		t.Errorf("failed call not recorded")
	}
	p.SetError(codes.OK)

	p.SetDelay(time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = client.Evaluate(ctx, request("ns", "w", "k"))
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("with SetDelay(1m) and a 200ms deadline: %v, want DEADLINE_EXCEEDED", err)
	}
	p.SetDelay(0)

	p.SetReady(false, "warming up")
	probe, err := identity.Probe(ctxT(t), &checksv1.ProbeRequest{})
	if err != nil || probe.GetReady() || probe.GetMessage() != "warming up" {
		t.Errorf("Probe = %v, %v; want not ready, warming up", probe, err)
	}

	p.SetReleaseError(codes.Internal)
	if _, err := client.Release(ctxT(t), &checksv1.ReleaseRequest{EvaluationKey: "k"}); status.Code(err) != codes.Internal {
		t.Errorf("with SetReleaseError(Internal): %v", err)
	}
	_, err = client.Evaluate(ctxT(t), &checksv1.EvaluateRequest{Workload: &checksv1.Workload{Namespace: "ns", Name: "w"}})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("request without evaluation key: %v, want INVALID_ARGUMENT", err)
	}
}

func TestReleasesAndWaits(t *testing.T) {
	p := StartT(t)
	client, _ := dial(t, p)
	go func() {
		for _, key := range []string{"k1", "k2"} {
			_, _ = client.Evaluate(context.Background(), request("ns", "w", key))
		}
		_, _ = client.Release(context.Background(), &checksv1.ReleaseRequest{EvaluationKey: "k1", Namespace: "ns", Name: "w", Reason: checksv1.ReleaseReason_RELEASE_REASON_FINISHED})
	}()
	if err := p.WaitEvaluated(ctxT(t), "ns", "w", 2); err != nil {
		t.Fatal(err)
	}
	if err := p.WaitReleased(ctxT(t), "k1"); err != nil {
		t.Fatal(err)
	}
	rel := p.Releases()
	if len(rel) != 1 || rel[0].GetReason() != checksv1.ReleaseReason_RELEASE_REASON_FINISHED {
		t.Errorf("Releases = %v", rel)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := p.WaitReleased(ctx, "k2"); err == nil {
		t.Error("WaitReleased(k2) returned nil, but k2 was never released")
	}
}

func TestStopAndRestart(t *testing.T) {
	p := StartT(t)
	target := p.Target()
	client, _ := dial(t, p)
	p.Stop()
	p.Stop() // idempotent
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := client.Evaluate(ctx, request("ns", "w", "k")); status.Code(err) != codes.Unavailable {
		t.Fatalf("Evaluate on a stopped fake: %v, want UNAVAILABLE", err)
	}
	again := StartT(t, WithAddr(target), WithCapabilities())
	if again.Target() != target {
		t.Fatalf("restarted on %s, want %s", again.Target(), target)
	}
	_, identity := dial(t, again)
	info, err := identity.GetProviderInfo(ctxT(t), &checksv1.GetProviderInfoRequest{})
	if err != nil || info.GetName() != ProviderName || len(info.GetCapabilities()) != 0 {
		t.Fatalf("GetProviderInfo after restart = %v, %v", info, err)
	}
}

func TestConformance(t *testing.T) {
	p := StartT(t)
	conn, err := conformance.Dial(p.Target())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conformance.Run(t, conn, conformance.Options{})
}
