// Package admitter tests sluice's admitter against a real kube-apiserver:
// the admitter runs in-process (its manager, caches, control loop and gRPC
// server on loopback), tests talk to it through a real gRPC client, and
// admission-check providers are fakecheck servers on loopback.
package admitter

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	"github.com/sluice-dev/sluice/pkg/kube"
	"github.com/sluice-dev/sluice/pkg/rpc"
	"github.com/sluice-dev/sluice/pkg/telemetry"
	"github.com/sluice-dev/sluice/services/admitter/app"
	"github.com/sluice-dev/sluice/test/harness"
	"github.com/sluice-dev/sluice/test/testenv"
)

// suite is the state the tests share: one control plane, one admitter.
type suite struct {
	env      *testenv.Env
	k8s      client.Client
	log      logr.Logger
	grpcAddr string
	conn     *grpc.ClientConn
	client   admitterv1.AdmitterServiceClient

	mu       sync.Mutex
	admitter *runningAdmitter
}

var s suite

// runningAdmitter is an admitter started in this process.
type runningAdmitter struct {
	cancel context.CancelFunc
	done   chan error

	stopOnce sync.Once
	stopErr  error
}

func TestMain(m *testing.M) {
	code := testenv.RunMain(m, testenv.Options{}, setUp)
	if s.admitter != nil {
		if err := s.admitter.stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stop admitter: %v\n", err)
		}
	}
	if s.conn != nil {
		s.conn.Close()
	}
	os.Exit(code)
}

func setUp(env *testenv.Env) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s.env = env
	if err := harness.InstallCRDs(ctx, env.Config); err != nil {
		return err
	}
	scheme, err := kube.Scheme()
	if err != nil {
		return err
	}
	if s.k8s, err = client.New(env.Config, client.Options{Scheme: scheme}); err != nil {
		return fmt.Errorf("client: %w", err)
	}
	level := "error"
	if os.Getenv("SLUICE_TEST_LOG") != "" {
		level = os.Getenv("SLUICE_TEST_LOG")
	}
	if s.log, err = telemetry.NewLogger(os.Stderr, level, "text"); err != nil {
		return err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	s.grpcAddr = lis.Addr().String()
	if s.admitter, err = startAdmitter(ctx, lis); err != nil {
		return err
	}
	if s.conn, err = rpc.Dial(s.grpcAddr, s.log); err != nil {
		return err
	}
	s.client = admitterv1.NewAdmitterServiceClient(s.conn)
	return waitServing(ctx, s.conn)
}

// startAdmitter runs an admitter in this process, serving gRPC on lis,
// with short intervals so that status and probes show up quickly; opts
// adjust its config.
func startAdmitter(ctx context.Context, lis net.Listener, opts ...func(*app.Config)) (*runningAdmitter, error) {
	runCtx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	r := &runningAdmitter{cancel: cancel, done: make(chan error, 1)}
	cfg := app.Config{
		REST:           s.env.Config,
		GRPCListener:   lis,
		Registry:       prometheus.NewRegistry(),
		Gatherer:       prometheus.NewRegistry(),
		ProbeInterval:  time.Second,
		StatusInterval: 200 * time.Millisecond,
		EventInterval:  time.Second,
		Ready:          func() { close(ready) },
	}
	for _, o := range opts {
		o(&cfg)
	}
	go func() {
		r.done <- app.Run(runCtx, s.log, cfg)
	}()
	select {
	case <-ready:
		return r, nil
	case err := <-r.done:
		cancel()
		return nil, fmt.Errorf("admitter exited before it was ready: %v", err)
	case <-ctx.Done():
		cancel()
		return nil, fmt.Errorf("admitter not ready: %w", ctx.Err())
	}
}

// stop stops the admitter and returns how it ended; later calls return
// the same.
func (r *runningAdmitter) stop() error {
	r.stopOnce.Do(func() {
		r.cancel()
		select {
		case r.stopErr = <-r.done:
		case <-time.After(30 * time.Second):
			r.stopErr = fmt.Errorf("admitter did not stop within 30s")
		}
	})
	return r.stopErr
}

// restartAdmitter stops the shared admitter and starts a new one on the
// same gRPC address, as a new leader would come up; opts adjust its
// config.
func restartAdmitter(t *testing.T, opts ...func(*app.Config)) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.admitter.stop(); err != nil {
		t.Fatalf("stop admitter: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var lis net.Listener
	var err error
	for lis == nil {
		if lis, err = net.Listen("tcp", s.grpcAddr); err != nil {
			if ctx.Err() != nil {
				t.Fatalf("listen again on %s: %v", s.grpcAddr, err)
			}
			time.Sleep(50 * time.Millisecond) // the old listener is closing
		}
	}
	if s.admitter, err = startAdmitter(ctx, lis, opts...); err != nil {
		t.Fatal(err)
	}
	if err := waitServing(ctx, s.conn); err != nil {
		t.Fatal(err)
	}
}

// waitServing polls the gRPC health of AdmitterService until SERVING.
func waitServing(ctx context.Context, conn *grpc.ClientConn) error {
	hc := healthpb.NewHealthClient(conn)
	for {
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: app.ServiceName})
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("AdmitterService not SERVING (last: %v %v): %w", resp.GetStatus(), err, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
