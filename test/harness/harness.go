// Package harness runs sluice's services as separate processes against a
// test control plane, the way an operator runs them: real binaries, real
// gRPC over loopback, real HTTPS for the webhook. Start runs all four;
// integration tests build one binary with BuildBinary and run it as a
// Service. Tests use it to start, probe, kill and restart services.
package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/test/testenv"
)

// pollInterval is how often Poll retries.
const pollInterval = 50 * time.Millisecond

// Services names the four services, in the order they are started.
var Services = []string{"admitter", "checks", "grouper", "webhook"}

// Build compiles the four service binaries into dir (go build's cache keeps
// this quick after the first time), with the given build tags if any.
func Build(ctx context.Context, dir string, tags ...string) error {
	pkgs := make([]string, len(Services))
	for i, s := range Services {
		pkgs[i] = "./services/" + s
	}
	return goBuild(ctx, dir+string(os.PathSeparator), tags, pkgs...)
}

// BuildBinary compiles one command of the sluice module, named by its
// package path relative to the module root (e.g. "./services/grouper"),
// with the given build tags if any, into dir and returns the binary's path.
func BuildBinary(ctx context.Context, dir, pkg string, tags ...string) (string, error) {
	bin := filepath.Join(dir, path.Base(pkg))
	if err := goBuild(ctx, bin, tags, pkg); err != nil {
		return "", err
	}
	return bin, nil
}

// goBuild runs go build [-tags tags] -o out pkgs... in the module root.
func goBuild(ctx context.Context, out string, tags []string, pkgs ...string) error {
	root, err := testenv.ModuleRoot()
	if err != nil {
		return err
	}
	args := []string{"build"}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	args = append(args, "-o", out)
	cmd := exec.CommandContext(ctx, "go", append(args, pkgs...)...)
	cmd.Dir = root
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building %v (tags %v): %w\n%s", pkgs, tags, err, msg)
	}
	return nil
}

// FreeAddr returns a loopback host:port that nothing listens on right
// now, out of the range outbound connections take theirs from (see
// testenv.FreePort).
func FreeAddr() (string, error) { return testenv.FreeAddr() }

// Poll calls f until it returns nil or ctx ends; the error then carries
// f's last complaint.
func Poll(ctx context.Context, f func() error) error {
	tick := time.NewTicker(pollInterval)
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

func logDir(env *testenv.Env) string { return filepath.Join(env.Dir, "logs") }
