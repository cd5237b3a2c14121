package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sluice-dev/sluice/test/testenv"
)

const (
	// killWait bounds the wait for a process to go after SIGKILL.
	killWait = 10 * time.Second
	// tailBytes is how much of the end of a log Tail reads at most.
	tailBytes = 64 << 10
)

// Service is one service process, which may be started, stopped and started
// again. Its children die with the test process however that ends.
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

	mu  sync.Mutex
	run *run // the latest start; nil before the first
}

// run is one start of a Service's process.
type run struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited
	err  error         // how it exited; valid once done is closed
}

// NewService describes the service name running bin with args plus
// --http-addr httpAddr (every sluice service serves its probes there), its
// output appended to logPath. It does not start the process.
func NewService(name, bin string, args []string, httpAddr, logPath string) *Service {
	return &Service{
		Name:     name,
		HTTPAddr: httpAddr,
		LogPath:  logPath,
		bin:      bin,
		args:     append(slices.Clone(args), "--http-addr", httpAddr),
		sp:       testenv.NewSpawner(false),
	}
}

// Start starts the process. It does not wait for readiness.
func (s *Service) Start() error { return s.StartOnce(Once{}) }

// Once is what one start of a Service adds to its environment and flags;
// a later Start runs without them. A crash test uses it to arm a crash
// point in one run of a service.
type Once struct {
	// Env holds extra environment variables ("KEY=value").
	Env []string
	// Args holds extra flags, after the service's own (a repeated flag
	// takes the later value).
	Args []string
}

// StartOnce starts the process with once's additions for this start
// only. It does not wait for readiness.
func (s *Service) StartOnce(once Once) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	log, err := os.OpenFile(s.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("opening %s log: %w", s.Name, err)
	}
	defer log.Close() // the child has its own copy
	args := append(slices.Clone(s.args), once.Args...)
	fmt.Fprintf(log, "=== %s start %v\n", time.Now().Format(time.RFC3339Nano), args)
	if len(once.Env) > 0 {
		fmt.Fprintf(log, "=== with environment %v\n", once.Env)
	}
	cmd := exec.Command(s.bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(append(os.Environ(), "OTEL_SERVICE_NAME=sluice-"+s.Name), once.Env...)
	if err := s.sp.Start(cmd); err != nil {
		return fmt.Errorf("starting %s: %w", s.Name, err)
	}
	r := &run{cmd: cmd, done: make(chan struct{})}
	go func() { r.err = cmd.Wait(); close(r.done) }()
	s.run = r
	return nil
}

// Pid is the process id of the service's latest start; 0 when it never
// started or has exited.
func (s *Service) Pid() int {
	r := s.current()
	if r == nil {
		return 0
	}
	select {
	case <-r.done:
		return 0
	default:
		return r.cmd.Process.Pid
	}
}

func (s *Service) current() *run {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.run
}

// Exited reports whether the process has ended (or never started), and
// how: nil for a clean exit.
func (s *Service) Exited() (bool, error) {
	r := s.current()
	if r == nil {
		return true, nil
	}
	select {
	case <-r.done:
		return true, r.err
	default:
		return false, nil
	}
}

// WaitExited waits until the process has exited, or ctx ends; it returns
// nil once the process is gone (or was never started), however it ended:
// Exited and ExitSignal tell how.
func (s *Service) WaitExited(ctx context.Context) error {
	r := s.current()
	if r == nil {
		return nil
	}
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s still running: %w\n%s ends with:\n%s", s.Name, ctx.Err(), s.LogPath, s.Tail(20))
	}
}

// ExitSignal returns the signal that ended the latest run, and false if
// it is still running, exited by itself, or never started.
func (s *Service) ExitSignal() (syscall.Signal, bool) {
	exited, err := s.Exited()
	var exit *exec.ExitError
	if !exited || !errors.As(err, &exit) {
		return 0, false
	}
	ws, ok := exit.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() {
		return 0, false
	}
	return ws.Signal(), true
}

// WaitReady polls /readyz until it answers 200 or ctx ends; it fails at
// once if the process exits. The error ends with the end of the log.
func (s *Service) WaitReady(ctx context.Context) error {
	pollCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var exitErr error
	err := Poll(pollCtx, func() error {
		if exited, err := s.Exited(); exited {
			exitErr = fmt.Errorf("exited before it was ready (%v)", err)
			cancel() // no point waiting longer
			return exitErr
		}
		body, code, err := s.Get(pollCtx, "/readyz")
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("/readyz %d: %s", code, body)
		}
		return nil
	})
	if exitErr != nil {
		err = exitErr
	}
	if err != nil {
		return fmt.Errorf("%s not ready: %w\n%s ends with:\n%s", s.Name, err, s.LogPath, s.Tail(40))
	}
	return nil
}

// Get fetches path from the HTTP address and returns the body and status.
func (s *Service) Get(ctx context.Context, path string) (body string, code int, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.HTTPAddr+path, nil)
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

// Metrics returns the service's Prometheus metrics text.
func (s *Service) Metrics(ctx context.Context) (string, error) {
	body, code, err := s.Get(ctx, "/metrics")
	if err != nil {
		return "", fmt.Errorf("fetching %s metrics: %w", s.Name, err)
	}
	if code != http.StatusOK {
		return "", fmt.Errorf("fetching %s metrics: status %d", s.Name, code)
	}
	return body, nil
}

// MetricFamilies returns the service's metrics, parsed, by name.
func (s *Service) MetricFamilies(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	text, err := s.Metrics(ctx)
	if err != nil {
		return nil, err
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return nil, fmt.Errorf("parsing %s metrics: %w", s.Name, err)
	}
	return families, nil
}

// Metric returns the series of the service's metric name whose labels
// include every one of labels, or nil while there is none (a series with
// labels appears when it is first set).
func (s *Service) Metric(ctx context.Context, name string, labels map[string]string) (*dto.Metric, error) {
	families, err := s.MetricFamilies(ctx)
	if err != nil {
		return nil, err
	}
	for _, m := range families[name].GetMetric() {
		if hasLabels(m.GetLabel(), labels) {
			return m, nil
		}
	}
	return nil, nil
}

// Counter returns the value of the service's counter name in the series
// whose labels include every one of labels, and 0 while no such series
// exists (a counter with labels appears at its first increment).
func (s *Service) Counter(ctx context.Context, name string, labels map[string]string) (float64, error) {
	m, err := s.Metric(ctx, name, labels)
	return m.GetCounter().GetValue(), err
}

// Gauge returns the value of the service's gauge name in the series whose
// labels include every one of labels; ok is false while there is none.
func (s *Service) Gauge(ctx context.Context, name string, labels map[string]string) (v float64, ok bool, err error) {
	m, err := s.Metric(ctx, name, labels)
	if err != nil || m == nil {
		return 0, false, err
	}
	return m.GetGauge().GetValue(), true, nil
}

func hasLabels(have []*dto.LabelPair, want map[string]string) bool {
	found := 0
	for _, l := range have {
		if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
			found++
		}
	}
	return found == len(want)
}

// Kill ends the process at once with SIGKILL, as a crash would, and waits
// until it is gone.
func (s *Service) Kill() error {
	r := s.current()
	if r == nil {
		return nil
	}
	if err := r.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("killing %s: %w", s.Name, err)
	}
	select {
	case <-r.done:
		return nil
	case <-time.After(killWait):
		return fmt.Errorf("%s still running %s after SIGKILL", s.Name, killWait)
	}
}

// Stop asks the process to shut down with SIGTERM and waits up to grace
// for it to exit. It fails if the process exits unsuccessfully, or does
// not exit in time (it is then killed).
func (s *Service) Stop(grace time.Duration) error {
	r := s.current()
	if r == nil {
		return nil
	}
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signalling %s: %w", s.Name, err)
	}
	select {
	case <-r.done:
		if r.err != nil {
			return fmt.Errorf("%s exited after SIGTERM: %w", s.Name, r.err)
		}
		return nil
	case <-time.After(grace):
	}
	_ = s.Kill()
	return fmt.Errorf("%s did not exit within %s of SIGTERM; killed", s.Name, grace)
}

// Tail returns the last n lines of the log, for error messages.
func (s *Service) Tail(n int) string {
	f, err := os.Open(s.LogPath)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > tailBytes {
		_, _ = f.Seek(-tailBytes, io.SeekEnd)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
