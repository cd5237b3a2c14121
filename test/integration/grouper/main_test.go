// Package grouper tests sluice's grouper against a real kube-apiserver: the
// grouper binary runs as its own process and talks real gRPC to a fake
// admitter served by the test. Pods are created already gated, labelled and
// finalized, as the webhook would leave them.
package grouper

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/pkg/kube"
	"github.com/sluice-dev/sluice/test/harness"
	"github.com/sluice-dev/sluice/test/testenv"
)

// namespace holds the test pods.
const namespace = "grouper-it"

// suite is the state shared by the tests of this package.
type suite struct {
	env      *testenv.Env
	cs       kubernetes.Interface
	k8s      client.Client // typed client for sluice's API types
	admitter *fakeAdmitter
	grouper  *harness.Service
	bin      string // the built grouper binary
	tmpDir   string
}

var s suite

func TestMain(m *testing.M) {
	code := testenv.RunMain(m, testenv.Options{}, setUp)
	if s.grouper != nil {
		if err := s.grouper.Stop(10 * time.Second); err != nil {
			fmt.Fprintf(os.Stderr, "stop grouper: %v\n", err)
			code = max(code, 1)
		}
		if code != 0 {
			fmt.Fprintf(os.Stderr, "grouper log: %s\n", s.grouper.LogPath)
		}
	}
	if s.admitter != nil {
		s.admitter.stop()
	}
	if code == 0 && s.tmpDir != "" {
		_ = os.RemoveAll(s.tmpDir)
	}
	os.Exit(code)
}

func setUp(env *testenv.Env) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s.env = env
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		return fmt.Errorf("clientset: %w", err)
	}
	s.cs = cs
	scheme, err := kube.Scheme()
	if err != nil {
		return err
	}
	if s.k8s, err = client.New(env.Config, client.Options{Scheme: scheme}); err != nil {
		return fmt.Errorf("client: %w", err)
	}
	// The grouper watches group Workloads: their CRD must exist.
	if err := harness.InstallCRDs(ctx, env.Config); err != nil {
		return err
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create namespace: %w", err)
	}
	if s.admitter, err = startFakeAdmitter(); err != nil {
		return err
	}
	if s.tmpDir, err = os.MkdirTemp("", "sluice-grouper-test-"); err != nil {
		return err
	}
	if s.bin, err = harness.BuildBinary(ctx, s.tmpDir, "./services/grouper"); err != nil {
		return err
	}
	s.grouper, err = startGrouper(filepath.Join(s.tmpDir, "grouper.log"),
		"--kubeconfig", env.Kubeconfig,
		"--admitter-addr", s.admitter.addr,
		"--workers", "4",
		"--log-format", "text", "--log-level", "debug")
	if err != nil {
		return err
	}
	return s.grouper.WaitReady(ctx)
}

// startGrouper starts a grouper with args, logging to logPath, on a free
// HTTP address; it does not wait for readiness.
func startGrouper(logPath string, args ...string) (*harness.Service, error) {
	addr, err := harness.FreeAddr()
	if err != nil {
		return nil, err
	}
	p := harness.NewService("grouper", s.bin, args, addr, logPath)
	if err := p.Start(); err != nil {
		return nil, err
	}
	return p, nil
}

// metric returns the value of a series from the grouper's /metrics (0
// when absent), named as /metrics prints it: with its labels, if it has
// any (`name{label="value"}`).
func metric(ctx context.Context, p *harness.Service, name string) (float64, error) {
	body, err := p.Metrics(ctx)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, nil
}

// restartGrouper stops the suite's grouper and starts it again with the
// same flags: a new process that remembers nothing of the pods it handled.
// It returns once the new process is ready.
func restartGrouper(ctx context.Context, t *testing.T) {
	t.Helper()
	if err := s.grouper.Stop(10 * time.Second); err != nil {
		t.Fatalf("stop grouper: %v", err)
	}
	if err := s.grouper.Start(); err != nil {
		t.Fatalf("start grouper again: %v", err)
	}
	if err := s.grouper.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
}
