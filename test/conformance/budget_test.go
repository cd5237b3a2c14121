package conformance

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/sluice-dev/sluice/test/harness"
)

// budgetProvider is the checks service's budget check (--provider=budget),
// in plaintext. Its budgets file is in a temporary directory, read again
// every 100ms; the kit's --trigger-change-command replaces it with one
// that cuts the kit's namespace to nothing, which revokes every
// evaluation the kit holds, and the kit waits for its key on WatchChanges.
func budgetProvider(t *testing.T) provider {
	t.Helper()
	dir := t.TempDir()
	config, cut, script := filepath.Join(dir, "budgets.yaml"), filepath.Join(dir, "cut.yaml"), filepath.Join(dir, "cut.sh")
	for path, content := range map[string]string{
		// A low soft limit, so that most answers carry the label. A small
		// hard limit, so that Evaluate/AdmittedFirst bites: 5 cpu are ten
		// of the kit's workloads (500m each), fewer than the waiting ones
		// it asks about and more than the later cases hold at once. No
		// window, so that a Release frees its cost at once.
		config: "namespaces:\n  conformance: {hard: {cpu: 5, memory: 100Gi}, soft: {cpu: 1}}\n",
		cut:    "namespaces:\n  conformance: {hard: {cpu: 0}}\n",
		// The kit appends the evaluation key; the cut revokes it with the rest.
		script: "#!/bin/sh\nexec cp " + cut + " " + config + "\n",
	} {
		if err := os.WriteFile(path, []byte(content), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	return provider{
		name: "checks-budget",
		start: func(t *testing.T, _ string, addr string) *exec.Cmd {
			httpAddr, err := harness.FreeAddr()
			if err != nil {
				t.Fatal(err)
			}
			// No restart warm-up: the kit asks about waiting workloads
			// from the start, which would only wait it out.
			return exec.Command(filepath.Join(binDir, "checks"), "--provider", "budget", "--budget-config", config, "--budget-reload-interval", "100ms",
				"--budget-restart-grace", "0", "--grpc-addr", addr, "--http-addr", httpAddr, "--log-format", "text")
		},
		kitArgs:  []string{"--check-name", "budget", "--trigger-change-command", "sh " + script},
		mustPass: []string{"Evaluate/PodSetUpdates", "Release/ThenNewReservation", "WatchChanges/Open", "WatchChanges/PushedKeys"},
	}
}
