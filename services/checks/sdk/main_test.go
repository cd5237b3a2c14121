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
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

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

// TestRunTransportRules runs Main with flags that break the transport
// rules: each exits 2 before serving, naming the flags. Its context ends
// after a few seconds, so a provider that serves anyway fails the test
// (exit 0) instead of hanging it.
func TestRunTransportRules(t *testing.T) {
	tlsDir := issue(t, newCA(t, "CA"), t.TempDir())
	mutual := []string{"--tls-cert-file", tlsDir.cert(), "--tls-key-file", tlsDir.key(), "--tls-ca-file", tlsDir.ca()}
	tests := []struct {
		name    string
		args    []string
		wantLog []string
	}{
		{name: "plaintext on every interface", args: []string{"--addr", "0.0.0.0:0"},
			wantLog: []string{"--addr 0.0.0.0:0 is not a loopback address, and a provider serves plaintext only on loopback", "--tls-cert-file", "--insecure-plaintext"}},
		{name: "plaintext on the default address", args: nil,
			wantLog: []string{"--addr " + DefaultAddr + " is not a loopback address", "--insecure-plaintext"}},
		{name: "plaintext on a name", args: []string{"--addr", "provider.example:0"},
			wantLog: []string{"--addr provider.example:0 is not a loopback address"}},
		{name: "insecure plaintext with TLS", args: append([]string{"--addr", "127.0.0.1:0", "--insecure-plaintext"}, mutual...),
			wantLog: []string{"--insecure-plaintext allows plaintext, and the --tls-* flags serve TLS"}},
		{name: "client identity in plaintext", args: []string{"--addr", "127.0.0.1:0", "--client-identity", admitterIdentity},
			wantLog: []string{"--client-identity needs mutual TLS"}},
		{name: "client identity without a client CA",
			args:    []string{"--addr", "127.0.0.1:0", "--tls-cert-file", tlsDir.cert(), "--tls-key-file", tlsDir.key(), "--client-identity", admitterIdentity},
			wantLog: []string{"--client-identity needs mutual TLS: --tls-ca-file"}},
		{name: "client identity that is no URI", args: append([]string{"--addr", "127.0.0.1:0", "--client-identity", "sluice-admitter"}, mutual...),
			wantLog: []string{`invalid value "sluice-admitter" for flag -client-identity`, "not an absolute URI"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
			defer cancel()
			var stderr syncBuffer
			if code := run(ctx, "provider", tt.args, &stderr, Info{Name: "main.checks.example.com"}, EvaluateFunc(readyFunc)); code != 2 {
				t.Errorf("exit code %d, want 2; stderr:\n%s", code, stderr.String())
			}
			for _, want := range tt.wantLog {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("stderr does not say %q:\n%s", want, stderr.String())
				}
			}
		})
	}
}

// TestRunServesInsecurePlaintext serves plaintext on every interface with
// --insecure-plaintext: a call gets through, and the log warns.
func TestRunServesInsecurePlaintext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, "provider", []string{"--addr", "0.0.0.0:0", "--insecure-plaintext"}, &stderr,
			Info{Name: "main.checks.example.com"}, EvaluateFunc(readyFunc))
	}()
	addr := loggedAddr(t, &stderr, "addr")
	lis, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	conn := dialWith(t, dialAddr(lis), insecure.NewCredentials())
	if err := evaluate(t.Context(), conn); err != nil {
		t.Fatalf("Evaluate over plaintext on %s: %v\n%s", addr, err, stderr.String())
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit code %d after cancel, want 0; stderr:\n%s", code, stderr.String())
	}
	for _, want := range []string{`"transport":"plaintext"`, `"level":"WARN","msg":"serving plaintext on an address that is not loopback`} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("log does not contain %s:\n%s", want, stderr.String())
		}
	}
}

// TestRunServesClientIdentities serves mutual TLS to --client-identity
// alone: that identity is served, another of the same CA is denied.
func TestRunServesClientIdentities(t *testing.T) {
	root := t.TempDir()
	ca := newCA(t, "CA")
	server, admitter := issue(t, ca, filepath.Join(root, "server")), issue(t, ca, filepath.Join(root, "admitter"))
	other := issueAs(t, ca, filepath.Join(root, "other"), otherIdentity)

	ctx, cancel := context.WithCancel(t.Context())
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, "provider", []string{"--addr", "127.0.0.1:0", "--client-identity", admitterIdentity,
			"--tls-cert-file", server.cert(), "--tls-key-file", server.key(), "--tls-ca-file", server.ca()},
			&stderr, Info{Name: "main.checks.example.com"}, EvaluateFunc(readyFunc))
	}()
	addr := loggedAddr(t, &stderr, "addr")
	if err := evaluate(t.Context(), dialWith(t, addr, clientCreds(t, admitter.clientFiles(true)))); err != nil {
		t.Errorf("Evaluate as %s: %v", admitterIdentity, err)
	}
	err := evaluate(t.Context(), dialWith(t, addr, clientCreds(t, other.clientFiles(true))))
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), otherIdentity) || !strings.Contains(err.Error(), admitterIdentity) {
		t.Errorf("Evaluate as %s = %v, want PERMISSION_DENIED naming both identities", otherIdentity, err)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit code %d after cancel, want 0; stderr:\n%s", code, stderr.String())
	}
	if want := `"clientIdentities":["` + admitterIdentity + `"]`; !strings.Contains(stderr.String(), want) {
		t.Errorf("log does not contain %s:\n%s", want, stderr.String())
	}
}

// TestRunCountsTLSGivenInCode serves on every interface with TLS given to
// Main as an option rather than by flags: that is not plaintext, so Main
// serves it.
func TestRunCountsTLSGivenInCode(t *testing.T) {
	server := issue(t, newCA(t, "CA"), t.TempDir())
	ctx, cancel := context.WithCancel(t.Context())
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, "provider", []string{"--addr", "0.0.0.0:0"}, &stderr, Info{Name: "main.checks.example.com"}, EvaluateFunc(readyFunc),
			WithTLS(server.serverFiles(false, 0)))
	}()
	addr, err := net.ResolveTCPAddr("tcp", loggedAddr(t, &stderr, "addr"))
	if err != nil {
		t.Fatal(err)
	}
	if err := evaluate(t.Context(), dialWith(t, dialAddr(addr), clientCreds(t, server.clientFiles(false)))); err != nil {
		t.Fatalf("Evaluate over TLS: %v\n%s", err, stderr.String())
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit code %d after cancel, want 0; stderr:\n%s", code, stderr.String())
	}
}
