// Command sluice-check-conformance runs the sluice.checks.v1 conformance
// kit against a running provider and prints one line per case as it
// ends:
//
//	sluice-check-conformance --target 127.0.0.1:9091 \
//	    --check-name pool --parameters '{"nodeLabels": {"pool": "a100"}}' \
//	    --fixtures fixtures.json --keepalive-soak 100s
//
// --fixtures names a JSON file of requests and the answers they must get
// (the format is documented on conformance.Fixture); --keepalive-soak
// holds an idle connection open that long through sluice's keepalive
// pings. The kit dials plaintext unless --ca-file names the CA that signs
// the provider's certificate (TLS); --cert-file and --key-file add a
// client certificate (mutual TLS) and --server-name the name the
// provider's certificate must hold when it is not --target's host.
// --trigger-change-command names a command that makes a provider which
// advertises CAPABILITY_WATCH_CHANGES change an answer, for
// WatchChanges/PushedKeys.
//
// A case whose rule came with a later contract revision than the provider
// declares (GetProviderInfoResponse.contract_revision) is reported as WARN
// when the provider breaks it, with the revision that would enforce it,
// and does not fail the run; the summary then counts the warnings too. It
// exits 0 when no case failed (warnings or not), 1 when one did and 2 on
// bad flags or a bad fixtures or TLS file.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluice-dev/sluice/pkg/mtls"
	"github.com/sluice-dev/sluice/services/checks/conformance"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// errUsage is parseFlags' error when the flag package has already said
// what is wrong.
var errUsage = errors.New("usage")

// flags are the command's flags, parsed.
type flags struct {
	target     string
	opts       conformance.Options
	params     string
	fixtures   string
	tls        *mtls.Files // nil: plaintext
	serverName string
	trigger    string
}

func parseFlags(args []string, stderr io.Writer) (*flags, error) {
	f := &flags{}
	fs := flag.NewFlagSet("sluice-check-conformance", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.target, "target", "", "gRPC target of the provider, such as 127.0.0.1:9091 or dns:///checks.example:9091 (required)")
	fs.StringVar(&f.opts.CheckName, "check-name", conformance.DefaultCheckName, "check_name sent with every call")
	fs.StringVar(&f.params, "parameters", "", "parameters sent with every call, as a JSON object (the AdmissionCheck's spec.parameters)")
	fs.DurationVar(&f.opts.Timeout, "timeout", conformance.DefaultTimeout, "deadline of each call; also how long a fixture's PENDING answer is asked again")
	fs.DurationVar(&f.opts.ReadyTimeout, "ready-timeout", conformance.DefaultReadyTimeout, "how long Probe may answer ready=false")
	fs.StringVar(&f.fixtures, "fixtures", "", "JSON file of requests and the answers they must get, one case each")
	fs.DurationVar(&f.opts.KeepaliveSoak, "keepalive-soak", 0, "hold an idle connection open this long through sluice's 30s pings, such as 100s (0: skip)")
	f.tls = mtls.BindClientFlags(fs, "", "the provider")
	fs.StringVar(&f.trigger, "trigger-change-command", "", "command that makes the provider change its answer for the evaluation key given as its last argument, for WatchChanges/PushedKeys; split on spaces, run without a shell (default: skip that case)")
	fs.StringVar(&f.serverName, "server-name", "", "name the provider's certificate must hold, when it is not --target's host (the AdmissionCheck's spec.tls.serverName; needs --ca-file)")
	if err := fs.Parse(args); err != nil {
		return nil, errUsage
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q: every input is a flag", fs.Args())
	}
	if f.target == "" {
		return nil, errors.New("--target is required: the provider's gRPC address, such as 127.0.0.1:9091")
	}
	if f.opts.KeepaliveSoak < 0 {
		return nil, fmt.Errorf("--keepalive-soak must not be negative, got %s", f.opts.KeepaliveSoak)
	}
	if err := f.checkTLS(); err != nil {
		return nil, err
	}
	if f.trigger != "" {
		trigger, err := commandTrigger(f.trigger)
		if err != nil {
			return nil, err
		}
		f.opts.TriggerChange = trigger
	}
	if f.params != "" {
		s := &structpb.Struct{}
		if err := protojson.Unmarshal([]byte(f.params), s); err != nil {
			return nil, fmt.Errorf("--parameters must be a JSON object: %w", err)
		}
		f.opts.Parameters = s
	}
	if f.fixtures != "" {
		fixtures, err := conformance.LoadFixtures(f.fixtures)
		if err != nil {
			return nil, fmt.Errorf("--fixtures: %w", err)
		}
		f.opts.Fixtures = fixtures
	}
	return f, nil
}

// checkTLS checks the TLS flags: any of them dials TLS, which needs
// --ca-file and files that load.
func (f *flags) checkTLS() error {
	if !f.tls.Enabled() && f.serverName == "" {
		f.tls = nil
		return nil
	}
	return f.tls.ValidateClient()
}

// commandTrigger runs command, split on spaces, with the evaluation key
// as its last argument; it fails with the command's output when the
// command fails.
func commandTrigger(command string) (func(ctx context.Context, evaluationKey string) error, error) {
	fields := strings.Fields(command)
	if len(fields) == 0 {
		return nil, errors.New("--trigger-change-command names no command")
	}
	path, err := exec.LookPath(fields[0])
	if err != nil {
		return nil, fmt.Errorf("--trigger-change-command: %w", err)
	}
	return func(ctx context.Context, evaluationKey string) error {
		cmd := exec.CommandContext(ctx, path, slices.Concat(fields[1:], []string{evaluationKey})...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s %s: %w; output: %q", command, evaluationKey, err, strings.TrimSpace(string(out)))
		}
		return nil
	}, nil
}

// transport says how the kit dials, for its first line.
func (f *flags) transport() string {
	switch {
	case f.tls == nil:
		return ""
	case f.tls.CertFile != "":
		return " (mutual TLS)"
	default:
		return " (TLS)"
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f, err := parseFlags(args, stderr)
	if err != nil {
		if !errors.Is(err, errUsage) {
			fmt.Fprintln(stderr, err)
		}
		return 2
	}
	if f.tls != nil {
		creds, err := f.tls.TLSClientCredentials(f.serverName)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 2
		}
		defer creds.Close()
		f.opts.Credentials = creds
	}
	conn, err := conformance.DialCredentials(f.target, f.opts.Credentials)
	if err != nil {
		fmt.Fprintf(stderr, "--target: %v\n", err)
		return 2
	}
	defer conn.Close()

	fmt.Fprintf(stdout, "sluice.checks.v1 conformance: %s%s\n", f.target, f.transport())
	var passed, failed, skipped, warned int
	for r := range conformance.Results(ctx, conn, f.opts) {
		switch r.Outcome {
		case conformance.Passed:
			passed++
			fmt.Fprintf(stdout, "PASS  %s (%s)\n", r.Name, r.Elapsed.Round(time.Millisecond))
		case conformance.Skipped:
			skipped++
			fmt.Fprintf(stdout, "SKIP  %s: %s\n", r.Name, r.Detail)
		case conformance.Warned:
			warned++
			fmt.Fprintf(stdout, "WARN  %s (%s)\n      %s\n", r.Name, r.Elapsed.Round(time.Millisecond), r.Detail)
		default:
			failed++
			fmt.Fprintf(stdout, "FAIL  %s (%s)\n      %s\n", r.Name, r.Elapsed.Round(time.Millisecond), r.Detail)
		}
	}
	// The summary keeps its first form when nothing warned, for scripts
	// that read it.
	summary := fmt.Sprintf("%d passed, %d failed, %d skipped", passed, failed, skipped)
	if warned > 0 {
		summary += fmt.Sprintf(", %d warned", warned)
	}
	fmt.Fprintln(stdout, summary)
	if failed > 0 {
		return 1
	}
	return 0
}
