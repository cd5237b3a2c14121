// Package mtls tests the admitter's transport security against a real API
// server: the admitter runs in-process with mutual TLS from files, and
// clients dial it over real sockets with certificates issued by a CA of
// the test (internal/devca): none, another CA's, another identity's from
// the same CA, the grouper's. It also rotates the admitter's files to a new
// CA and sees the running server take them.
package mtls

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	"github.com/sluice-dev/sluice/internal/devca"
	"github.com/sluice-dev/sluice/pkg/mtls"
	"github.com/sluice-dev/sluice/pkg/telemetry"
	"github.com/sluice-dev/sluice/services/admitter/app"
	"github.com/sluice-dev/sluice/test/harness"
	"github.com/sluice-dev/sluice/test/testenv"
)

const (
	namespace = harness.SystemNamespace
	// refresh is how often the admitter reads its files again here, so the
	// reload test need not wait a minute.
	refresh = 200 * time.Millisecond
)

var (
	grouperID = mtls.ServiceIdentity(mtls.DefaultTrustDomain, namespace, "sluice-grouper")
	checksID  = mtls.ServiceIdentity(mtls.DefaultTrustDomain, namespace, "sluice-checks")
)

// suite is one admitter serving mutual TLS from files in dir, under ca.
type suite struct {
	env  *testenv.Env
	dir  string
	ca   *devca.CA
	addr string
}

var s suite

func TestMain(m *testing.M) {
	var stop context.CancelFunc
	var done chan error
	code := testenv.RunMain(m, testenv.Options{}, func(env *testenv.Env) error {
		var err error
		stop, done, err = setUp(env)
		return err
	})
	if stop != nil {
		stop()
		if err := <-done; err != nil {
			fmt.Fprintf(os.Stderr, "admitter: %v\n", err)
		}
	}
	os.Exit(code)
}

func setUp(env *testenv.Env) (context.CancelFunc, chan error, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s.env = env
	s.dir = filepath.Join(env.Dir, "certs")
	if err := harness.InstallCRDs(ctx, env.Config); err != nil {
		return nil, nil, err
	}
	var err error
	if s.ca, err = devca.New("test CA", time.Hour); err != nil {
		return nil, nil, err
	}
	if err := s.ca.IssueServices(s.dir, mtls.DefaultTrustDomain, namespace, time.Hour); err != nil {
		return nil, nil, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	s.addr = lis.Addr().String()
	log, err := telemetry.NewLogger(os.Stderr, "error", "text")
	if err != nil {
		return nil, nil, err
	}
	runCtx, stop := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- app.Run(runCtx, log, app.Config{
			REST:         env.Config,
			GRPCListener: lis,
			TLS:          identityFiles("admitter", refresh),
			Groupers:     []string{grouperID},
			Registry:     prometheus.NewRegistry(),
			Gatherer:     prometheus.NewRegistry(),
			Ready:        func() { close(ready) },
		})
	}()
	select {
	case <-ready:
		return stop, done, nil
	case err := <-done:
		stop()
		return nil, nil, fmt.Errorf("admitter exited before it was ready: %v", err)
	case <-ctx.Done():
		stop()
		return nil, nil, fmt.Errorf("admitter not ready: %w", ctx.Err())
	}
}

// identityFiles are the files devca wrote for service.
func identityFiles(service string, refresh time.Duration) *mtls.Files {
	dir := filepath.Join(s.dir, service)
	return &mtls.Files{
		CertFile: filepath.Join(dir, devca.CertFile), KeyFile: filepath.Join(dir, devca.KeyFile),
		CAFile: filepath.Join(dir, devca.CAFile), Refresh: refresh,
	}
}

// dial connects to the admitter with creds; it fails the test on a bad
// option, not on a refused handshake (that shows on the first call).
func dial(t *testing.T, creds credentials.TransportCredentials) admitterv1.AdmitterServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return admitterv1.NewAdmitterServiceClient(conn)
}

// clientCreds are mutual-TLS credentials of a client that presents leaf
// (none when nil) and trusts caPEM, written to files as a service's are.
func clientCreds(t *testing.T, leaf *devca.Leaf, caPEM []byte) credentials.TransportCredentials {
	t.Helper()
	dir := t.TempDir()
	if leaf == nil {
		pool, err := mtls.CertPool(caPEM)
		if err != nil {
			t.Fatal(err)
		}
		return credentials.NewClientTLSFromCert(pool, "")
	}
	if err := devca.WriteIdentity(dir, *leaf, caPEM); err != nil {
		t.Fatal(err)
	}
	f := &mtls.Files{
		CertFile: filepath.Join(dir, devca.CertFile), KeyFile: filepath.Join(dir, devca.KeyFile),
		CAFile: filepath.Join(dir, devca.CAFile), Refresh: refresh,
	}
	creds, err := f.ClientCredentials()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(creds.Close)
	return creds
}

// issue is a certificate of identity id from ca, for a client.
func issue(t *testing.T, ca *devca.CA, id string) *devca.Leaf {
	t.Helper()
	leaf, err := ca.Issue(devca.Request{CommonName: "test client", URIs: []string{id}, Life: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return &leaf
}

// submit calls SubmitWorkload with an empty request: a caller the
// authorization lets through gets InvalidArgument from the handler, so no
// workload is written whoever calls.
func submit(ctx context.Context, c admitterv1.AdmitterServiceClient) error {
	_, err := c.SubmitWorkload(ctx, &admitterv1.SubmitWorkloadRequest{})
	return err
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestGrouperIsServed: the grouper's certificate gets through to every
// method it calls.
func TestGrouperIsServed(t *testing.T) {
	ctx := ctxFor(t)
	c := dial(t, clientCreds(t, issue(t, s.ca, grouperID), s.ca.CertPEM))
	if err := submit(ctx, c); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("SubmitWorkload as the grouper: %v, want InvalidArgument from the handler", err)
	}
	stream, err := c.WatchAdmissions(ctx, &admitterv1.WatchAdmissionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); status.Code(err) == codes.PermissionDenied || status.Code(err) == codes.Unauthenticated {
		t.Fatalf("WatchAdmissions as the grouper: %v", err)
	}
}

// TestRefusesCallersWithoutAValidCertificate: plaintext, TLS without a
// client certificate, and a certificate from another CA are all refused
// before any method runs.
func TestRefusesCallersWithoutAValidCertificate(t *testing.T) {
	other, err := devca.New("another CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// Under TLS 1.3 a client learns that the server refused its
	// certificate only as a broken connection, so the code is what holds.
	tests := []struct {
		name  string
		creds credentials.TransportCredentials
	}{
		{"plaintext", insecure.NewCredentials()},
		{"no client certificate", clientCreds(t, nil, s.ca.CertPEM)},
		{"certificate from another CA", clientCreds(t, issue(t, other, grouperID), s.ca.CertPEM)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := submit(ctxFor(t), dial(t, tt.creds)); status.Code(err) != codes.Unavailable {
				t.Fatalf("SubmitWorkload: %v, want Unavailable (the connection is refused)", err)
			}
		})
	}
}

// TestRefusesAnotherIdentity: a certificate from the admitter's own CA
// that names another service (the checks service's) is authenticated but
// may call none of the grouper's methods; it may ask the health service.
func TestRefusesAnotherIdentity(t *testing.T) {
	ctx := ctxFor(t)
	creds := clientCreds(t, issue(t, s.ca, checksID), s.ca.CertPEM)
	c := dial(t, creds)
	calls := map[string]func() error{
		"SubmitWorkload": func() error { return submit(ctx, c) },
		"ReportProgress": func() error {
			_, err := c.ReportProgress(ctx, &admitterv1.ReportProgressRequest{})
			return err
		},
		"UpdateWorkload": func() error {
			_, err := c.UpdateWorkload(ctx, &admitterv1.UpdateWorkloadRequest{})
			return err
		},
		"WatchAdmissions": func() error {
			stream, err := c.WatchAdmissions(ctx, &admitterv1.WatchAdmissionsRequest{})
			if err != nil {
				return err
			}
			_, err = stream.Recv()
			return err
		},
	}
	for name, call := range calls {
		err := call()
		if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), checksID) {
			t.Errorf("%s as %s: %v, want PermissionDenied naming the caller", name, checksID, err)
		}
	}

	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("health as %s: %v, want it served to any peer of the CA", checksID, err)
	}
}

// TestReloadsRotatedFiles replaces the admitter's certificate, key and CA
// with ones from a new CA while it runs: it then serves clients of the new
// CA, and refuses the old CA's, without a restart.
func TestReloadsRotatedFiles(t *testing.T) {
	ctx := ctxFor(t)
	oldCA := s.ca
	newCA, err := devca.New("rotated CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	newClient := dialEachTime(clientCreds(t, issue(t, newCA, grouperID), newCA.CertPEM))
	oldClient := dialEachTime(clientCreds(t, issue(t, oldCA, grouperID), oldCA.CertPEM))
	if err := oldClient(ctx); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("before rotation, the old CA's client: %v, want served", err)
	}
	if err := newClient(ctx); status.Code(err) != codes.Unavailable {
		t.Fatalf("before rotation, the new CA's client: %v, want refused", err)
	}

	if err := newCA.IssueServices(s.dir, mtls.DefaultTrustDomain, namespace, time.Hour); err != nil {
		t.Fatal(err)
	}
	s.ca = newCA
	t.Cleanup(func() { // the other tests use the CA of the files
		if err := oldCA.IssueServices(s.dir, mtls.DefaultTrustDomain, namespace, time.Hour); err != nil {
			t.Error(err)
		}
		s.ca = oldCA
		waitFor(t, func() error {
			return expectCode(dialEachTime(clientCreds(t, issue(t, oldCA, grouperID), oldCA.CertPEM))(ctx), codes.InvalidArgument)
		})
	})
	waitFor(t, func() error { return expectCode(newClient(ctx), codes.InvalidArgument) })
	waitFor(t, func() error { return expectCode(oldClient(ctx), codes.Unavailable) })
}

// dialEachTime returns a call on a new connection each time, so that each
// call makes a handshake with the server's current certificates.
func dialEachTime(creds credentials.TransportCredentials) func(context.Context) error {
	return func(ctx context.Context) error {
		conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(creds))
		if err != nil {
			return err
		}
		defer conn.Close()
		return submit(ctx, admitterv1.NewAdmitterServiceClient(conn))
	}
}

func expectCode(err error, want codes.Code) error {
	if status.Code(err) != want {
		return fmt.Errorf("got %v, want %v", err, want)
	}
	return nil
}

// waitFor polls cond until it returns nil, failing after 20s.
func waitFor(t *testing.T, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20s: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // poll interval
	}
}

// TestPlaintextOnlyOnLoopback: without TLS files the admitter refuses to
// serve on an address other machines reach.
func TestPlaintextOnlyOnLoopback(t *testing.T) {
	ctx := ctxFor(t)
	err := app.Run(ctx, logr.Discard(), app.Config{REST: s.env.Config, GRPCAddr: "0.0.0.0:0",
		Registry: prometheus.NewRegistry(), Gatherer: prometheus.NewRegistry()})
	if err == nil || !strings.Contains(err.Error(), "--grpc-addr 0.0.0.0:0 is not a loopback address") {
		t.Fatalf("app.Run on 0.0.0.0 without TLS: %v, want a refusal naming --grpc-addr", err)
	}
}
