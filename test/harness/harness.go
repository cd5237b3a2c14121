// Package harness runs sluice's four services as separate processes against
// a test control plane, the way an operator runs them: real binaries, real
// gRPC over loopback, real HTTPS for the webhook. End-to-end tests and
// benchmarks use it to start, kill and restart services.
package harness

import (
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
	"sync"
	"syscall"
	"time"

	"github.com/sluice-dev/sluice/test/testenv"
)

// Services names the four services, in the order they are started.
var Services = []string{"admitter", "checks", "grouper", "webhook"}

// Build compiles the service binaries into dir (go build's cache keeps this
// quick after the first time).
func Build(ctx context.Context, dir string) error {
	root, err := testenv.ModuleRoot()
	if err != nil {
		return err
	}
	args := []string{"build", "-o", dir + string(os.PathSeparator)}
	for _, s := range Services {
		args = append(args, "./services/"+s)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building services: %w\n%s", err, out)
	}
	return nil
}

// Service is one running service process.
type Service struct {
	Name string
	// HTTPAddr serves /healthz, /readyz and /metrics.
	HTTPAddr string
	// GRPCAddr is the service's gRPC address, if it has one.
	GRPCAddr string
	// LogPath collects the process's output across restarts.
	LogPath string

	bin  string
	args []string
	sp   *testenv.Spawner

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Start starts the process. It does not wait for readiness.
func (s *Service) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	log, err := os.OpenFile(s.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("opening %s log: %w", s.Name, err)
	}
	defer log.Close()
	fmt.Fprintf(log, "=== %s start %v\n", time.Now().Format(time.RFC3339Nano), s.args)
	cmd := exec.Command(s.bin, s.args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), "OTEL_SERVICE_NAME=sluice-"+s.Name)
	if err := s.sp.Start(cmd); err != nil {
		return fmt.Errorf("starting %s: %w", s.Name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.cmd, s.done = cmd, done
	return nil
}

// WaitReady polls /readyz until it answers 200 or ctx ends.
func (s *Service) WaitReady(ctx context.Context) error {
	url := "http://" + s.HTTPAddr + "/readyz"
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if s.exited() {
			return fmt.Errorf("%s exited before it was ready; see %s", s.Name, s.LogPath)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready (last error %v); see %s: %w", s.Name, err, s.LogPath, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (s *Service) exited() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done == nil {
		return true
	}
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// Kill ends the process at once with SIGKILL, as a crash would, and waits
// until it is gone.
func (s *Service) Kill() error { return s.signal(syscall.SIGKILL, 0) }

// Stop asks the process to shut down with SIGTERM and waits up to grace
// before killing it.
func (s *Service) Stop(grace time.Duration) error { return s.signal(syscall.SIGTERM, grace) }

func (s *Service) signal(sig syscall.Signal, grace time.Duration) error {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return nil
	}
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signalling %s: %w", s.Name, err)
	}
	select {
	case <-done:
		return nil
	case <-time.After(grace + 10*time.Second):
	}
	_ = cmd.Process.Kill()
	<-done
	return fmt.Errorf("%s did not stop within %s after %v; killed", s.Name, grace, sig)
}

// Metrics returns the service's Prometheus metrics text.
func (s *Service) Metrics(ctx context.Context) (string, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.HTTPAddr+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("fetching %s metrics: %w", s.Name, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return "127.0.0.1:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port), nil
}

func logDir(env *testenv.Env) string { return filepath.Join(env.Dir, "logs") }
