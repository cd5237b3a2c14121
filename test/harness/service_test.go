package harness

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeServiceEnv makes the test binary act as a service: "ok" serves
// /readyz and /metrics and exits 0 on SIGTERM, "bad-exit" exits 3 on
// SIGTERM, "crash" exits 2 at once.
const fakeServiceEnv = "SLUICE_HARNESS_FAKE_SERVICE"

// fakeKillSelfEnv, set to anything, makes the fake service kill itself
// with SIGKILL once up, as an armed crash point would.
const fakeKillSelfEnv = "SLUICE_HARNESS_FAKE_KILL_SELF"

func TestMain(m *testing.M) {
	if mode := os.Getenv(fakeServiceEnv); mode != "" {
		os.Exit(fakeService(mode))
	}
	os.Exit(m.Run())
}

func fakeService(mode string) int {
	fs := flag.NewFlagSet("fake", flag.ContinueOnError)
	addr := fs.String("http-addr", "", "")
	fs.Bool("once-only", false, "a flag one start adds")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 1
	}
	fmt.Println("fake service up with", os.Args[1:])
	if mode == "crash" {
		fmt.Println("crashing")
		return 2
	}
	if os.Getenv(fakeKillSelfEnv) != "" {
		fmt.Println("killing myself")
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		time.Sleep(time.Minute) // never reached: the signal ends the process
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	mux := http.NewServeMux()
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") })
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "fake_total 1\n") })
	srv := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: time.Second}
	go func() { _ = srv.ListenAndServe() }()
	<-ctx.Done()
	_ = srv.Close()
	if mode == "bad-exit" {
		return 3
	}
	return 0
}

// newFake returns a Service running this test binary in mode.
func newFake(t *testing.T, mode string) *Service {
	t.Helper()
	t.Setenv(fakeServiceEnv, mode)
	addr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	svc := NewService("fake", bin, nil, addr, filepath.Join(t.TempDir(), "fake.log"))
	t.Cleanup(func() { _ = svc.Kill() })
	return svc
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestServiceLifecycle(t *testing.T) {
	ctx := testContext(t)
	svc := newFake(t, "ok")
	if exited, _ := svc.Exited(); !exited {
		t.Fatal("Exited() = false before Start")
	}
	if err := svc.Start(); err != nil {
		t.Fatal(err)
	}
	if err := svc.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if m, err := svc.Metrics(ctx); err != nil || !strings.Contains(m, "fake_total 1") {
		t.Errorf("Metrics = %q, %v; want fake_total 1", m, err)
	}
	if err := svc.Stop(10 * time.Second); err != nil {
		t.Fatalf("Stop = %v, want a clean exit", err)
	}
	if exited, err := svc.Exited(); !exited || err != nil {
		t.Errorf("Exited() = %v, %v after Stop; want true, nil", exited, err)
	}
	// A restart appends to the same log.
	if err := svc.Start(); err != nil {
		t.Fatal(err)
	}
	if err := svc.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if err := svc.Kill(); err != nil {
		t.Fatalf("Kill = %v", err)
	}
	if exited, _ := svc.Exited(); !exited {
		t.Error("Exited() = false after Kill")
	}
	if got := strings.Count(svc.Tail(100), "fake service up with"); got != 2 {
		t.Errorf("log has %d starts, want 2:\n%s", got, svc.Tail(100))
	}
	if !strings.Contains(svc.Tail(1), "--http-addr "+svc.HTTPAddr) {
		t.Errorf("last log line %q does not show --http-addr %s", svc.Tail(1), svc.HTTPAddr)
	}
}

func TestServiceFailures(t *testing.T) {
	t.Run("exit status after SIGTERM", func(t *testing.T) {
		svc := newFake(t, "bad-exit")
		if err := svc.Start(); err != nil {
			t.Fatal(err)
		}
		if err := svc.WaitReady(testContext(t)); err != nil {
			t.Fatal(err)
		}
		if err := svc.Stop(10 * time.Second); err == nil || !strings.Contains(err.Error(), "exit status 3") {
			t.Errorf("Stop = %v, want exit status 3", err)
		}
	})
	t.Run("crash before ready", func(t *testing.T) {
		svc := newFake(t, "crash")
		if err := svc.Start(); err != nil {
			t.Fatal(err)
		}
		err := svc.WaitReady(testContext(t))
		if err == nil || !strings.Contains(err.Error(), "exited") || !strings.Contains(err.Error(), "crashing") {
			t.Errorf("WaitReady = %v, want an exit naming the log's last lines", err)
		}
		if errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("WaitReady waited for its deadline: %v", err)
		}
	})
}

// A crash test starts a service once with a crash point armed, and maybe
// a flag, waits for it to die, and starts it again without either.
func TestServiceStartOnceAndWaitExited(t *testing.T) {
	ctx := testContext(t)
	svc := newFake(t, "ok")
	if err := svc.WaitExited(ctx); err != nil {
		t.Errorf("WaitExited before Start = %v, want nil", err)
	}
	if err := svc.StartOnce(Once{Env: []string{fakeKillSelfEnv + "=1"}, Args: []string{"--once-only"}}); err != nil {
		t.Fatal(err)
	}
	if err := svc.WaitExited(ctx); err != nil {
		t.Fatalf("WaitExited = %v, want nil once the fake killed itself", err)
	}
	if sig, ok := svc.ExitSignal(); !ok || sig != syscall.SIGKILL {
		t.Errorf("ExitSignal = %v, %v; want SIGKILL, true", sig, ok)
	}
	if !strings.Contains(svc.Tail(100), "with environment ["+fakeKillSelfEnv+"=1]") {
		t.Errorf("log does not record the extra environment:\n%s", svc.Tail(100))
	}
	if !strings.Contains(svc.Tail(100), "fake service up with [--http-addr "+svc.HTTPAddr+" --once-only]") {
		t.Errorf("the fake did not get the extra flag after its own:\n%s", svc.Tail(100))
	}

	// The environment and the flag were for one start only.
	if err := svc.Start(); err != nil {
		t.Fatal(err)
	}
	if tail := svc.Tail(100); strings.Contains(tail[strings.LastIndex(tail, "=== "):], "once-only") {
		t.Errorf("the restart got the first start's flag again:\n%s", tail)
	}
	if err := svc.WaitReady(ctx); err != nil {
		t.Fatalf("restart without the environment: %v", err)
	}
	if sig, ok := svc.ExitSignal(); ok {
		t.Errorf("ExitSignal = %v while running, want false", sig)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := svc.WaitExited(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitExited on a running service = %v, want its deadline", err)
	}
	if err := svc.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if sig, ok := svc.ExitSignal(); ok {
		t.Errorf("ExitSignal = %v after a clean exit, want false", sig)
	}
}

func TestPoll(t *testing.T) {
	calls := 0
	err := Poll(testContext(t), func() error {
		if calls++; calls < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Errorf("Poll = %v after %d calls, want nil after 3", err, calls)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = Poll(ctx, func() error { return errors.New("never") })
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "never") {
		t.Errorf("Poll = %v, want context.Canceled naming the last complaint", err)
	}
}

func TestBuildBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go build")
	}
	ctx := testContext(t)
	dir := t.TempDir()
	bin, err := BuildBinary(ctx, dir, "./test/testenv/cmd/localcluster")
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "localcluster"); bin != want {
		t.Errorf("BuildBinary = %q, want %q", bin, want)
	}
	st, err := os.Stat(bin)
	if err != nil {
		t.Fatalf("built binary: %v", err)
	}
	if st.Mode()&0o111 == 0 {
		t.Errorf("built binary %s has mode %v, want an executable", bin, st.Mode())
	}
	if _, err := BuildBinary(ctx, dir, "./test/testenv/cmd/missing"); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("BuildBinary of a missing package = %v, want an error naming it", err)
	}
}

// Build tags reach the compiler: only the tagged build dies at its crash
// point.
func TestBuildBinaryTags(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go build")
	}
	ctx := testContext(t)
	const pkg = "./test/harness/testdata/crashpoint"
	plain, err := BuildBinary(ctx, t.TempDir(), pkg)
	if err != nil {
		t.Fatal(err)
	}
	tagged, err := BuildBinary(ctx, t.TempDir(), pkg, "sluice_crashpoints")
	if err != nil {
		t.Fatal(err)
	}
	run := func(bin string) (string, error) {
		cmd := exec.CommandContext(ctx, bin)
		cmd.Env = append(os.Environ(), "SLUICE_CRASHPOINT=harness/test")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run(plain); err != nil || !strings.Contains(out, "passed harness/test") {
		t.Errorf("untagged build: %v, output %q; want it to pass the point", err, out)
	}
	out, err := run(tagged)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("tagged build ended with %v, want SIGKILL; output %q", err, out)
	}
	if !strings.Contains(out, "crashpoint harness/test: killing the process") {
		t.Errorf("tagged build's output %q does not name the crash point", out)
	}
}
