package admitter

import (
	"context"
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/test/fakecheck"
)

// writeCounter counts, per workload, the changes the API server reports
// for the Workloads of one namespace: every write of the admitter that
// changes an object shows up as exactly one watch event.
type writeCounter struct {
	w       watch.Interface
	updates map[string]int
}

func countWrites(ctx context.Context, t *testing.T, ns string) *writeCounter {
	t.Helper()
	wc, err := client.NewWithWatch(s.env.Config, client.Options{Scheme: s.k8s.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(ctx, &v1alpha1.WorkloadList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatalf("watch workloads: %v", err)
	}
	t.Cleanup(w.Stop)
	return &writeCounter{w: w, updates: map[string]int{}}
}

// drainUntil consumes events until done holds for the counts.
func (c *writeCounter) drainUntil(ctx context.Context, t *testing.T, what string, done func(map[string]int) bool) {
	t.Helper()
	for !done(c.updates) {
		select {
		case ev, ok := <-c.w.ResultChan():
			if !ok {
				t.Fatalf("watch ended while waiting for %s", what)
			}
			wl, ok := ev.Object.(*v1alpha1.Workload)
			if !ok {
				continue
			}
			if ev.Type == watch.Modified {
				c.updates[wl.Name]++
			}
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v (updates %v)", what, ctx.Err(), c.updates)
		}
	}
}

func TestWriteBudget(t *testing.T) {
	cases := []struct {
		name      string
		withCheck bool
		// statusWrites is the Workload status writes per workload from
		// creation to Admitted: one reservation (carrying Admitted without
		// checks), plus one for a check that answers READY at once.
		statusWrites int
	}{
		{"no checks: one status write", false, 1},
		{"one check ready at once: two status writes", true, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			var checks []string
			if tc.withCheck {
				fake := fakecheck.StartT(t, fakecheck.WithDefaultAnswer(&checksv1.EvaluateResponse{State: checksv1.State_STATE_READY}))
				checks = append(checks, newCheck(ctx, t, fake.Target()))
			}
			st := newSetup(ctx, t, queueOptions{cpu: "100", checks: checks})
			counter := countWrites(ctx, t, st.ns)
			const n = 20
			for i := range n {
				submit(ctx, t, st.ns, fmt.Sprintf("w%d", i), "1")
			}
			for i := range n {
				waitWorkload(ctx, t, st.ns, fmt.Sprintf("w%d", i), "admitted", func(wl *v1alpha1.Workload) bool {
					return isTrue(wl, v1alpha1.WorkloadAdmitted)
				})
			}
			counter.drainUntil(ctx, t, "every workload's writes", func(u map[string]int) bool {
				total := 0
				for _, c := range u {
					total += c
				}
				return total >= n*tc.statusWrites
			})
			// Give the admitter a full cycle to make any extra write: a new
			// workload submitted now and admitted proves the loop moved on.
			submit(ctx, t, st.ns, "marker", "1")
			waitWorkload(ctx, t, st.ns, "marker", "admitted", func(wl *v1alpha1.Workload) bool {
				return isTrue(wl, v1alpha1.WorkloadAdmitted)
			})
			counter.drainUntil(ctx, t, "the marker's writes", func(u map[string]int) bool { return u["marker"] >= tc.statusWrites })
			for i := range n {
				if got := counter.updates[fmt.Sprintf("w%d", i)]; got != tc.statusWrites {
					t.Errorf("w%d: %d status writes, want %d (all: %v)", i, got, tc.statusWrites, counter.updates)
				}
			}
		})
	}
}
