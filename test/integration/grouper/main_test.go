// Package grouper tests sluice's grouper against a real kube-apiserver: the
// grouper binary runs as its own process and talks real gRPC to a fake
// admitter served by the test. Pods are created already gated, labelled and
// finalized, as the webhook would leave them.
package grouper

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sluice-dev/sluice/test/testenv"
)

// namespace holds the test pods.
const namespace = "grouper-it"

// suite is the state shared by the tests of this package.
type suite struct {
	env      *testenv.Env
	cs       kubernetes.Interface
	admitter *fakeAdmitter
	grouper  *process
	bin      string // the built grouper binary
	tmpDir   string
}

var s suite

func TestMain(m *testing.M) {
	code := testenv.RunMain(m, testenv.Options{}, setUp)
	if s.grouper != nil {
		if err := s.grouper.stop(10 * time.Second); err != nil {
			fmt.Fprintf(os.Stderr, "stop grouper: %v\n", err)
			code = max(code, 1)
		}
		if code != 0 {
			fmt.Fprintf(os.Stderr, "grouper log: %s\n", s.grouper.logPath)
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
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create namespace: %w", err)
	}
	if s.admitter, err = startFakeAdmitter(); err != nil {
		return err
	}
	if s.tmpDir, err = os.MkdirTemp("", "sluice-grouper-test-"); err != nil {
		return err
	}
	if s.bin, err = build(ctx, s.tmpDir); err != nil {
		return err
	}
	s.grouper, err = launch(s.bin, filepath.Join(s.tmpDir, "grouper.log"),
		"--kubeconfig", env.Kubeconfig,
		"--admitter-addr", s.admitter.addr,
		"--workers", "4",
		"--log-format", "text", "--log-level", "debug")
	if err != nil {
		return err
	}
	return s.grouper.waitReady(ctx)
}

// build compiles the grouper command into dir.
func build(ctx context.Context, dir string) (string, error) {
	root, err := testenv.ModuleRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "grouper")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./services/grouper")
	cmd.Dir = root
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build grouper: %w\n%s", err, msg)
	}
	return out, nil
}

// process is a running grouper binary.
type process struct {
	cmd      *exec.Cmd
	httpAddr string
	logPath  string
	exited   chan error
}

// launch starts the grouper with args plus its own --http-addr, logging to
// logPath.
func launch(bin, logPath string, args ...string) (*process, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	p := &process{
		httpAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		logPath:  logPath,
		exited:   make(chan error, 1),
	}
	logFile, err := os.Create(p.logPath)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(bin, append(args, "--http-addr", p.httpAddr)...)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	// The grouper dies with the test binary however the test ends.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start grouper: %w", err)
	}
	go func() { p.exited <- p.cmd.Wait(); _ = logFile.Close() }()
	return p, nil
}

// waitReady polls /readyz until it answers 200.
func (p *process) waitReady(ctx context.Context) error {
	err := poll(ctx, func() error {
		select {
		case err := <-p.exited:
			p.exited <- err
			return fmt.Errorf("grouper exited early (%v)", err)
		default:
		}
		body, code, err := p.get(ctx, "/readyz")
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("/readyz %d: %s", code, body)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("grouper not ready: %w\n%s", err, tail(p.logPath))
	}
	return nil
}

func (p *process) get(ctx context.Context, path string) (string, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.httpAddr+path, nil)
	if err != nil {
		return "", 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), resp.StatusCode, err
}

// metric returns the value of an unlabelled series from /metrics (0 when
// absent).
func (p *process) metric(ctx context.Context, name string) (float64, error) {
	body, code, err := p.get(ctx, "/metrics")
	if err != nil {
		return 0, err
	}
	if code != http.StatusOK {
		return 0, fmt.Errorf("/metrics %d", code)
	}
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, nil
}

// stop sends SIGTERM and waits up to grace for a clean exit.
func (p *process) stop(grace time.Duration) error {
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case err := <-p.exited:
		p.exited <- err
		return err
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		return fmt.Errorf("grouper did not exit within %s of SIGTERM", grace)
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// poll calls f until it returns nil or ctx ends; the error names f's last
// complaint.
func poll(ctx context.Context, f func() error) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// tail returns the last lines of a log file for error messages.
func tail(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1024*1024), 1024*1024)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	return strings.Join(lines, "\n")
}
