package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/services/checks/sdk"
	"github.com/sluice-dev/sluice/services/checks/sdk/sdktest"
)

// fileTriggered is a provider whose answers change when a line naming
// the key appears in a file, as a vendor's admin tool would change them.
type fileTriggered struct {
	notifier sdk.Notifier
}

func (*fileTriggered) Evaluate(context.Context, *checksv1.EvaluateRequest) (*checksv1.EvaluateResponse, error) {
	return sdk.Ready(), nil
}

func (*fileTriggered) Release(context.Context, *checksv1.ReleaseRequest) error { return nil }

func (f *fileTriggered) SetNotifier(n sdk.Notifier) { f.notifier = n }

// pushLines pushes every line written to path until ctx ends.
func (f *fileTriggered) pushLines(ctx context.Context, path string) {
	pushed := 0
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			continue // not written yet
		}
		// Whole lines only: the script may be writing. Keys hold no spaces.
		whole := string(raw[:bytes.LastIndexByte(raw, '\n')+1])
		for keys := strings.Fields(whole); pushed < len(keys); pushed++ {
			_ = f.notifier.Changed(keys[pushed])
		}
	}
}

func TestTriggerChangeCommand(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the trigger is a shell script")
	}
	dir := t.TempDir()
	changed := filepath.Join(dir, "changed")
	script := filepath.Join(dir, "cut-budget")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nprintf '%s\\n' \"$2\" >> \""+changed+"\"\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	provider := &fileTriggered{}
	info := sdk.Info{Name: "budget.checks.example.com", Capabilities: []checksv1.Capability{checksv1.Capability_CAPABILITY_WATCH_CHANGES}}
	target := sdktest.Start(t, info, provider)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); provider.pushLines(ctx, changed) }()
	t.Cleanup(func() { cancel(); <-done })

	var stdout, stderr bytes.Buffer
	// The script reads the key from $2: the command's own arguments come
	// first.
	code := run(t.Context(), []string{"--target", target, "--timeout", "5s", "--trigger-change-command", script + " --team"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit code %d, want 0\nstdout:\n%s\nstderr:\n%s", code, &stdout, &stderr)
	}
	for _, w := range []string{"PASS  WatchChanges/Open", "PASS  WatchChanges/PushedKeys"} {
		if !strings.Contains(stdout.String(), w) {
			t.Errorf("stdout does not contain %q:\n%s", w, &stdout)
		}
	}
}
