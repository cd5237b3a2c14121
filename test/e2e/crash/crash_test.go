package crash

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/pkg/crashpoint"
	"github.com/sluice-dev/sluice/test/harness"
)

// serviceOf is the service that passes a crash point ("admitter/evict").
func serviceOf(t *testing.T, point string) *harness.Service {
	t.Helper()
	switch name, _, _ := strings.Cut(point, "/"); name {
	case "admitter":
		return sluice.Admitter
	case "grouper":
		return sluice.Grouper
	}
	t.Fatalf("crash point %q names no service the suite runs", point)
	return nil
}

// ensureRunning starts svc again, unarmed, if a failed case left it dead
// or armed, so that the next case starts from a healthy system.
func ensureRunning(t *testing.T, svc *harness.Service, armed bool) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if exited, _ := svc.Exited(); !exited && !armed {
		return
	}
	_ = svc.Kill()
	if err := svc.Start(); err != nil {
		t.Errorf("restarting %s after the case: %v", svc.Name, err)
		return
	}
	if err := svc.WaitReady(ctx); err != nil {
		t.Errorf("restarting %s after the case: %v", svc.Name, err)
	}
}

// crash is a crash point armed in a restarted service.
type crash struct {
	point string
	svc   *harness.Service
	hit   bool
}

// arm restarts the service that passes point with the point armed: the
// process kills itself the first time it gets there. flags are added to
// that run alone. However the case ends, the service runs unarmed, with
// its usual flags, afterwards.
func arm(ctx context.Context, t *testing.T, point string, flags ...string) *crash {
	t.Helper()
	c := &crash{point: point, svc: serviceOf(t, point)}
	t.Cleanup(func() { ensureRunning(t, c.svc, !c.hit) })
	// Killed rather than stopped: nothing of the case is in flight yet,
	// and a graceful stop of the admitter waits for its streams (seconds
	// a case need not spend).
	if err := c.svc.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := c.svc.StartOnce(harness.Once{Env: []string{crashpoint.EnvVar + "=" + point}, Args: flags}); err != nil {
		t.Fatal(err)
	}
	// A point passed while the service starts up kills it before it is
	// ready; waitHit tells that apart from any other early exit.
	if err := c.svc.WaitReady(ctx); err != nil {
		if exited, _ := c.svc.Exited(); !exited {
			t.Fatal(err)
		}
	}
	return c
}

// waitHit waits until the service died at the armed point, then starts it
// again, unarmed, and waits until it is ready.
func (c *crash) waitHit(ctx context.Context, t *testing.T) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, waitLimit)
	defer cancel()
	if err := c.svc.WaitExited(wctx); err != nil {
		t.Fatalf("crash point %s was never reached: %v", c.point, err)
	}
	// Death by SIGKILL with the point's last words, not some other exit:
	// the point was really passed.
	if sig, ok := c.svc.ExitSignal(); !ok || sig != syscall.SIGKILL {
		_, err := c.svc.Exited()
		t.Fatalf("%s exited (%v), want death by SIGKILL at %s; log ends with:\n%s", c.svc.Name, err, c.point, c.svc.Tail(40))
	}
	if line := "crashpoint " + c.point + ": killing the process"; !strings.Contains(lastRun(c.svc), line) {
		t.Fatalf("%s died by SIGKILL but its log lacks %q:\n%s", c.svc.Name, line, c.svc.Tail(40))
	}
	c.hit = true
	if err := c.svc.Start(); err != nil {
		t.Fatal(err)
	}
	if err := c.svc.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
}

// lastRun is the end of svc's log from its latest start on, so that an
// earlier crash at the same point cannot stand in for this one.
func lastRun(svc *harness.Service) string {
	tail := svc.Tail(1000)
	if i := strings.LastIndex(tail, "\n=== "); i >= 0 {
		return tail[i:]
	}
	return tail
}
