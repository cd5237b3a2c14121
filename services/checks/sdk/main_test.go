package sdk

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
)

// syncBuffer is a bytes.Buffer safe for the server's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func readyFunc(context.Context, *checksv1.EvaluateRequest) (*checksv1.EvaluateResponse, error) {
	return Ready(), nil
}

func TestRunRefusesWhatCannotServe(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	good := Info{Name: "main.checks.example.com"}
	tlsDir := issue(t, newCA(t, "CA"), t.TempDir())
	missing := filepath.Join(t.TempDir(), "ca.crt")
	tests := []struct {
		name     string
		args     []string
		info     Info
		wantCode int
		wantLog  string
	}{
		{name: "unknown flag", args: []string{"--port", "1"}, info: good, wantCode: 2, wantLog: "flag provided but not defined: -port"},
		{name: "invalid info", args: []string{"--addr", "127.0.0.1:0"}, info: Info{Name: "Not A DNS Name"}, wantCode: 1, wantLog: "invalid Info"},
		{name: "address taken", args: []string{"--addr", taken.Addr().String()}, info: good, wantCode: 1, wantLog: "listen on --addr " + taken.Addr().String()},
		{name: "health address taken", args: []string{"--addr", "127.0.0.1:0", "--health-addr", taken.Addr().String()}, info: good, wantCode: 1,
			wantLog: "listen on --health-addr " + taken.Addr().String()},
		{name: "TLS key without certificate", args: []string{"--tls-key-file", tlsDir.key()}, info: good, wantCode: 2,
			wantLog: "--tls-cert-file is required to serve TLS"},
		{name: "TLS certificate without key", args: []string{"--tls-cert-file", tlsDir.cert(), "--tls-ca-file", tlsDir.ca()}, info: good, wantCode: 2,
			wantLog: "--tls-key-file is required to serve TLS"},
		{name: "TLS CA unreadable", args: []string{"--tls-cert-file", tlsDir.cert(), "--tls-key-file", tlsDir.key(), "--tls-ca-file", missing}, info: good, wantCode: 2,
			wantLog: "--tls-ca-file: open " + missing},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr syncBuffer
			code := run(t.Context(), "provider", tt.args, &stderr, tt.info, EvaluateFunc(readyFunc))
			if code != tt.wantCode {
				t.Errorf("exit code %d, want %d; stderr:\n%s", code, tt.wantCode, stderr.String())
			}
			if !strings.Contains(stderr.String(), tt.wantLog) {
				t.Errorf("stderr does not say %q:\n%s", tt.wantLog, stderr.String())
			}
		})
	}
}

// TestRunServesUntilCancelled serves an EvaluateFunc on a free port,
// answers a call through it, and exits 0 once its context ends.
func TestRunServesUntilCancelled(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()

	ctx, cancel := context.WithCancel(t.Context())
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, "provider", []string{"--addr", addr}, &stderr, Info{Name: "main.checks.example.com"}, EvaluateFunc(readyFunc))
	}()

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	callCtx, callCancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer callCancel()
	resp, err := checksv1.NewCheckServiceClient(conn).Evaluate(callCtx, &checksv1.EvaluateRequest{
		EvaluationKey: "uid/res/main",
		Workload:      &checksv1.Workload{Namespace: "ns", Name: "w", PodSets: []*checksv1.PodSet{{Name: "main", Count: 1}}},
	}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatalf("Evaluate through Main's server: %v", err)
	}
	if resp.GetState() != checksv1.State_STATE_READY {
		t.Fatalf("state %s, want STATE_READY", resp.GetState())
	}
	if err := (EvaluateFunc(readyFunc)).Release(t.Context(), &checksv1.ReleaseRequest{EvaluationKey: "k"}); err != nil {
		t.Fatalf("EvaluateFunc.Release: %v", err)
	}

	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit code %d after cancel, want 0; stderr:\n%s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return after its context ended")
	}
	for _, want := range []string{`"msg":"serving sluice.checks.v1"`, `"addr":"` + addr + `"`, `"transport":"plaintext"`, `"msg":"serving plaintext: `, `"msg":"provider stopped"`} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("log does not contain %s:\n%s", want, stderr.String())
		}
	}
}

// loggedAddr waits for run's log to name the address it bound for key
// ("addr" or "healthAddr"). Tests pass port 0 and read the port back, since
// a port found free beforehand may be taken by any connection meanwhile.
func loggedAddr(t *testing.T, log *syncBuffer, key string) string {
	t.Helper()
	re := regexp.MustCompile(`"` + key + `":"([^"]+)"`)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if m := re.FindStringSubmatch(log.String()); m != nil {
			return m[1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("the log names no %s after 10s:\n%s", key, log.String())
		}
		time.Sleep(10 * time.Millisecond) // poll interval
	}
}

// TestRunServesMutualTLS runs Main's flags for mutual TLS and HTTP probes:
// a client with a certificate of the CA gets an answer, the log says the
// transport, and /readyz answers over plaintext HTTP.
func TestRunServesMutualTLS(t *testing.T) {
	ca := newCA(t, "CA")
	server, client := issue(t, ca, t.TempDir()), issue(t, ca, t.TempDir())

	ctx, cancel := context.WithCancel(t.Context())
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, "provider", []string{"--addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0",
			"--tls-cert-file", server.cert(), "--tls-key-file", server.key(), "--tls-ca-file", server.ca(), "--tls-refresh-interval", "1s"},
			&stderr, Info{Name: "main.checks.example.com"}, EvaluateFunc(readyFunc))
	}()
	addr, healthAddr := loggedAddr(t, &stderr, "addr"), loggedAddr(t, &stderr, "healthAddr")

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(clientCreds(t, client.clientFiles(true))))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	callCtx, callCancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer callCancel()
	if _, err := checksv1.NewCheckServiceClient(conn).Evaluate(callCtx, request(), grpc.WaitForReady(true)); err != nil {
		t.Fatalf("Evaluate over mutual TLS: %v\n%s", err, stderr.String())
	}
	if code, body := httpGet(t, "http://"+healthAddr+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz = %d %q, want 200 while serving", code, body)
	}

	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit code %d after cancel, want 0; stderr:\n%s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return after its context ended")
	}
	for _, want := range []string{`"transport":"mutual TLS"`, `"msg":"serving HTTP probes"`} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("log does not contain %s:\n%s", want, stderr.String())
		}
	}
	if strings.Contains(stderr.String(), "serving plaintext") {
		t.Errorf("log says plaintext while serving mutual TLS:\n%s", stderr.String())
	}
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}
