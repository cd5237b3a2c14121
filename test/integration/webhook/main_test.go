// Package webhook tests sluice's pod webhook against a real kube-apiserver:
// the webhook binary runs in self-register mode on loopback and every pod is
// created through the API server, which calls it over HTTPS.
package webhook

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

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/test/testenv"
)

// suite is the state shared by the tests of this package.
type suite struct {
	env     *testenv.Env
	client  client.Client
	binary  string // the built webhook binary
	webhook *webhookProcess
	tmpDirs []string // removed after a passing run
}

var s suite

func TestMain(m *testing.M) {
	code := testenv.RunMain(m, testenv.Options{}, setUp)
	if s.webhook != nil {
		if err := s.webhook.stop(10 * time.Second); err != nil {
			fmt.Fprintf(os.Stderr, "stop webhook: %v\n", err)
		}
		if code != 0 {
			fmt.Fprintf(os.Stderr, "webhook log: %s\n", s.webhook.logPath)
		}
	}
	if code == 0 {
		for _, d := range s.tmpDirs {
			_ = os.RemoveAll(d)
		}
	}
	os.Exit(code)
}

func setUp(env *testenv.Env) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s.env = env
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		return err
	}
	c, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	s.client = c
	s.binary, err = buildWebhook(ctx)
	if err != nil {
		return err
	}
	// Start the webhook before the LocalQueue CRD exists, as happens when
	// everything is applied at once: it must wait for the CRD, not ready
	// meanwhile, and become ready once the CRD is served. This instance
	// outlives the API server (RunMain stops the control plane first), so it
	// leaves its configurations in place.
	p, err := launchWebhook("sluice-webhook")
	if err != nil {
		return err
	}
	s.webhook = p
	if err := poll(ctx, func() error {
		if !strings.Contains(tail(p.logPath), "waiting for the LocalQueue CRD") {
			return errors.New("webhook does not say it waits for the LocalQueue CRD")
		}
		return nil
	}); err != nil {
		return err
	}
	if err := poll(ctx, func() error { _, _, err := p.get(ctx, "/readyz"); return err }); err != nil {
		return err
	}
	if body, code, _ := p.get(ctx, "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "caches") {
		return fmt.Errorf("webhook without its caches: /readyz %d %q, want 503 naming the caches", code, body)
	}
	if err := installLocalQueueCRD(ctx, c); err != nil {
		return err
	}
	return p.waitReady(ctx)
}

// buildWebhook compiles the webhook command into a temporary directory.
func buildWebhook(ctx context.Context) (string, error) {
	root, err := testenv.ModuleRoot()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "sluice-webhook-test-")
	if err != nil {
		return "", err
	}
	s.tmpDirs = append(s.tmpDirs, dir)
	out := filepath.Join(dir, "webhook")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./services/webhook")
	cmd.Dir = root
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build webhook: %w\n%s", err, msg)
	}
	return out, nil
}

// installLocalQueueCRD installs the LocalQueue CRD from deploy/crd and waits
// until it is served.
func installLocalQueueCRD(ctx context.Context, c client.Client) error {
	root, err := testenv.ModuleRoot()
	if err != nil {
		return err
	}
	data, err := os.ReadFile(filepath.Join(root, "deploy", "crd", "sluice.dev_localqueues.yaml"))
	if err != nil {
		return fmt.Errorf("read LocalQueue CRD: %w", err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(data, crd); err != nil {
		return fmt.Errorf("decode LocalQueue CRD: %w", err)
	}
	if err := c.Create(ctx, crd); err != nil {
		return fmt.Errorf("create LocalQueue CRD: %w", err)
	}
	return poll(ctx, func() error {
		got := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(crd), got); err != nil {
			return err
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return nil
			}
		}
		return errors.New("LocalQueue CRD not established yet")
	})
}

// webhookProcess is a running webhook binary.
type webhookProcess struct {
	cmd      *exec.Cmd
	httpAddr string
	logPath  string
	exited   chan error
}

// startWebhook runs the webhook in self-register mode under configName,
// with extra flags, and waits until it reports ready.
func startWebhook(ctx context.Context, configName string, extra ...string) (*webhookProcess, error) {
	p, err := launchWebhook(configName, extra...)
	if err != nil {
		return nil, err
	}
	if err := p.waitReady(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// launchWebhook starts the webhook binary without waiting for it.
func launchWebhook(configName string, extra ...string) (*webhookProcess, error) {
	webhookPort, err := freePort()
	if err != nil {
		return nil, err
	}
	httpPort, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "sluice-webhook-"+configName+"-")
	if err != nil {
		return nil, err
	}
	s.tmpDirs = append(s.tmpDirs, dir)
	p := &webhookProcess{
		httpAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(httpPort)),
		logPath:  filepath.Join(dir, "webhook.log"),
		exited:   make(chan error, 1),
	}
	args := []string{
		"--kubeconfig", s.env.Kubeconfig,
		"--self-register",
		"--webhook-config-name", configName,
		"--webhook-port", strconv.Itoa(webhookPort),
		"--http-addr", p.httpAddr,
		"--cert-dir", filepath.Join(dir, "certs"),
		"--shutdown-delay", "0s",
		"--log-format", "text", "--log-level", "debug",
	}
	args = append(args, extra...)
	logFile, err := os.Create(p.logPath)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(s.binary, args...)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	// The webhook dies with the test binary however the test ends.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start webhook: %w", err)
	}
	go func() { p.exited <- p.cmd.Wait(); _ = logFile.Close() }()

	return p, nil
}

// waitReady polls /readyz until it answers 200; on failure it stops the
// process and returns its log.
func (p *webhookProcess) waitReady(ctx context.Context) error {
	err := poll(ctx, func() error {
		select {
		case err := <-p.exited:
			p.exited <- err
			return fmt.Errorf("webhook exited early (%v)", err)
		default:
		}
		return p.ready(ctx)
	})
	if err != nil {
		_ = p.stop(time.Second)
		return fmt.Errorf("webhook not ready: %w\n%s", err, tail(p.logPath))
	}
	return nil
}

// ready returns nil when /readyz answers 200.
func (p *webhookProcess) ready(ctx context.Context) error {
	body, code, err := p.get(ctx, "/readyz")
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("/readyz %d: %s", code, body)
	}
	return nil
}

func (p *webhookProcess) get(ctx context.Context, path string) (string, int, error) {
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

// stop sends SIGTERM and waits up to grace for a clean exit.
func (p *webhookProcess) stop(grace time.Duration) error {
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case err := <-p.exited:
		p.exited <- err
		return err
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		return fmt.Errorf("webhook did not exit within %s of SIGTERM", grace)
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
	tick := time.NewTicker(100 * time.Millisecond)
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
	var b bytes.Buffer
	for _, l := range lines {
		b.WriteString(l + "\n")
	}
	return b.String()
}
