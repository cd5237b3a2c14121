package serve

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
)

// parsedFlags returns Flags as BindFlags leaves them after parsing args.
func parsedFlags(t *testing.T, args ...string) *Flags {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	f := BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return f
}

// waitDone returns nil once ctx is done, or an error after 10s.
func waitDone(ctx context.Context, when string) error {
	select {
	case <-ctx.Done():
		return nil
	case <-time.After(10 * time.Second):
		return errors.New("context not cancelled " + when)
	}
}

func TestMainCancelsOnSIGTERM(t *testing.T) {
	t.Setenv("OTEL_TRACES_EXPORTER", "none")
	var out bytes.Buffer
	err := Main(context.Background(), &out, "sluice-test", "v0", parsedFlags(t, "--log-format", "text"),
		func(ctx context.Context, log logr.Logger) error {
			log.Info("running body")
			if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
				return err
			}
			return waitDone(ctx, "after SIGTERM")
		})
	if err != nil {
		t.Fatalf("Main = %v, want nil", err)
	}
	for _, want := range []string{"running body", "stopped"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("log %q lacks %q", out.String(), want)
		}
	}
}

func TestMainErrors(t *testing.T) {
	bodyErr := errors.New("body failed")
	tests := []struct {
		name     string
		args     []string
		exporter string
		body     error
		wantErr  string
		wantRun  bool
	}{
		{name: "bad log level", args: []string{"--log-level", "loud"}, exporter: "none", wantErr: "--log-level"},
		{name: "bad log format", args: []string{"--log-format", "xml"}, exporter: "none", wantErr: "--log-format"},
		{name: "bad exporter", exporter: "zipkin", wantErr: "set up tracing"},
		{name: "body error", exporter: "none", body: bodyErr, wantErr: bodyErr.Error(), wantRun: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("OTEL_TRACES_EXPORTER", tt.exporter)
			var out bytes.Buffer
			ran := false
			err := Main(context.Background(), &out, "sluice-test", "v0", parsedFlags(t, tt.args...),
				func(context.Context, logr.Logger) error { ran = true; return tt.body })
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Main = %v, want an error containing %q", err, tt.wantErr)
			}
			if tt.body != nil && !errors.Is(err, tt.body) {
				t.Errorf("Main = %v, want the body's error", err)
			}
			if ran != tt.wantRun {
				t.Errorf("body ran = %v, want %v", ran, tt.wantRun)
			}
			if strings.Contains(out.String(), "stopped") {
				t.Errorf("log %q says stopped after a failure", out.String())
			}
		})
	}
}

func TestMainFollowsParentContext(t *testing.T) {
	t.Setenv("OTEL_TRACES_EXPORTER", "none")
	parent, cancel := context.WithCancel(context.Background())
	err := Main(parent, &bytes.Buffer{}, "sluice-test", "v0", parsedFlags(t),
		func(ctx context.Context, _ logr.Logger) error {
			cancel()
			return waitDone(ctx, "with its parent")
		})
	if err != nil {
		t.Fatalf("Main = %v, want nil", err)
	}
}
