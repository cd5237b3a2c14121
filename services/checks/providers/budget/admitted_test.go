package budget

import (
	"slices"
	"strings"
	"testing"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
)

// admittedRequest is request about a workload sluice admitted.
func admittedRequest(key, ns, cpu string) *checksv1.EvaluateRequest {
	req := request(key, ns, cpu)
	req.Admitted = true
	return req
}

func TestInfoDeclaresRevision3(t *testing.T) {
	if got := Info("test").ContractRevision; got != checksv1.ContractRevision_CONTRACT_REVISION_3 {
		t.Errorf("Info declares %s, want CONTRACT_REVISION_3: the check keeps the rule of EvaluateRequest.admitted", got)
	}
}

// TestAdmittedAfterRestart plays what sluice's admitter does after the
// check restarted: it asks again about every evaluation it holds, in no
// particular order. The admitted ones must not be answered worse for
// the waiting ones asked first.
func TestAdmittedAfterRestart(t *testing.T) {
	ready, retry := checksv1.State_STATE_READY, checksv1.State_STATE_RETRY
	type call struct {
		key, cpu string
		admitted bool
		want     checksv1.State
		reason   string
	}
	tests := []struct {
		name   string
		calls  []call
		pushed [][]string
		// after: what each key answers once every call was made.
		after map[string]checksv1.State
	}{
		{"waiting first, then the admitted one: the newest waiting one gives way",
			[]call{
				{"b", "3", false, ready, ReasonWithinBudget},
				{"c", "3", false, ready, ReasonWithinBudget},
				{"a", "6", true, ready, ReasonWithinBudget},
			},
			[][]string{{"c"}},
			map[string]checksv1.State{"a": ready, "b": ready, "c": retry}},
		{"as many give way as it takes, the newest first",
			[]call{
				{"b", "4", false, ready, ReasonWithinBudget},
				{"c", "4", false, ready, ReasonOverSoftLimit},
				{"a", "8", true, ready, ReasonOverSoftLimit},
			},
			[][]string{{"c", "b"}},
			map[string]checksv1.State{"a": ready, "b": retry, "c": retry}},
		{"the admitted one first: the waiting ones are counted against it",
			[]call{
				{"a", "8", true, ready, ReasonOverSoftLimit},
				{"b", "3", false, retry, ReasonExhausted},
			},
			nil,
			map[string]checksv1.State{"a": ready, "b": retry}},
		{"one admitted on this instance's answer gives way to one admitted before the restart",
			// The admitter asked about b while the check knew nothing of a,
			// admitted b on that answer, and asked again about both.
			[]call{
				{"b", "6", false, ready, ReasonWithinBudget},
				{"b", "6", true, ready, ReasonWithinBudget},
				{"a", "6", true, ready, ReasonWithinBudget},
			},
			[][]string{{"b"}},
			map[string]checksv1.State{"a": ready, "b": retry}},
		{"an admitted one never gives way to another admitted before the restart",
			[]call{
				{"a", "6", true, ready, ReasonWithinBudget},
				{"b", "6", true, retry, ReasonExhausted},
			},
			nil,
			map[string]checksv1.State{"a": ready, "b": retry}},
		{"a waiting one that fits beside the admitted ones keeps its answer",
			[]call{
				{"b", "2", false, ready, ReasonWithinBudget},
				// Decided against the admitted ones only: 6 is within soft.
				{"a", "6", true, ready, ReasonWithinBudget},
			},
			nil,
			map[string]checksv1.State{"a": ready, "b": ready}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A new Checker is the check just restarted: it holds nothing.
			c := New(mustParse(t, teamA), newClock().now, WithRestartGrace(0))
			n := &notifier{}
			c.SetNotifier(n)
			reqs := map[string]*checksv1.EvaluateRequest{}
			for i, cl := range tt.calls {
				req := request(cl.key, "team-a", cl.cpu)
				req.Admitted = cl.admitted
				reqs[cl.key] = req
				got := evaluate(t, c, req)
				if got.GetState() != cl.want || got.GetReason() != cl.reason {
					t.Fatalf("call %d: Evaluate(%s, admitted=%v) = %s %s (%q), want %s %s", i, cl.key, cl.admitted,
						got.GetState(), got.GetReason(), got.GetMessage(), cl.want, cl.reason)
				}
			}
			if !slices.EqualFunc(n.pushed, tt.pushed, slices.Equal) {
				t.Errorf("pushed %v, want %v", n.pushed, tt.pushed)
			}
			for key, want := range tt.after {
				got := evaluate(t, c, reqs[key])
				if got.GetState() != want {
					t.Errorf("Evaluate(%s) at the end = %s %s (%q), want %s", key, got.GetState(), got.GetReason(), got.GetMessage(), want)
				}
				if slices.ContainsFunc(tt.pushed, func(keys []string) bool { return slices.Contains(keys, key) }) {
					if got.GetReason() != ReasonDisplaced || got.GetRetryAfter() == nil || !strings.Contains(got.GetMessage(), "gives way") {
						t.Errorf("displaced %s answers %s %v %q, want reason %s, a retry_after and a message that says why",
							key, got.GetReason(), got.GetRetryAfter(), got.GetMessage(), ReasonDisplaced)
					}
				}
			}
		})
	}
}

// TestAdmittedDisplacedStopCounting: a displaced evaluation stops counting
// at once, so a waiting workload that fits in what is left is READY; and
// its release adds nothing to the window.
func TestAdmittedDisplacedStopCounting(t *testing.T) {
	clk := newClock()
	c := New(mustParse(t, teamA), clk.now, WithRestartGrace(0))
	evaluate(t, c, request("b", "team-a", "5"))
	if got := evaluate(t, c, admittedRequest("a", "team-a", "6")); got.GetState() != checksv1.State_STATE_READY {
		t.Fatalf("admitted a = %s %q, want READY", got.GetState(), got.GetMessage())
	}
	release(t, c, "b")
	// 6 held, nothing spent: 4 fit.
	if got := evaluate(t, c, request("d", "team-a", "4")); got.GetState() != checksv1.State_STATE_READY {
		t.Errorf("Evaluate(d) = %s %q, want READY: the displaced b counts no more", got.GetState(), got.GetMessage())
	}
}

// TestCutTakesWaitingFirst: a budget cut revokes evaluations the check
// was never told are admitted before admitted ones, the newest first
// within each. An evaluation is known admitted once asked about as such,
// also when the check already held it.
func TestCutTakesWaitingFirst(t *testing.T) {
	tests := []struct {
		name    string
		hard    string
		revoked []string
	}{
		{"waiting ones first, though admitted ones are newer", "7", []string{"d", "b"}},
		{"then admitted ones, the newest first", "4", []string{"d", "b", "c"}},
		{"every one when nothing is left", "0", []string{"d", "b", "c", "a"}},
		{"nothing when it fits", "12", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(mustParse(t, teamA), newClock().now, WithRestartGrace(0))
			n := &notifier{}
			c.SetNotifier(n)
			// Answered READY in the order a, b, c, d; a and c then admitted.
			for _, key := range []string{"a", "b", "c", "d"} {
				if got := evaluate(t, c, request(key, "team-a", "2500m")); got.GetState() != checksv1.State_STATE_READY {
					t.Fatalf("Evaluate(%s) = %s, want READY", key, got.GetState())
				}
			}
			for _, key := range []string{"a", "c"} {
				if got := evaluate(t, c, admittedRequest(key, "team-a", "2500m")); got.GetState() != checksv1.State_STATE_READY {
					t.Fatalf("Evaluate(%s, admitted) = %s, want READY as before", key, got.GetState())
				}
			}
			revoked, err := c.SetConfig(mustParse(t, "{namespaces: {team-a: {hard: {cpu: "+tt.hard+"}}}}"))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(revoked, tt.revoked) {
				t.Errorf("revoked %v, want %v", revoked, tt.revoked)
			}
			if len(tt.revoked) > 0 && (len(n.pushed) != 1 || !slices.Equal(n.pushed[0], tt.revoked)) {
				t.Errorf("pushed %v, want [%v]", n.pushed, tt.revoked)
			}
		})
	}
}
