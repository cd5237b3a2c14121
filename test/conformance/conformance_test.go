// Package conformance runs the sluice.checks.v1 conformance kit, as the
// sluice-check-conformance command a vendor runs, against every provider
// the project ships: the built-in checks service (nodepool, and the
// budget check, whose --trigger-change-command cuts the budget so that
// WatchChanges/PushedKeys runs: budget_test.go), the JavaScript example
// (examples/checks-js) and the Go example (examples/go-provider). Each
// provider runs as its own process on a free loopback port and is called
// over real gRPC; a provider passes when the command exits 0 and reports
// no failed case, the cases for the capabilities it advertises passed
// (not skipped), its idle connection lived through sluice's keepalive
// pings (--keepalive-soak) and, for the JavaScript provider, every
// fixture of examples/checks-js/fixtures.json passed. It then has to exit
// cleanly on SIGTERM. The kit runs against all providers at once, so the
// soak costs its length once. The checks service serves mutual TLS, with
// certificates of a devca CA written to a temporary directory, and the kit
// dials it with the admitter's client certificate (--ca-file, --cert-file,
// --key-file, --server-name), as sluice does for an AdmissionCheck with
// spec.tls: its identity is the only one the checks service serves (the
// default --admitter-identity, which this test leaves as it is, so that
// the default is what passes). The example providers serve plaintext, on
// loopback.
//
// The binaries come from $SLUICE_SERVICES_BIN (`make e2e` sets it to bin/)
// or are built into a temporary directory. The JavaScript provider needs
// node and its npm packages: run hack/npm-install.sh (`make examples-deps`).
package conformance

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/internal/devca"
	"github.com/sluice-dev/sluice/pkg/mtls"
	"github.com/sluice-dev/sluice/test/harness"
	"github.com/sluice-dev/sluice/test/testenv"
)

const (
	// readyWait bounds how long a provider may take to answer Probe with
	// ready=true after it starts (a cold node start on a busy machine is
	// slow).
	readyWait = 90 * time.Second
	// kitWait bounds one run of the conformance command.
	kitWait = 5 * time.Minute
	// stopWait is how long a provider may take to exit after SIGTERM.
	stopWait = 20 * time.Second
	// soak is how long the kit holds an idle connection open through
	// sluice's pings (every 30s): a server with grpc-go's default policy
	// closes it at the third.
	soak = "100s"
)

// binDir holds the service binaries and the conformance command: from
// $SLUICE_SERVICES_BIN, or built by TestMain.
var binDir string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	binDir = os.Getenv("SLUICE_SERVICES_BIN")
	if binDir == "" {
		dir, err := os.MkdirTemp("", "sluice-conformance-bin-")
		if err != nil {
			fmt.Fprintf(os.Stderr, "conformance: temporary bin dir: %v\n", err)
			return 1
		}
		defer os.RemoveAll(dir)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		for _, pkg := range []string{"./services/checks", "./services/checks/conformance/cmd/sluice-check-conformance"} {
			if _, err := harness.BuildBinary(ctx, dir, pkg); err != nil {
				fmt.Fprintf(os.Stderr, "conformance: %v\n", err)
				return 1
			}
		}
		binDir = dir
	}
	return m.Run()
}

// provider says how to start one shipped provider and what to give the
// conformance kit for it.
type provider struct {
	name string
	// start returns the command that serves the provider on addr.
	start func(t *testing.T, root, addr string) *exec.Cmd
	// kitArgs are the conformance command's flags besides --target and
	// --keepalive-soak.
	kitArgs []string
	// mustPass are cases that must pass, not merely not fail: the ones
	// the kit skips for providers without a capability this one has, and
	// the provider's fixtures. Keepalive/Soak is added for every provider.
	mustPass []string
	// creds dial the provider when it serves TLS (nil: plaintext), as
	// kitArgs tell the kit to; transport is how the kit's first line then
	// names it, such as " (mutual TLS)".
	creds     credentials.TransportCredentials
	transport string
}

func TestShippedProvidersPassConformance(t *testing.T) {
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	jsFixtures := filepath.Join(root, "examples", "checks-js", "fixtures.json")
	certs := issueCertificates(t)
	checksTLS, admitterTLS := certs.files("checks"), certs.files("admitter")
	providers := []provider{
		{
			name: "checks",
			start: func(t *testing.T, _ string, addr string) *exec.Cmd {
				httpAddr, err := harness.FreeAddr()
				if err != nil {
					t.Fatal(err)
				}
				return exec.Command(filepath.Join(binDir, "checks"), "--grpc-addr", addr, "--http-addr", httpAddr, "--log-format", "text",
					"--tls-cert-file", checksTLS.CertFile, "--tls-key-file", checksTLS.KeyFile, "--tls-ca-file", checksTLS.CAFile)
			},
			kitArgs: []string{"--check-name", "pool", "--parameters", `{"nodeLabels": {"pool": "a100"}}`,
				"--ca-file", admitterTLS.CAFile, "--cert-file", admitterTLS.CertFile, "--key-file", admitterTLS.KeyFile,
				"--server-name", checksServerName},
			mustPass:  []string{"Evaluate/PodSetUpdates"},
			creds:     clientCredentials(t, admitterTLS, checksServerName),
			transport: " (mutual TLS)",
		},
		{
			name: "checks-js",
			start: func(t *testing.T, root, addr string) *exec.Cmd {
				node := nodeBinary(t, root)
				return exec.Command(node, filepath.Join(root, "examples", "checks-js", "provider.js"), "--addr", addr)
			},
			kitArgs:  []string{"--check-name", "pool", "--parameters", `{"nodeLabels": {"pool": "a100"}}`, "--fixtures", jsFixtures},
			mustPass: slices.Concat([]string{"Evaluate/PodSetUpdates", "Release/ThenNewReservation"}, fixtureCases(t, jsFixtures)),
		},
		{
			name: "go-provider",
			start: func(t *testing.T, root, addr string) *exec.Cmd {
				dir := filepath.Join(root, "examples", "go-provider")
				if st, err := os.Stat(dir); err != nil || !st.IsDir() {
					t.Fatalf("examples/go-provider is missing (%v): the project ships it, so its conformance is tested here", err)
				}
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
				defer cancel()
				bin, err := harness.BuildBinary(ctx, t.TempDir(), "./examples/go-provider")
				if err != nil {
					t.Fatal(err)
				}
				return exec.Command(bin, "--addr", addr)
			},
			kitArgs:  []string{"--check-name", "pool", "--parameters", `{"pool": "a100"}`},
			mustPass: []string{"Evaluate/PodSetUpdates"},
		},
		budgetProvider(t),
	}
	for _, p := range providers {
		t.Run(p.name, func(t *testing.T) {
			addr, err := harness.FreeAddr()
			if err != nil {
				t.Fatal(err)
			}
			proc := startProvider(t, p.name, p.start(t, root, addr))
			proc.waitReady(t, addr, p.creds)

			args := slices.Concat([]string{"--target", addr, "--keepalive-soak", soak}, p.kitArgs)
			results := make(chan kitResult, 1)
			go func() { results <- runKit(t.Context(), args) }()
			// The kit runs for the soak's length: pause here, so that the
			// next providers start theirs meanwhile, whatever -parallel is.
			t.Parallel()
			r := <-results
			if r.stderr != "" {
				t.Logf("sluice-check-conformance stderr:\n%s", r.stderr)
			}
			if r.err != nil {
				t.Fatalf("%v\n%s", r.err, r.stdout)
			}
			if want := "sluice.checks.v1 conformance: " + addr + p.transport + "\n"; !strings.HasPrefix(r.stdout, want) {
				t.Errorf("the kit's first line is not %q:\n%s", want, r.stdout)
			}
			passed := checkKitOutput(t, r.stdout, r.code, slices.Concat(p.mustPass, []string{"Keepalive/Soak"}))
			t.Logf("%s: %d cases passed", p.name, passed)

			proc.stop(t)
		})
	}
}

// checksServerName is the name the checks service's certificate holds
// in a cluster, which the kit expects instead of the loopback address it
// dials (an AdmissionCheck's spec.tls.serverName).
const checksServerName = "sluice-checks.sluice-system.svc"

// certificates is a directory of identities devca issued to sluice's
// services, as hack/sluice-certs and cert-manager write them.
type certificates string

// issueCertificates issues each sluice service a certificate of a new CA,
// for the test's length.
func issueCertificates(t *testing.T) certificates {
	t.Helper()
	ca, err := devca.New("conformance CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := ca.IssueServices(dir, mtls.DefaultTrustDomain, "sluice-system", time.Hour); err != nil {
		t.Fatal(err)
	}
	return certificates(dir)
}

// files names a service's certificate, key and CA bundle.
func (c certificates) files(service string) mtls.Files {
	dir := filepath.Join(string(c), service)
	return mtls.Files{
		CertFile: filepath.Join(dir, devca.CertFile),
		KeyFile:  filepath.Join(dir, devca.KeyFile),
		CAFile:   filepath.Join(dir, devca.CAFile),
	}
}

// clientCredentials dial with f's certificate, expecting serverName.
func clientCredentials(t *testing.T, f mtls.Files, serverName string) credentials.TransportCredentials {
	t.Helper()
	creds, err := f.TLSClientCredentials(serverName)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(creds.Close)
	return creds
}

// fixtureCases returns the kit's case names for the fixtures in a
// fixtures file: "Fixture/<name>".
func fixtureCases(t *testing.T, path string) []string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading fixtures: %v", err)
	}
	var file struct {
		Fixtures []struct {
			Name string `json:"name"`
		} `json:"fixtures"`
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(file.Fixtures) == 0 {
		t.Fatalf("%s has no fixtures", path)
	}
	var names []string
	for _, f := range file.Fixtures {
		names = append(names, "Fixture/"+f.Name)
	}
	return names
}

// nodeBinary returns the path of node, failing the test with how to
// install it (and the example's packages) when they are missing.
func nodeBinary(t *testing.T, root string) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node not found (%v): the JavaScript provider needs Node.js 18 or later; on Debian: apt-get install nodejs npm", err)
	}
	pkg := filepath.Join(root, "examples", "checks-js", "node_modules", "@grpc", "grpc-js", "package.json")
	if _, err := os.Stat(pkg); err != nil {
		t.Fatalf("examples/checks-js has no npm packages (%v): run hack/npm-install.sh (make examples-deps)", err)
	}
	return node
}

// summaryRE is the kit's last line.
var summaryRE = regexp.MustCompile(`^(\d+) passed, (\d+) failed, (\d+) skipped$`)

// checkKitOutput checks that the kit exited 0, that its last line reports
// passed cases and none failed, and that every case in mustPass passed.
// It returns how many cases passed.
func checkKitOutput(t *testing.T, out string, code int, mustPass []string) int {
	t.Helper()
	var problems []string
	if code != 0 {
		problems = append(problems, fmt.Sprintf("sluice-check-conformance exited %d, want 0", code))
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	last := lines[len(lines)-1]
	passed := 0
	if m := summaryRE.FindStringSubmatch(last); m == nil {
		problems = append(problems, fmt.Sprintf("last line %q is not \"N passed, 0 failed, M skipped\"", last))
	} else {
		passed, _ = strconv.Atoi(m[1])
		if passed == 0 || m[2] != "0" {
			problems = append(problems, fmt.Sprintf("summary %q, want some passed and 0 failed", last))
		}
	}
	for _, name := range mustPass {
		if !slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, "PASS  "+name+" ") }) {
			problems = append(problems, fmt.Sprintf("case %s did not pass", name))
		}
	}
	if len(problems) > 0 {
		t.Errorf("%s; the kit printed:\n%s", strings.Join(problems, "; "), out)
	}
	return passed
}

// kitResult is one run of the conformance command.
type kitResult struct {
	stdout, stderr string
	code           int   // exit code
	err            error // set when the command could not run or was killed
}

// runKit runs the conformance command with args until it exits or ctx
// ends.
func runKit(ctx context.Context, args []string) kitResult {
	ctx, cancel := context.WithTimeout(ctx, kitWait)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "sluice-check-conformance"), args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := kitResult{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit) && exit.Exited():
		r.code = exit.ExitCode()
	default:
		r.err = fmt.Errorf("running sluice-check-conformance %v: %w", args, err)
	}
	return r
}

// process is a provider running as a child process, its output in a log
// file.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed once the process has exited
	err     error         // how it exited, valid once done is closed
	spawner *testenv.Spawner
}

// startProvider starts cmd with its output in a log file, and makes sure
// it is gone when the test ends.
func startProvider(t *testing.T, name string, cmd *exec.Cmd) *process {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatalf("creating the %s log: %v", name, err)
	}
	defer log.Close() // the child has its own copy
	cmd.Stdout, cmd.Stderr = log, log
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{}), spawner: testenv.NewSpawner(false)}
	if err := p.spawner.Start(cmd); err != nil {
		p.spawner.Close()
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		if !p.exited() {
			_ = cmd.Process.Kill()
			<-p.done
		}
		p.spawner.Close()
	})
	return p
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// logTail returns the end of the provider's log, for failure messages.
func (p *process) logTail() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return err.Error()
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return strings.Join(lines, "\n")
}

// waitReady calls IdentityService.Probe on addr, over creds (nil:
// plaintext), until it answers ready=true, failing at once if the process
// exits.
func (p *process) waitReady(t *testing.T, addr string, creds credentials.TransportCredentials) {
	t.Helper()
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatalf("dialling %s at %s: %v", p.name, addr, err)
	}
	defer conn.Close()
	identity := checksv1.NewIdentityServiceClient(conn)
	ctx, cancel := context.WithTimeout(t.Context(), readyWait)
	defer cancel()
	var last error
	for {
		if p.exited() {
			t.Fatalf("%s exited before it was ready (%v); its log ends with:\n%s", p.name, p.err, p.logTail())
		}
		callCtx, callCancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := identity.Probe(callCtx, &checksv1.ProbeRequest{})
		callCancel()
		switch {
		case err != nil:
			last = err
		case !resp.GetReady():
			last = fmt.Errorf("Probe answered ready=false: %q", resp.GetMessage())
		default:
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s not ready on %s within %s: %v; its log ends with:\n%s", p.name, addr, readyWait, last, p.logTail())
		case <-p.done:
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stop sends SIGTERM and checks that the provider exits cleanly in time.
func (p *process) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("signalling %s: %v", p.name, err)
	}
	select {
	case <-p.done:
		if p.err != nil {
			t.Errorf("%s exited after SIGTERM with %v, want status 0; its log ends with:\n%s", p.name, p.err, p.logTail())
		}
	case <-time.After(stopWait):
		t.Errorf("%s still running %s after SIGTERM; its log ends with:\n%s", p.name, stopWait, p.logTail())
	}
}
