package crash

import (
	"context"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/test/testenv"
)

// podWrites are the successful pod writes the API server served between
// two snapshots of apiserver_request_total.
type podWrites struct {
	// patches of pods themselves: only the grouper sends them (ungate,
	// finalizer removal); kwok writes status, the scheduler bindings.
	patches int
	// statusPatches of pods/status, by kwok and by the grouper.
	statusPatches int
	// deletes of pods, by the grouper and by kwok.
	deletes int
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

// podWritesBetween counts the pod writes between two snapshots. Only 2xx
// answers count (the metric's code label): a service killed mid-request,
// or one that retried a write after its restart and lost to what the
// first attempt already did, sent a request that changed nothing; what
// must never happen is a second write that took effect.
func podWritesBetween(after, before []testenv.RequestCount) podWrites {
	var w podWrites
	for _, rc := range testenv.SubtractCounts(after, before) {
		if rc.Group != "" || rc.Resource != "pods" || !strings.HasPrefix(rc.Code, "2") {
			continue
		}
		n := int(rc.Count)
		switch {
		case rc.Subresource == "" && (rc.Verb == "PATCH" || rc.Verb == "PUT" || rc.Verb == "APPLY"):
			w.patches += n
		case rc.Subresource == "status" && (rc.Verb == "PATCH" || rc.Verb == "PUT" || rc.Verb == "APPLY"):
			w.statusPatches += n
		case rc.Subresource == "" && rc.Verb == "DELETE":
			w.deletes += n
		}
	}
	return w
}
