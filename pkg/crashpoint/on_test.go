//go:build sluice_crashpoints

package crashpoint

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// helperEnv makes the test binary act as a process that passes the crash
// point named in it and then exits 0.
const helperEnv = "SLUICE_CRASHPOINT_TEST_HELPER"

// survivedLine is what the helper prints once past the point.
const survivedLine = "passed the point"

func TestMain(m *testing.M) {
	if point := os.Getenv(helperEnv); point != "" {
		Hit(point)
		os.Stdout.WriteString(survivedLine + "\n")
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runHelper runs the helper passing point with SLUICE_CRASHPOINT=armed.
func runHelper(t *testing.T, point, armed string) (stdout, stderr string, err error) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), helperEnv+"="+point, EnvVar+"="+armed)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

func TestHitKillsAtTheArmedPoint(t *testing.T) {
	stdout, stderr, err := runHelper(t, "test/point", "test/point")
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("helper exited with %v, want death by SIGKILL; stderr:\n%s", err, stderr)
	}
	ws, ok := exit.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("helper ended with %v, want death by SIGKILL", exit)
	}
	if want := "crashpoint test/point: killing the process\n"; stderr != want {
		t.Errorf("stderr = %q, want %q", stderr, want)
	}
	if strings.Contains(stdout, survivedLine) {
		t.Error("helper ran on past the armed point")
	}
}

func TestHitIgnoresOtherPoints(t *testing.T) {
	for _, armed := range []string{"", "other/point", "test/point/longer"} {
		stdout, stderr, err := runHelper(t, "test/point", armed)
		if err != nil {
			t.Errorf("SLUICE_CRASHPOINT=%q: helper ended with %v, want a clean exit; stderr:\n%s", armed, err, stderr)
		}
		if !strings.Contains(stdout, survivedLine) {
			t.Errorf("SLUICE_CRASHPOINT=%q: helper never passed the point; stdout %q", armed, stdout)
		}
		if strings.Contains(stderr, "crashpoint") {
			t.Errorf("SLUICE_CRASHPOINT=%q: stderr %q mentions a crash point", armed, stderr)
		}
	}
}
