package admitter

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	sluicev1 "github.com/sluice-dev/sluice/gen/sluice/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/rpc"
	"github.com/sluice-dev/sluice/services/admitter/app"
	"github.com/sluice-dev/sluice/test/harness"
)

// startProcess starts the admitter binary with leader election on a Lease
// in leaseNS; it is killed when the test ends.
func startProcess(t *testing.T, bin, leaseNS, name string) *harness.Service {
	t.Helper()
	grpcAddr, err := harness.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	httpAddr, err := harness.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	p := harness.NewService("admitter", bin, []string{"--kubeconfig", s.env.Kubeconfig, "--leader-elect=true",
		"--namespace", leaseNS, "--grpc-addr", grpcAddr, "--log-format", "text"},
		httpAddr, filepath.Join(t.TempDir(), name+".log"))
	p.GRPCAddr = grpcAddr
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Kill(); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("%s log:\n%s", name, p.Tail(1000))
		}
	})
	return p
}

// readyz returns the HTTP status of /readyz, or 0 when it cannot connect.
func readyz(ctx context.Context, p *harness.Service) int {
	_, code, err := p.Get(ctx, "/readyz")
	if err != nil {
		return 0
	}
	return code
}

func health(ctx context.Context, t *testing.T, p *harness.Service) healthpb.HealthCheckResponse_ServingStatus {
	conn, err := rpc.Dial(p.GRPCAddr, s.log)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(cctx, &healthpb.HealthCheckRequest{Service: app.ServiceName})
	if err != nil {
		return healthpb.HealthCheckResponse_UNKNOWN
	}
	return resp.GetStatus()
}

// TestBinaryLeaderElection runs two admitter processes on one Lease: only
// the leader is ready and serves; when it stops, the standby takes over and
// admits.
func TestBinaryLeaderElection(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the admitter binary")
	}
	ctx := testContext(t)
	bin, err := harness.BuildBinary(ctx, t.TempDir(), "./services/admitter")
	if err != nil {
		t.Fatal(err)
	}

	// Only one admitter may write at a time: stop the in-process one for
	// this test and bring it back after.
	s.mu.Lock()
	if err := s.admitter.stop(); err != nil {
		s.mu.Unlock()
		t.Fatal(err)
	}
	s.mu.Unlock()
	t.Cleanup(func() { restartAdmitter(t) })

	leaseNS := unique("sluice-system")
	create(ctx, t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: leaseNS}})
	st := newSetupWithoutWaiting(ctx, t, "4")

	first := startProcess(t, bin, leaseNS, "first")
	waitFor(ctx, t, "first admitter ready", func() (bool, string) {
		code := readyz(ctx, first)
		return code == http.StatusOK, fmt.Sprintf("/readyz %d", code)
	})
	if h := health(ctx, t, first); h != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("leader health %v, want SERVING", h)
	}
	second := startProcess(t, bin, leaseNS, "second")
	waitFor(ctx, t, "second admitter up", func() (bool, string) {
		code := readyz(ctx, second)
		return code != 0, fmt.Sprintf("/readyz %d", code)
	})
	if code := readyz(ctx, second); code != http.StatusServiceUnavailable {
		t.Fatalf("standby /readyz %d, want 503", code)
	}
	if h := health(ctx, t, second); h != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("standby health %v, want NOT_SERVING", h)
	}

	// The leader steps down on SIGTERM and releases the Lease.
	if err := first.Stop(30 * time.Second); err != nil {
		t.Fatalf("first admitter after SIGTERM: %v", err)
	}
	waitFor(ctx, t, "standby takes over", func() (bool, string) {
		h := health(ctx, t, second)
		return h == healthpb.HealthCheckResponse_SERVING, h.String()
	})
	conn, err := rpc.Dial(second.GRPCAddr, s.log)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = admitterv1.NewAdmitterServiceClient(conn).SubmitWorkload(ctx, &admitterv1.SubmitWorkloadRequest{Workload: &sluicev1.Workload{
		Ref: &sluicev1.WorkloadRef{Namespace: st.ns, Name: "after-failover"}, QueueName: "lq",
		PodSets: []*sluicev1.PodSet{{Name: "main", Count: 1, Requests: map[string]string{"cpu": "1"}}},
	}})
	if err != nil {
		t.Fatalf("SubmitWorkload to the new leader: %v", err)
	}
	waitWorkload(ctx, t, st.ns, "after-failover", "admitted by the new leader", func(wl *v1alpha1.Workload) bool {
		return isTrue(wl, v1alpha1.WorkloadAdmitted)
	})
}
