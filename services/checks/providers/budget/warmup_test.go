package budget

import (
	"strings"
	"testing"
	"time"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
)

// warmStep moves the clock, opens a WatchChanges stream (WatchOpened) or
// evaluates key in team-a (ns when set), and says what the answer must be.
type warmStep struct {
	advance  time.Duration
	watch    bool
	key, cpu string
	ns       string
	admitted bool
	want     checksv1.State
	reason   string
	// retryAfter: of a PENDING answer.
	retryAfter time.Duration
}

// TestRestartWarmUp plays a check that just started: waiting workloads
// wait for the admitted ones to be asked about again, until the grace
// after the first stream, or the cap when none opens.
func TestRestartWarmUp(t *testing.T) {
	const grace = 10 * time.Second
	pending, ready, retry := checksv1.State_STATE_PENDING, checksv1.State_STATE_READY, checksv1.State_STATE_RETRY
	waitingB := func(want checksv1.State, reason string, retryAfter time.Duration) warmStep {
		return warmStep{key: "b", cpu: "6", want: want, reason: reason, retryAfter: retryAfter}
	}
	tests := []struct {
		name  string
		grace time.Duration
		steps []warmStep
	}{
		{"without a stream, waiting ones wait until the cap", grace, []warmStep{
			waitingB(pending, ReasonWarmUp, MaxRestartWarmUp),
			{advance: MaxRestartWarmUp - 1500*time.Millisecond},
			waitingB(pending, ReasonWarmUp, 1500*time.Millisecond),
			{advance: time.Second},
			waitingB(pending, ReasonWarmUp, time.Second), // never less than a second
			{advance: 500 * time.Millisecond},
			waitingB(ready, ReasonWithinBudget, 0),
		}},
		{"the first stream ends it a grace later", grace, []warmStep{
			{advance: 30 * time.Second, watch: true},
			waitingB(pending, ReasonWarmUp, grace),
			{advance: grace - time.Second},
			waitingB(pending, ReasonWarmUp, time.Second),
			{advance: time.Second},
			waitingB(ready, ReasonWithinBudget, 0),
		}},
		{"a later stream does not extend it", grace, []warmStep{
			{watch: true},
			{advance: grace / 2, watch: true},
			waitingB(pending, ReasonWarmUp, grace/2),
			{advance: grace / 2},
			waitingB(ready, ReasonWithinBudget, 0),
		}},
		{"a stream after the cap does not start it again", grace, []warmStep{
			{advance: MaxRestartWarmUp, watch: true},
			waitingB(ready, ReasonWithinBudget, 0),
		}},
		{"admitted ones are answered meanwhile and count; the waiting one is refused after", grace, []warmStep{
			{watch: true},
			waitingB(pending, ReasonWarmUp, grace),
			{key: "a", cpu: "6", admitted: true, want: ready, reason: ReasonWithinBudget},
			{advance: grace},
			waitingB(retry, ReasonExhausted, 0),
		}},
		{"a namespace without a budget does not wait", grace, []warmStep{
			{key: "b", cpu: "6", ns: "team-b", want: ready, reason: ReasonNoBudget},
		}},
		{"grace 0: no warm-up", 0, []warmStep{
			waitingB(ready, ReasonWithinBudget, 0),
			{watch: true},
			{key: "c", cpu: "1", want: ready, reason: ReasonOverSoftLimit},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			c := New(mustParse(t, teamA), clk.now, WithRestartGrace(tt.grace))
			n := &notifier{}
			c.SetNotifier(n)
			for i, s := range tt.steps {
				clk.advance(s.advance)
				if s.watch {
					c.WatchOpened()
				}
				if s.key == "" {
					continue
				}
				req := request(s.key, "team-a", s.cpu)
				if s.ns != "" {
					req.Workload.Namespace = s.ns
				}
				req.Admitted = s.admitted
				got := evaluate(t, c, req)
				if got.GetState() != s.want || got.GetReason() != s.reason {
					t.Fatalf("step %d: Evaluate(%s, admitted=%v) = %s %s (%q), want %s %s", i, s.key, s.admitted,
						got.GetState(), got.GetReason(), got.GetMessage(), s.want, s.reason)
				}
				if s.want != pending {
					continue
				}
				if after := got.GetRetryAfter().AsDuration(); after != s.retryAfter {
					t.Errorf("step %d: retry_after = %s, want %s", i, after, s.retryAfter)
				}
				if !strings.Contains(got.GetMessage(), "restarted") || !strings.Contains(got.GetMessage(), "admitted") {
					t.Errorf("step %d: message %q does not say the check restarted and first hears about admitted workloads", i, got.GetMessage())
				}
				if _, held := c.evals[s.key]; held {
					t.Errorf("step %d: %s answered PENDING for the warm-up is remembered; it must be decided afresh after it", i, s.key)
				}
			}
			if len(n.pushed) != 0 {
				t.Errorf("pushed %v, want nothing: nothing was answered READY that had to give way", n.pushed)
			}
		})
	}
}

// TestDefaultRestartGrace: New warms up unless told otherwise.
func TestDefaultRestartGrace(t *testing.T) {
	clk := newClock()
	c := New(mustParse(t, teamA), clk.now)
	c.WatchOpened()
	if got := evaluate(t, c, request("b", "team-a", "1")); got.GetState() != checksv1.State_STATE_PENDING ||
		got.GetRetryAfter().AsDuration() != DefaultRestartGrace {
		t.Fatalf("Evaluate(b) = %s after %s, want PENDING after %s", got.GetState(), got.GetRetryAfter().AsDuration(), DefaultRestartGrace)
	}
}
