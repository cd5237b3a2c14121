package crash

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/test/testenv"
)

// writeCount counts writes of one kind the API server answered: ok with
// a 2xx code, cut with a 5xx. A service killed at a crash point may die
// with a write in flight; the API server then answers a client that is
// gone (504 once the request's context ends), yet the write may already
// be in etcd. So a cut write may or may not have taken effect, and a
// count is right when it is right for some choice of them.
type writeCount struct{ ok, cut int }

// is reports whether want writes took effect: every 2xx and as many of
// the cut ones as needed, none beyond.
func (c writeCount) is(want int) bool { return c.ok <= want && c.ok+c.cut >= want }

// less takes n writes of others (kwok's, counted from the history) away.
func (c writeCount) less(n int) writeCount { return writeCount{ok: c.ok - n, cut: c.cut} }

func (c writeCount) String() string {
	if c.cut == 0 {
		return fmt.Sprint(c.ok)
	}
	return fmt.Sprintf("%d (and %d cut short by the kill)", c.ok, c.cut)
}

// podWrites are the pod writes the API server served between two
// snapshots of apiserver_request_total.
type podWrites struct {
	// patches of pods themselves: only the grouper sends them (ungate,
	// finalizer removal); kwok writes status, the scheduler bindings.
	patches writeCount
	// statusPatches of pods/status, by kwok and by the grouper.
	statusPatches writeCount
	// deletes of pods, by the grouper and by kwok.
	deletes writeCount
}

// requestCounts snapshots the API server's request counters.
func requestCounts(ctx context.Context, t *testing.T) []testenv.RequestCount {
	t.Helper()
	counts, err := env.RequestCounts(ctx)
	if err != nil {
		t.Fatalf("API server request counts: %v", err)
	}
	return counts
}

// podWritesBetween counts the pod writes between two snapshots. 4xx
// answers do not count: a service that retried a write after its restart
// and lost to what the first attempt already did sent a request that
// changed nothing. What must never happen is a second write that took
// effect.
func podWritesBetween(after, before []testenv.RequestCount) podWrites {
	var w podWrites
	for _, rc := range testenv.SubtractCounts(after, before) {
		if rc.Group != "" || rc.Resource != "pods" {
			continue
		}
		var c *writeCount
		isWrite := rc.Verb == "PATCH" || rc.Verb == "PUT" || rc.Verb == "APPLY"
		switch {
		case rc.Subresource == "" && isWrite:
			c = &w.patches
		case rc.Subresource == "status" && isWrite:
			c = &w.statusPatches
		case rc.Subresource == "" && rc.Verb == "DELETE":
			c = &w.deletes
		default:
			continue
		}
		switch {
		case strings.HasPrefix(rc.Code, "2"):
			c.ok += int(rc.Count)
		case strings.HasPrefix(rc.Code, "5"):
			c.cut += int(rc.Count)
		}
	}
	return w
}
