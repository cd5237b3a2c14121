// Package budget is the built-in admission check that keeps each
// namespace within a resource budget over a window of time (KEP-1145
// Story 2): a workload's cost is the sum over its pod sets of count times
// one pod's requests; a namespace's usage is the cost of every evaluation
// the check answered READY and still holds, plus the cost of those
// released less than the budget's window ago.
//
// Against the namespace's budget (see Config), usage plus the workload's
// cost
//
//	within soft:                READY (reason WithinBudget);
//	over soft, within hard:     READY, every pod labelled OverSoftLimitLabel=true;
//	over hard:                  RETRY, after released spend leaves the window;
//	cost alone over hard:       REJECTED: it never fits.
//
// A namespace without a budget is not limited (READY, reason NoBudget),
// but its READY evaluations are held, so a budget added later counts them.
// Every answer is kept per evaluation key until Release, so a repeated
// Evaluate gets the same answer. When a new Config lowers a namespace's
// hard limit below its usage, the newest READY evaluations are revoked
// until it fits: they answer RETRY (reason BudgetCut) from then on and
// their keys are pushed on WatchChanges, so sluice evicts their workloads.
//
// State lives in memory only: after a restart sluice's admitter reopens
// WatchChanges and evaluates again everything it holds, which rebuilds
// the held evaluations. So the provider must run as one replica.
package budget

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/services/checks/sdk"
)

const (
	// ProviderName is the provider's name in GetProviderInfo.
	ProviderName = "budget.checks.sluice.dev"
	// OverSoftLimitLabel marks the pods of workloads admitted over a soft
	// limit, for tracking and alerting.
	OverSoftLimitLabel = "budget.checks.sluice.dev/over-soft-limit"
)

// Reasons of the answers.
const (
	ReasonWithinBudget  = "WithinBudget"
	ReasonOverSoftLimit = "OverSoftLimit"
	ReasonNoBudget      = "NoBudget"
	ReasonExhausted     = "BudgetExhausted"
	ReasonTooLarge      = "BudgetTooSmall"
	ReasonCut           = "BudgetCut"
)

const (
	// DefaultRetryAfter is how long a workload over budget waits when no
	// released spend leaving the window would make room: what is in the
	// way is held by running workloads, whose end cannot be foreseen.
	DefaultRetryAfter = time.Minute
	// minRetryAfter keeps a wait that ends about now from being 0, which
	// would mean the check's backoff instead.
	minRetryAfter = time.Second
)

// Info describes the provider; version is the build's version.
func Info(version string) sdk.Info {
	return sdk.Info{
		Name:          ProviderName,
		VendorVersion: version,
		Capabilities: []checksv1.Capability{
			checksv1.Capability_CAPABILITY_POD_SET_UPDATES,
			checksv1.Capability_CAPABILITY_RELEASE,
			checksv1.Capability_CAPABILITY_WATCH_CHANGES,
		},
	}
}

// evaluation is an answer given and not released yet.
type evaluation struct {
	namespace string
	cost      Resources
	answer    *checksv1.EvaluateResponse
	// holds: answered READY and not revoked, so its cost is in use.
	holds bool
	// seq orders READY answers; revocation takes the highest first.
	seq uint64
}

// spend is the cost of a released evaluation, counted until it leaves
// its namespace's window.
type spend struct {
	cost       Resources
	releasedAt time.Time
}

// Checker is the budget check. Create it with New.
type Checker struct {
	now func() time.Time

	mu       sync.Mutex
	notifier sdk.Notifier // nil until SetNotifier
	cfg      *Config
	seq      uint64
	evals    map[string]*evaluation // by evaluation key
	spent    map[string][]spend     // by namespace, oldest first
}

var (
	_ sdk.Checker        = (*Checker)(nil)
	_ sdk.NotifierSetter = (*Checker)(nil)
)

// New returns a Checker of cfg. now is its clock (nil: time.Now).
func New(cfg *Config, now func() time.Time) *Checker {
	if now == nil {
		now = time.Now
	}
	return &Checker{now: now, cfg: cfg, evals: map[string]*evaluation{}, spent: map[string][]spend{}}
}

// SetNotifier implements sdk.NotifierSetter.
func (c *Checker) SetNotifier(n sdk.Notifier) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.notifier = n
}

// Evaluate answers as the package comment says, the same for a key it
// answered before. The check takes no parameters.
func (c *Checker) Evaluate(_ context.Context, req *checksv1.EvaluateRequest) (*checksv1.EvaluateResponse, error) {
	if err := sdk.DecodeParameters(req, &struct{}{}); err != nil {
		return nil, err
	}
	cost, err := Cost(req.GetWorkload())
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	key := req.GetEvaluationKey()
	if e, ok := c.evals[key]; ok {
		return proto.Clone(e.answer).(*checksv1.EvaluateResponse), nil
	}
	e := &evaluation{namespace: req.GetWorkload().GetNamespace(), cost: cost}
	e.answer = c.decide(req, e.namespace, cost)
	if e.answer.GetState() == checksv1.State_STATE_READY {
		c.seq++
		e.holds, e.seq = true, c.seq
	}
	c.evals[key] = e
	return proto.Clone(e.answer).(*checksv1.EvaluateResponse), nil
}

// decide answers a new evaluation. c.mu is held.
func (c *Checker) decide(req *checksv1.EvaluateRequest, ns string, cost Resources) *checksv1.EvaluateResponse {
	b, ok := c.cfg.Namespaces[ns]
	if !ok {
		return ready(ReasonNoBudget, fmt.Sprintf("namespace %s has no budget", ns))
	}
	if over := cost.over(b.Hard); len(over) > 0 {
		return sdk.Rejected(ReasonTooLarge, sdk.TruncateMessage(fmt.Sprintf("the workload needs %s, more than namespace %s's hard budget of %s: it can never fit",
			cost.format(over), ns, b.Hard.format(over))))
	}
	now := c.now()
	total := c.usage(ns, now)
	total.add(cost)
	if over := total.over(b.Hard); len(over) > 0 {
		resp := sdk.Retry(sdk.TruncateMessage(fmt.Sprintf("namespace %s would use %s with this workload, over its hard budget of %s%s",
			ns, total.format(over), b.Hard.format(over), windowNote(b))), c.retryAfter(ns, total, b, now))
		resp.Reason = ReasonExhausted
		return resp
	}
	if over := total.over(b.Soft); len(over) > 0 {
		resp := sdk.Ready(sdk.UpdateEveryPodSet(req, &checksv1.PodSetUpdate{Labels: map[string]string{OverSoftLimitLabel: "true"}})...)
		resp.Reason = ReasonOverSoftLimit
		resp.Message = sdk.TruncateMessage(fmt.Sprintf("namespace %s uses %s with this workload, over its soft budget of %s (hard: %s)",
			ns, total.format(over), b.Soft.format(over), b.Hard.format(over)))
		return resp
	}
	return ready(ReasonWithinBudget, fmt.Sprintf("within namespace %s's budget", ns))
}

func ready(reason, message string) *checksv1.EvaluateResponse {
	resp := sdk.Ready()
	resp.Reason, resp.Message = reason, message
	return resp
}

func windowNote(b Budget) string {
	if b.Window == 0 {
		return ""
	}
	return fmt.Sprintf(" (usage counts what was released in the last %s)", b.Window)
}

// usage is what ns holds plus its spend in the window, dropping spend
// that left it. c.mu is held.
func (c *Checker) usage(ns string, now time.Time) Resources {
	c.expire(ns, now)
	u := Resources{}
	for _, e := range c.evals {
		if e.holds && e.namespace == ns {
			u.add(e.cost)
		}
	}
	for _, s := range c.spent[ns] {
		u.add(s.cost)
	}
	return u
}

// expire drops ns's spend that left its window. c.mu is held.
func (c *Checker) expire(ns string, now time.Time) {
	window := c.cfg.window(ns)
	spent := c.spent[ns]
	i := 0
	for i < len(spent) && !now.Before(spent[i].releasedAt.Add(window)) {
		i++
	}
	if i == len(spent) {
		delete(c.spent, ns)
		return
	}
	c.spent[ns] = spent[i:]
}

// retryAfter is how long until enough of ns's spend leaves the window for
// total (usage with the workload) to fit b.Hard, or DefaultRetryAfter
// when that is not enough. c.mu is held.
func (c *Checker) retryAfter(ns string, total Resources, b Budget, now time.Time) time.Duration {
	left := total.clone()
	for _, s := range c.spent[ns] { // oldest first: they leave in this order
		left.sub(s.cost)
		if len(left.over(b.Hard)) == 0 {
			return max(s.releasedAt.Add(b.Window).Sub(now), minRetryAfter)
		}
	}
	return DefaultRetryAfter
}

// Release frees what the key holds. Its cost stays in its namespace's
// usage for the budget's window, unless it was revoked: a cut takes the
// budget back at once.
func (c *Checker) Release(_ context.Context, req *checksv1.ReleaseRequest) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.evals[req.GetEvaluationKey()]
	if !ok {
		return nil
	}
	delete(c.evals, req.GetEvaluationKey())
	if e.holds && c.cfg.window(e.namespace) > 0 {
		c.spent[e.namespace] = append(c.spent[e.namespace], spend{cost: e.cost, releasedAt: c.now()})
	}
	return nil
}

// SetConfig makes cfg the budgets. In every namespace whose usage is now
// over its hard limit it revokes the newest READY evaluations until the
// usage fits (or none is left): they answer RETRY from then on, and their
// keys are pushed to sluice, which evicts their workloads. It returns the
// revoked keys, and an error if pushing them failed.
func (c *Checker) SetConfig(cfg *Config) (revoked []string, err error) {
	c.mu.Lock()
	c.cfg = cfg
	now := c.now()
	for _, ns := range slices.Sorted(maps.Keys(cfg.Namespaces)) {
		revoked = append(revoked, c.cut(ns, cfg.Namespaces[ns], now)...)
	}
	for ns := range c.spent {
		c.expire(ns, now) // a shorter window, or no budget any more
	}
	notifier := c.notifier
	c.mu.Unlock()

	if len(revoked) == 0 || notifier == nil {
		return revoked, nil
	}
	// After the answers changed: sluice's Evaluate must see RETRY.
	if err := notifier.Changed(revoked...); err != nil {
		return revoked, fmt.Errorf("pushing revoked evaluation keys: %w", err)
	}
	return revoked, nil
}

// cut revokes ns's newest READY evaluations until its usage fits b.Hard.
// c.mu is held.
func (c *Checker) cut(ns string, b Budget, now time.Time) []string {
	usage := c.usage(ns, now)
	if len(usage.over(b.Hard)) == 0 {
		return nil
	}
	var held []string
	for key, e := range c.evals {
		if e.holds && e.namespace == ns {
			held = append(held, key)
		}
	}
	slices.SortFunc(held, func(x, y string) int { return cmp.Compare(c.evals[y].seq, c.evals[x].seq) }) // newest first
	var revoked []string
	for _, key := range held {
		if len(usage.over(b.Hard)) == 0 {
			break
		}
		e := c.evals[key]
		usage.sub(e.cost)
		e.holds = false
		revoked = append(revoked, key)
	}
	for _, key := range revoked {
		e := c.evals[key]
		total := usage.clone()
		total.add(e.cost)
		e.answer = sdk.Retry(sdk.TruncateMessage(fmt.Sprintf("namespace %s's budget was cut to %s, below what it used; the newest admissions were revoked",
			ns, b.Hard.format(slices.Sorted(maps.Keys(b.Hard))))), c.retryAfter(ns, total, b, now))
		e.answer.Reason = ReasonCut
	}
	return revoked
}
