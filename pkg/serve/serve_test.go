package serve

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
)

// startServer runs s on 127.0.0.1:0 until the test ends and returns its base URL.
func startServer(t *testing.T, s *Server) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, lis) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return "http://" + lis.Addr().String()
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read %s: %v", url, err)
	}
	return resp.StatusCode, string(body)
}

func TestProbes(t *testing.T) {
	var synced, leading atomic.Bool
	s := NewServer(NewRegistry())
	s.AddReadinessCheck("informers", func(context.Context) error {
		if !synced.Load() {
			return errors.New("caches not synced")
		}
		return nil
	})
	s.AddLivenessCheck("loop", func(context.Context) error {
		if !leading.Load() {
			return errors.New("loop stalled")
		}
		return nil
	})
	base := startServer(t, s)

	tests := []struct {
		name       string
		synced     bool
		live       bool
		path       string
		wantStatus int
		wantBody   []string
	}{
		{name: "not ready before sync", path: "/readyz", wantStatus: 503, wantBody: []string{"[-]informers failed: caches not synced", "readyz check failed"}},
		{name: "ready after sync", synced: true, path: "/readyz", wantStatus: 200, wantBody: []string{"[+]informers ok", "readyz check passed"}},
		{name: "not live when check fails", path: "/healthz", wantStatus: 503, wantBody: []string{"[-]loop failed: loop stalled"}},
		{name: "live when check passes", live: true, path: "/healthz", wantStatus: 200, wantBody: []string{"[+]loop ok"}},
		{name: "ready flips back", synced: false, live: true, path: "/readyz", wantStatus: 503, wantBody: []string{"[-]informers"}},
		{name: "unknown path", path: "/nope", wantStatus: 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synced.Store(tt.synced)
			leading.Store(tt.live)
			code, body := get(t, base+tt.path)
			if code != tt.wantStatus {
				t.Errorf("GET %s = %d, want %d (body %q)", tt.path, code, tt.wantStatus, body)
			}
			for _, want := range tt.wantBody {
				if !strings.Contains(body, want) {
					t.Errorf("GET %s body %q lacks %q", tt.path, body, want)
				}
			}
		})
	}
}

func TestHealthzWithoutChecks(t *testing.T) {
	base := startServer(t, NewServer(prometheus.NewRegistry()))
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := get(t, base+path); code != http.StatusOK {
			t.Errorf("GET %s = %d %q, want 200", path, code, body)
		}
	}
}

func TestMetrics(t *testing.T) {
	reg := NewRegistry()
	admitted := prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_test_admitted_total", Help: "test"})
	reg.MustRegister(admitted)
	admitted.Add(3)
	base := startServer(t, NewServer(reg))

	code, body := get(t, base+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics = %d", code)
	}
	for _, want := range []string{"sluice_test_admitted_total 3", "go_goroutines ", "process_start_time_seconds "} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestPprofOnlyWhenEnabled(t *testing.T) {
	for _, on := range []bool{false, true} {
		srv := NewServer(prometheus.NewRegistry())
		srv.EnablePprof(on)
		base := startServer(t, srv)
		code, body := get(t, base+"/debug/pprof/")
		if got := code == http.StatusOK && strings.Contains(body, "goroutine"); got != on {
			t.Errorf("pprof enabled=%v: GET /debug/pprof/ = %d; profiles served = %v", on, code, got)
		}
	}
}

func TestRunReportsListenerFailure(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis.Close()
	err = NewServer(prometheus.NewRegistry()).Run(context.Background(), lis)
	if err == nil || !strings.Contains(err.Error(), "serve HTTP on 127.0.0.1:") {
		t.Fatalf("Run on a closed listener = %v, want a serve error naming the address", err)
	}
}

func TestBindFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want Flags
	}{
		{name: "defaults", want: Flags{HTTPAddr: ":8080", LogLevel: "info", LogFormat: "json"}},
		{name: "overrides", args: []string{"--http-addr=127.0.0.1:9000", "--log-level=debug", "--log-format=text", "--pprof"},
			want: Flags{HTTPAddr: "127.0.0.1:9000", LogLevel: "debug", LogFormat: "text", Pprof: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			f := BindFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			if *f != tt.want {
				t.Errorf("flags = %+v, want %+v", *f, tt.want)
			}
		})
	}
}

func TestFlagsNewLogger(t *testing.T) {
	tests := []struct {
		name    string
		flags   Flags
		wantErr string
	}{
		{name: "valid", flags: Flags{LogLevel: "debug", LogFormat: "text"}},
		{name: "bad level", flags: Flags{LogLevel: "chatty", LogFormat: "json"}, wantErr: `--log-level/--log-format: log level "chatty"`},
		{name: "bad format", flags: Flags{LogLevel: "info", LogFormat: "yaml"}, wantErr: `log format "yaml"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			log, err := tt.flags.NewLogger(&buf)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			log.V(1).Info("visible at debug")
			if !strings.Contains(buf.String(), "visible at debug") {
				t.Errorf("debug logger dropped a V(1) line: %q", buf.String())
			}
		})
	}
}

func TestSignalContextCancelsOnSIGTERM(t *testing.T) {
	ctx, stop := SignalContext()
	defer stop()
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("context not cancelled after SIGTERM")
	}
}

func TestListenAndRun(t *testing.T) {
	// An address already taken is reported naming the flag.
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	err = NewServer(prometheus.NewRegistry()).ListenAndRun(context.Background(), logr.Discard(), taken.Addr().String())
	if err == nil || !strings.Contains(err.Error(), "--http-addr "+taken.Addr().String()) {
		t.Fatalf("ListenAndRun on a taken address: %v, want an error naming --http-addr", err)
	}

	// A free address is served until the context ends.
	addr := taken.Addr().String()
	taken.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- NewServer(prometheus.NewRegistry()).ListenAndRun(ctx, logr.Discard(), addr) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("/healthz = %d, want 200", resp.StatusCode)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz never answered: %v", err)
		}
		time.Sleep(20 * time.Millisecond) // polling a port with a deadline
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("ListenAndRun after cancel = %v, want nil", err)
	}
}
