package sdk_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/services/checks/sdk"
)

// zoneChecker sends every pod of a workload to one zone, named by the
// AdmissionCheck's parameters: {"zone": "eu-west-1a"}.
type zoneChecker struct{}

type zoneParams struct {
	Zone string `json:"zone"`
}

func (zoneChecker) Evaluate(_ context.Context, req *checksv1.EvaluateRequest) (*checksv1.EvaluateResponse, error) {
	var p zoneParams
	if err := sdk.DecodeParameters(req, &p); err != nil {
		return nil, err // INVALID_ARGUMENT naming the field
	}
	if p.Zone == "" {
		return nil, sdk.InvalidParameter("zone", "required")
	}
	resp := sdk.Ready(sdk.UpdateEveryPodSet(req, &checksv1.PodSetUpdate{
		NodeSelector: map[string]string{"topology.kubernetes.io/zone": p.Zone},
	})...)
	resp.Reason = "ZoneChosen"
	resp.Message = "pods run in " + p.Zone
	return resp, nil
}

// Release has nothing to free: the answer depends on the request alone.
func (zoneChecker) Release(context.Context, *checksv1.ReleaseRequest) error { return nil }

// A complete provider: a Checker, an Info and NewServer. In a real main,
// serve TLS (WithTLS), listen on ":9091" and pass a context cancelled on
// SIGTERM to Serve; without TLS, Serve serves only a loopback address.
func Example() {
	srv, err := sdk.NewServer(sdk.Info{
		Name:          "zone.checks.example.com",
		VendorVersion: "v1.0.0",
		Capabilities:  []checksv1.Capability{checksv1.Capability_CAPABILITY_POD_SET_UPDATES},
	}, zoneChecker{})
	if err != nil {
		log.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()

	// What sluice's admitter sends for a workload that holds quota.
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	params, _ := structpb.NewStruct(map[string]any{"zone": "eu-west-1a"})
	resp, err := checksv1.NewCheckServiceClient(conn).Evaluate(context.Background(), &checksv1.EvaluateRequest{
		CheckName:     "zone",
		Parameters:    params,
		EvaluationKey: "7f3c9a/res-1",
		Workload: &checksv1.Workload{
			Namespace: "team-a",
			Name:      "pod-trainer-4e1f0",
			PodSets:   []*checksv1.PodSet{{Name: "main", Count: 1}},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(resp.GetState(), resp.GetReason(), resp.GetPodSetUpdates()[0].GetNodeSelector())

	stop()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	// Output: STATE_READY ZoneChosen map[topology.kubernetes.io/zone:eu-west-1a]
}

// budgetChecker admits workloads while their team has budget. When the
// budget is cut it withdraws every READY it gave, on its own, and tells
// sluice through the Notifier NewServer gave it.
type budgetChecker struct {
	notifier sdk.Notifier // set once by NewServer

	mu        sync.Mutex
	exhausted bool
	admitted  []string // evaluation keys answered READY
}

// SetNotifier makes budgetChecker an sdk.NotifierSetter.
func (b *budgetChecker) SetNotifier(n sdk.Notifier) { b.notifier = n }

func (b *budgetChecker) Evaluate(_ context.Context, req *checksv1.EvaluateRequest) (*checksv1.EvaluateResponse, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.exhausted {
		return sdk.Retry("team budget exhausted", 10*time.Minute), nil
	}
	if !slices.Contains(b.admitted, req.GetEvaluationKey()) {
		b.admitted = append(b.admitted, req.GetEvaluationKey())
	}
	return sdk.Ready(), nil
}

func (b *budgetChecker) Release(_ context.Context, req *checksv1.ReleaseRequest) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.admitted = slices.DeleteFunc(b.admitted, func(k string) bool { return k == req.GetEvaluationKey() })
	return nil
}

// CutBudget changes every READY answer to RETRY and pushes their keys:
// sluice evaluates them again and evicts the admitted workloads.
func (b *budgetChecker) CutBudget() error {
	b.mu.Lock()
	b.exhausted = true
	changed := slices.Clone(b.admitted)
	b.mu.Unlock()
	return b.notifier.Changed(changed...) // never blocks
}

// A provider that changes its answers on its own declares
// CAPABILITY_WATCH_CHANGES, and its Checker implements sdk.NotifierSetter
// to get the Notifier it pushes the changed evaluation keys with.
func ExampleNotifierSetter() {
	checker := &budgetChecker{}
	srv, err := sdk.NewServer(sdk.Info{
		Name: "budget.checks.example.com",
		Capabilities: []checksv1.Capability{
			checksv1.Capability_CAPABILITY_RELEASE,
			checksv1.Capability_CAPABILITY_WATCH_CHANGES,
		},
	}, checker)
	if err != nil {
		log.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := checksv1.NewCheckServiceClient(conn)

	// What sluice's admitter does: keep a stream open (the SDK sends its
	// headers once pushes reach it) and evaluate.
	stream, err := client.WatchChanges(context.Background(), &checksv1.WatchChangesRequest{})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := stream.Header(); err != nil {
		log.Fatal(err)
	}
	req := &checksv1.EvaluateRequest{
		CheckName:     "budget",
		EvaluationKey: "7f3c9a/res-1/budget",
		Workload:      &checksv1.Workload{Namespace: "team-a", Name: "pod-trainer-4e1f0", PodSets: []*checksv1.PodSet{{Name: "main", Count: 1}}},
	}
	resp, err := client.Evaluate(context.Background(), req)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("before:", resp.GetState())

	if err := checker.CutBudget(); err != nil {
		log.Fatal(err)
	}
	changed, err := stream.Recv()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("changed:", changed.GetEvaluationKeys())
	resp, err = client.Evaluate(context.Background(), req) // the admitter asks again
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("after:", resp.GetState())

	stop() // ends the stream with UNAVAILABLE: the admitter reopens it and re-evaluates
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	// Output:
	// before: STATE_READY
	// changed: [7f3c9a/res-1/budget]
	// after: STATE_RETRY
}
