package budget

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
)

// clock is a settable clock for the Checker.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *clock                   { return &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }
func mustParse(t *testing.T, y string) *Config {
	t.Helper()
	cfg, err := Parse([]byte(y))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return cfg
}

// request asks for a workload in ns of one pod set "main" of one pod
// requesting cpu.
func request(key, ns, cpu string) *checksv1.EvaluateRequest {
	return &checksv1.EvaluateRequest{
		CheckName:     "budget",
		EvaluationKey: key,
		Workload: &checksv1.Workload{Namespace: ns, Name: "w-" + key, Uid: "uid-" + key, PodSets: []*checksv1.PodSet{
			{Name: "main", Count: 1, Requests: map[string]string{"cpu": cpu}},
		}},
	}
}

func evaluate(t *testing.T, c *Checker, req *checksv1.EvaluateRequest) *checksv1.EvaluateResponse {
	t.Helper()
	resp, err := c.Evaluate(context.Background(), req)
	if err != nil {
		t.Fatalf("Evaluate(%s): %v", req.GetEvaluationKey(), err)
	}
	return resp
}

func release(t *testing.T, c *Checker, key string) {
	t.Helper()
	if err := c.Release(context.Background(), &checksv1.ReleaseRequest{EvaluationKey: key}); err != nil {
		t.Fatalf("Release(%s): %v", key, err)
	}
}

const teamA = `
namespaces:
  team-a:
    hard: {cpu: 10}
    soft: {cpu: 6}
    window: 1h
`

// step is one call, or a move of the clock, and what it must answer.
type step struct {
	evaluate, cpu string // key and its cost; namespace team-a unless ns
	ns            string
	release       string
	advance       time.Duration

	want          checksv1.State
	reason        string
	retryAfter    time.Duration
	overSoftLabel bool
	messageHas    string
}

func TestAccounting(t *testing.T) {
	ready, retry, rejected := checksv1.State_STATE_READY, checksv1.State_STATE_RETRY, checksv1.State_STATE_REJECTED
	tests := []struct {
		name  string
		steps []step
	}{
		{"within soft", []step{
			{evaluate: "a", cpu: "6", want: ready, reason: ReasonWithinBudget},
		}},
		{"over soft, within hard: labelled", []step{
			{evaluate: "a", cpu: "4", want: ready, reason: ReasonWithinBudget},
			{evaluate: "b", cpu: "3", want: ready, reason: ReasonOverSoftLimit, overSoftLabel: true, messageHas: "uses cpu 7 with this workload, over its soft budget of cpu 6"},
		}},
		{"over hard: retry when held usage is in the way", []step{
			{evaluate: "a", cpu: "8", want: ready, reason: ReasonOverSoftLimit, overSoftLabel: true},
			{evaluate: "b", cpu: "3", want: retry, reason: ReasonExhausted, retryAfter: DefaultRetryAfter, messageHas: "cpu 11 with this workload, over its hard budget of cpu 10"},
		}},
		{"cost alone over hard: rejected, naming the resource", []step{
			{evaluate: "a", cpu: "10500m", want: rejected, reason: ReasonTooLarge, messageHas: "needs cpu 10500m, more than namespace team-a's hard budget of cpu 10"},
		}},
		{"a held key answers the same, also once others changed usage", []step{
			{evaluate: "a", cpu: "5", want: ready, reason: ReasonWithinBudget},
			{evaluate: "b", cpu: "3", want: ready, reason: ReasonOverSoftLimit, overSoftLabel: true},
			{evaluate: "a", cpu: "5", want: ready, reason: ReasonWithinBudget},
			{evaluate: "b", cpu: "3", want: ready, reason: ReasonOverSoftLimit, overSoftLabel: true},
		}},
		{"a refused key answers the same until released, even once budget frees", []step{
			{evaluate: "a", cpu: "8", want: ready, reason: ReasonOverSoftLimit, overSoftLabel: true},
			{evaluate: "b", cpu: "3", want: retry, reason: ReasonExhausted, retryAfter: DefaultRetryAfter},
			{release: "a"},
			{advance: 2 * time.Hour},
			{evaluate: "b", cpu: "3", want: retry, reason: ReasonExhausted, retryAfter: DefaultRetryAfter},
			{release: "b"},
			{evaluate: "b", cpu: "3", want: ready, reason: ReasonWithinBudget},
		}},
		{"released spend counts for the window, then frees", []step{
			{evaluate: "a", cpu: "8", want: ready, reason: ReasonOverSoftLimit, overSoftLabel: true},
			{release: "a"},
			{advance: 10 * time.Minute},
			{evaluate: "b", cpu: "3", want: retry, reason: ReasonExhausted, retryAfter: 50 * time.Minute, messageHas: "released in the last 1h0m0s"},
			{advance: 50 * time.Minute},
			{evaluate: "c", cpu: "3", want: ready, reason: ReasonWithinBudget},
		}},
		{"retry waits for the oldest spend that makes room", []step{
			{evaluate: "a", cpu: "4", want: ready, reason: ReasonWithinBudget},
			{release: "a"},
			{advance: 10 * time.Minute},
			{evaluate: "b", cpu: "4", want: ready, reason: ReasonOverSoftLimit, overSoftLabel: true},
			{release: "b"},
			{advance: 10 * time.Minute},
			// 8 spent: 5 fits once a's 4 leaves, 40 minutes from now.
			{evaluate: "c", cpu: "5", want: retry, reason: ReasonExhausted, retryAfter: 40 * time.Minute},
			// 9 needs both gone: b's leaves in 50 minutes.
			{evaluate: "d", cpu: "9", want: retry, reason: ReasonExhausted, retryAfter: 50 * time.Minute},
		}},
		{"namespaces are apart; one without a budget is not limited", []step{
			{evaluate: "a", cpu: "10", want: ready, reason: ReasonOverSoftLimit, overSoftLabel: true},
			{evaluate: "b", ns: "team-b", cpu: "1000", want: ready, reason: ReasonNoBudget},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			c := New(mustParse(t, teamA), clk.now, WithRestartGrace(0))
			for i, s := range tt.steps {
				switch {
				case s.advance > 0:
					clk.advance(s.advance)
				case s.release != "":
					release(t, c, s.release)
				default:
					ns := s.ns
					if ns == "" {
						ns = "team-a"
					}
					checkAnswer(t, i, evaluate(t, c, request(s.evaluate, ns, s.cpu)), s)
				}
			}
		})
	}
}

func checkAnswer(t *testing.T, i int, got *checksv1.EvaluateResponse, want step) {
	t.Helper()
	if got.GetState() != want.want || got.GetReason() != want.reason {
		t.Fatalf("step %d: Evaluate(%s) = %s %s (%q), want %s %s", i, want.evaluate, got.GetState(), got.GetReason(), got.GetMessage(), want.want, want.reason)
	}
	if d := got.GetRetryAfter().AsDuration(); got.RetryAfter != nil && d != want.retryAfter || got.RetryAfter == nil && want.retryAfter != 0 {
		t.Errorf("step %d: retry_after = %v, want %v", i, got.GetRetryAfter(), want.retryAfter)
	}
	if !strings.Contains(got.GetMessage(), want.messageHas) {
		t.Errorf("step %d: message %q, want it to hold %q", i, got.GetMessage(), want.messageHas)
	}
	var labelled []string
	for _, u := range got.GetPodSetUpdates() {
		if u.GetLabels()[OverSoftLimitLabel] == "true" {
			labelled = append(labelled, u.GetName())
		}
	}
	labelledAll := len(labelled) > 0 && len(labelled) == len(got.GetPodSetUpdates())
	if want.overSoftLabel != labelledAll || !want.overSoftLabel && len(got.GetPodSetUpdates()) > 0 {
		t.Errorf("step %d: pod set updates %v, want the label %s on every pod set: %v", i, got.GetPodSetUpdates(), OverSoftLimitLabel, want.overSoftLabel)
	}
}

// TestOverSoftLimitLabelsEveryPodSet checks the label reaches every pod
// set, and the cost sums count times requests over them.
func TestOverSoftLimitLabelsEveryPodSet(t *testing.T) {
	c := New(mustParse(t, teamA), newClock().now, WithRestartGrace(0))
	req := request("a", "team-a", "1")
	req.Workload.PodSets = []*checksv1.PodSet{
		{Name: "driver", Count: 1, Requests: map[string]string{"cpu": "1", "memory": "1Gi"}},
		{Name: "workers", Count: 4, Requests: map[string]string{"cpu": "1500m"}},
	}
	resp := evaluate(t, c, req)
	if resp.GetState() != checksv1.State_STATE_READY || resp.GetReason() != ReasonOverSoftLimit {
		t.Fatalf("Evaluate = %s %s (%q), want READY %s: 1 + 4 x 1.5 = 7 cpu is over soft 6", resp.GetState(), resp.GetReason(), resp.GetMessage(), ReasonOverSoftLimit)
	}
	var names []string
	for _, u := range resp.GetPodSetUpdates() {
		if u.GetLabels()[OverSoftLimitLabel] != "true" {
			t.Errorf("update %s: labels %v, want %s=true", u.GetName(), u.GetLabels(), OverSoftLimitLabel)
		}
		names = append(names, u.GetName())
	}
	if !slices.Equal(names, []string{"driver", "workers"}) {
		t.Errorf("updates for %v, want driver and workers", names)
	}
}

func TestCost(t *testing.T) {
	tests := []struct {
		name    string
		podSets []*checksv1.PodSet
		want    map[string]string
		wantErr string
	}{
		{"none", nil, map[string]string{}, ""},
		{"count times requests, summed over pod sets", []*checksv1.PodSet{
			{Name: "driver", Count: 1, Requests: map[string]string{"cpu": "500m", "memory": "1Gi"}},
			{Name: "workers", Count: 3, Requests: map[string]string{"cpu": "2", "nvidia.com/gpu": "1"}},
		}, map[string]string{"cpu": "6500m", "memory": "1Gi", "nvidia.com/gpu": "3"}, ""},
		{"zero pods cost nothing", []*checksv1.PodSet{
			{Name: "main", Count: 0, Requests: map[string]string{"cpu": "2"}},
		}, map[string]string{"cpu": "0"}, ""},
		{"bad quantity", []*checksv1.PodSet{
			{Name: "main", Count: 1, Requests: map[string]string{"cpu": "two"}},
		}, nil, `workload.pod_sets[0].requests["cpu"]: "two" is not a Kubernetes quantity`},
		{"negative count", []*checksv1.PodSet{
			{Name: "main", Count: -1},
		}, nil, "workload.pod_sets[0].count: -1 is negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Cost(&checksv1.Workload{PodSets: tt.podSets})
			if tt.wantErr != "" {
				if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Cost error = %v, want INVALID_ARGUMENT with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("Cost = %v, want %v", got, tt.want)
			}
			for name, q := range got {
				if q.String() != tt.want[name] {
					t.Errorf("Cost[%s] = %s, want %s", name, q.String(), tt.want[name])
				}
			}
		})
	}
}

func TestEvaluateRefusesParameters(t *testing.T) {
	c := New(mustParse(t, teamA), nil, WithRestartGrace(0))
	req := request("a", "team-a", "1")
	var err error
	if req.Parameters, err = structpb.NewStruct(map[string]any{"limit": "10"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Evaluate(context.Background(), req); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "limit") {
		t.Errorf("Evaluate with parameters = %v, want INVALID_ARGUMENT naming limit", err)
	}
}

// notifier records what the Checker pushes.
type notifier struct {
	mu     sync.Mutex
	pushed [][]string
}

func (n *notifier) Changed(keys ...string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.pushed = append(n.pushed, keys)
	return nil
}

func TestSetConfigRevokesNewest(t *testing.T) {
	clk := newClock()
	c := New(mustParse(t, teamA), clk.now, WithRestartGrace(0))
	n := &notifier{}
	c.SetNotifier(n)
	for _, key := range []string{"a", "b", "c"} {
		if resp := evaluate(t, c, request(key, "team-a", "3")); resp.GetState() != checksv1.State_STATE_READY {
			t.Fatalf("Evaluate(%s) = %s, want READY", key, resp.GetState())
		}
	}
	evaluate(t, c, request("other", "team-b", "3")) // another namespace: untouched

	revoked, err := c.SetConfig(mustParse(t, `{namespaces: {team-a: {hard: {cpu: 5}, window: 1h}}}`))
	if err != nil {
		t.Fatal(err)
	}
	// 9 held: revoking c leaves 6, still over 5; revoking b leaves 3.
	if want := []string{"c", "b"}; !slices.Equal(revoked, want) {
		t.Errorf("revoked %v, want %v (the newest first, until usage fits)", revoked, want)
	}
	if want := [][]string{{"c", "b"}}; len(n.pushed) != 1 || !slices.Equal(n.pushed[0], want[0]) {
		t.Errorf("pushed %v, want %v", n.pushed, want)
	}
	for key, want := range map[string]checksv1.State{"a": checksv1.State_STATE_READY, "b": checksv1.State_STATE_RETRY, "c": checksv1.State_STATE_RETRY, "other": checksv1.State_STATE_READY} {
		ns := "team-a"
		if key == "other" {
			ns = "team-b"
		}
		resp := evaluate(t, c, request(key, ns, "3"))
		if resp.GetState() != want {
			t.Errorf("Evaluate(%s) after the cut = %s, want %s", key, resp.GetState(), want)
		}
		if want == checksv1.State_STATE_RETRY && (resp.GetReason() != ReasonCut || resp.GetRetryAfter() == nil) {
			t.Errorf("Evaluate(%s) after the cut = %s %v, want reason %s with a retry_after", key, resp.GetReason(), resp.GetRetryAfter(), ReasonCut)
		}
	}

	// A revoked evaluation's Release adds nothing to the window: 3 held, 2 fit.
	release(t, c, "c")
	if resp := evaluate(t, c, request("d", "team-a", "2")); resp.GetState() != checksv1.State_STATE_READY {
		t.Errorf("Evaluate(d) after c's release = %s %q, want READY", resp.GetState(), resp.GetMessage())
	}
	// Usage fits now: the same config again revokes nothing and pushes nothing.
	if revoked, _ := c.SetConfig(mustParse(t, `{namespaces: {team-a: {hard: {cpu: 5}, window: 1h}}}`)); len(revoked) != 0 || len(n.pushed) != 1 {
		t.Errorf("SetConfig again revoked %v, pushed %v; want nothing more", revoked, n.pushed)
	}
}
