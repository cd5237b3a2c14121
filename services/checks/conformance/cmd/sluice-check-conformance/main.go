// Command sluice-check-conformance runs the sluice.checks.v1 conformance
// kit against a running provider and prints one line per case:
//
//	sluice-check-conformance --target 127.0.0.1:9091 \
//	    --check-name pool --parameters '{"nodeLabels": {"pool": "a100"}}'
//
// It exits 0 when no case failed, 1 when one did and 2 on bad flags.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluice-dev/sluice/services/checks/conformance"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice-check-conformance", flag.ContinueOnError)
	fs.SetOutput(stderr)
	target := fs.String("target", "", "gRPC target of the provider, such as 127.0.0.1:9091 or dns:///checks.example:9091 (required)")
	checkName := fs.String("check-name", conformance.DefaultCheckName, "check_name sent with every call")
	params := fs.String("parameters", "", "parameters sent with every call, as a JSON object (the AdmissionCheck's spec.parameters)")
	timeout := fs.Duration("timeout", conformance.DefaultTimeout, "deadline of each call")
	readyTimeout := fs.Duration("ready-timeout", conformance.DefaultReadyTimeout, "how long Probe may answer ready=false")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *target == "" {
		fmt.Fprintln(stderr, "--target is required: the provider's gRPC address, such as 127.0.0.1:9091")
		return 2
	}
	opts := conformance.Options{CheckName: *checkName, Timeout: *timeout, ReadyTimeout: *readyTimeout}
	if *params != "" {
		s := &structpb.Struct{}
		if err := protojson.Unmarshal([]byte(*params), s); err != nil {
			fmt.Fprintf(stderr, "--parameters must be a JSON object: %v\n", err)
			return 2
		}
		opts.Parameters = s
	}
	conn, err := conformance.Dial(*target)
	if err != nil {
		fmt.Fprintf(stderr, "--target: %v\n", err)
		return 2
	}
	defer conn.Close()

	fmt.Fprintf(stdout, "sluice.checks.v1 conformance: %s\n", *target)
	var passed, failed, skipped int
	for _, r := range conformance.RunAll(ctx, conn, opts) {
		switch r.Outcome {
		case conformance.Passed:
			passed++
			fmt.Fprintf(stdout, "PASS  %s (%s)\n", r.Name, r.Elapsed.Round(time.Millisecond))
		case conformance.Skipped:
			skipped++
			fmt.Fprintf(stdout, "SKIP  %s: %s\n", r.Name, r.Detail)
		default:
			failed++
			fmt.Fprintf(stdout, "FAIL  %s (%s)\n      %s\n", r.Name, r.Elapsed.Round(time.Millisecond), r.Detail)
		}
	}
	fmt.Fprintf(stdout, "%d passed, %d failed, %d skipped\n", passed, failed, skipped)
	if failed > 0 {
		return 1
	}
	return 0
}
