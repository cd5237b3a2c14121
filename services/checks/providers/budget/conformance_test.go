package budget_test

import (
	"context"
	"slices"
	"testing"
	"time"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/services/checks/conformance"
	"github.com/sluice-dev/sluice/services/checks/providers/budget"
	"github.com/sluice-dev/sluice/services/checks/sdk/sdktest"
)

func parse(t *testing.T, y string) *budget.Config {
	t.Helper()
	cfg, err := budget.Parse([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestConformance runs the kit against the provider, served by the SDK
// (the soft limit is low, so most answers carry the label);
// WatchChanges/PushedKeys cuts the kit's namespace's budget to nothing,
// which revokes every evaluation the kit holds, its key included.
//
// The budget is small, so that Evaluate/AdmittedFirst bites: 5 cpu are
// ten of the kit's workloads (500m each), fewer than the waiting ones it
// asks about, and more than the 4 cpu the later cases hold at once. No
// window, so that a Release frees its cost at once, as the kit expects
// between cases. No restart warm-up: the kit asks about waiting
// workloads from the start.
func TestConformance(t *testing.T) {
	checker := budget.New(parse(t, `{namespaces: {conformance: {hard: {cpu: 5, memory: 100Gi}, soft: {cpu: 1}}}}`), nil, budget.WithRestartGrace(0))
	addr := sdktest.Start(t, budget.Info("test"), checker)
	conn, err := conformance.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cut := parse(t, `{namespaces: {conformance: {hard: {cpu: 0}}}}`)
	conformance.Run(t, conn, conformance.Options{
		CheckName: "budget",
		WatchIdle: 500 * time.Millisecond,
		TriggerChange: func(context.Context, string) error {
			_, err := checker.SetConfig(cut)
			return err
		},
	})
}

// TestWatchChangesPushesRevokedKeys lowers the budget under a real server
// and reads the WatchChanges stream as sluice does: exactly the revoked
// keys arrive, newest first, and Evaluate of them answers RETRY.
func TestWatchChangesPushesRevokedKeys(t *testing.T) {
	checker := budget.New(parse(t, `{namespaces: {team-a: {hard: {cpu: 10}}}}`), nil, budget.WithRestartGrace(0))
	conn, err := conformance.Dial(sdktest.Start(t, budget.Info("test"), checker))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := checksv1.NewCheckServiceClient(conn)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	stream, err := client.WatchChanges(ctx, &checksv1.WatchChangesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Header(); err != nil { // the stream is registered: it gets every later push
		t.Fatal(err)
	}
	requests := map[string]*checksv1.EvaluateRequest{}
	for _, key := range []string{"uid-a/r1/budget", "uid-b/r1/budget", "uid-c/r1/budget"} {
		requests[key] = &checksv1.EvaluateRequest{CheckName: "budget", EvaluationKey: key, Workload: &checksv1.Workload{
			Namespace: "team-a", Name: key[:5],
			PodSets: []*checksv1.PodSet{{Name: "main", Count: 3, Requests: map[string]string{"cpu": "1"}}},
		}}
		resp, err := client.Evaluate(ctx, requests[key])
		if err != nil || resp.GetState() != checksv1.State_STATE_READY {
			t.Fatalf("Evaluate(%s) = %v, %v; want READY", key, resp, err)
		}
	}

	if _, err := checker.SetConfig(parse(t, `{namespaces: {team-a: {hard: {cpu: 4}}}}`)); err != nil {
		t.Fatal(err)
	}
	msg, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"uid-c/r1/budget", "uid-b/r1/budget"}
	if !slices.Equal(msg.GetEvaluationKeys(), want) {
		t.Errorf("pushed %v, want %v", msg.GetEvaluationKeys(), want)
	}
	for key, state := range map[string]checksv1.State{
		"uid-a/r1/budget": checksv1.State_STATE_READY,
		"uid-b/r1/budget": checksv1.State_STATE_RETRY,
		"uid-c/r1/budget": checksv1.State_STATE_RETRY,
	} {
		resp, err := client.Evaluate(ctx, requests[key])
		if err != nil || resp.GetState() != state {
			t.Errorf("Evaluate(%s) after the cut = %v, %v; want %s", key, resp, err, state)
		}
	}
}
