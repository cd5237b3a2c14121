package admitter

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
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
	"github.com/sluice-dev/sluice/test/testenv"
)

// admitterProcess is the admitter binary running as a child process.
type admitterProcess struct {
	cmd                *exec.Cmd
	grpcAddr, httpAddr string
	log                string
	done               chan struct{}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func buildAdmitter(ctx context.Context, t *testing.T) string {
	t.Helper()
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "admitter")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./services/admitter")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build admitter: %v\n%s", err, out)
	}
	return bin
}

func startProcess(t *testing.T, bin, leaseNS, name string) *admitterProcess {
	t.Helper()
	p := &admitterProcess{grpcAddr: freeAddr(t), httpAddr: freeAddr(t), log: filepath.Join(t.TempDir(), name+".log"), done: make(chan struct{})}
	logFile, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(bin, "--kubeconfig", s.env.Kubeconfig, "--leader-elect=true", "--namespace", leaseNS,
		"--grpc-addr", p.grpcAddr, "--http-addr", p.httpAddr, "--log-format", "text")
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); logFile.Close(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			if b, err := os.ReadFile(p.log); err == nil {
				t.Logf("%s log:\n%s", name, b)
			}
		}
	})
	return p
}

// readyz returns the HTTP status of /readyz, or 0 when it cannot connect.
func (p *admitterProcess) readyz(ctx context.Context) int {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.httpAddr+"/readyz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func (p *admitterProcess) health(ctx context.Context, t *testing.T) healthpb.HealthCheckResponse_ServingStatus {
	conn, err := rpc.Dial(p.grpcAddr, s.log)
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
	bin := buildAdmitter(ctx, t)

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
		code := first.readyz(ctx)
		return code == http.StatusOK, fmt.Sprintf("/readyz %d", code)
	})
	if h := first.health(ctx, t); h != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("leader health %v, want SERVING", h)
	}
	second := startProcess(t, bin, leaseNS, "second")
	waitFor(ctx, t, "second admitter up", func() (bool, string) {
		code := second.readyz(ctx)
		return code != 0, fmt.Sprintf("/readyz %d", code)
	})
	if code := second.readyz(ctx); code != http.StatusServiceUnavailable {
		t.Fatalf("standby /readyz %d, want 503", code)
	}
	if h := second.health(ctx, t); h != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("standby health %v, want NOT_SERVING", h)
	}

	// The leader steps down on SIGTERM and releases the Lease.
	if err := first.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-first.done:
	case <-time.After(30 * time.Second):
		t.Fatal("first admitter did not stop after SIGTERM")
	}
	waitFor(ctx, t, "standby takes over", func() (bool, string) {
		h := second.health(ctx, t)
		return h == healthpb.HealthCheckResponse_SERVING, h.String()
	})
	conn, err := rpc.Dial(second.grpcAddr, s.log)
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
