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
// hard limit below its usage, READY evaluations are revoked until it
// fits, those of workloads not admitted before admitted ones and the
// newest first within each: they answer RETRY (reason BudgetCut) from
// then on and their keys are pushed on WatchChanges, so sluice evicts
// their workloads.
//
// The check declares CONTRACT_REVISION_3 and keeps its rule: what it
// holds for workloads that are not admitted never makes an admitted one's
// answer worse. It remembers per evaluation whether it was ever asked
// about as admitted (EvaluateRequest.admitted), and whether it was
// admitted already when first asked about. An admitted evaluation it does
// not hold (it lost its state: a restart) was admitted on an answer that
// counted everything admitted then, so it is decided against the usage
// of such evaluations only, plus the released spend in the window; when
// that makes the namespace's usage go over its hard limit, the others
// give way, newest first: those not admitted, then those admitted on an
// answer this instance gave without knowing of it (asked about first as
// waiting, then as admitted, in the window after a restart). They answer
// RETRY (reason DisplacedByAdmitted) and their keys are pushed.
//
// State lives in memory only: after a restart sluice's admitter reopens
// WatchChanges and evaluates again everything it holds, which rebuilds
// the held evaluations, in whatever order its calls arrive. So the
// provider must run as one replica.
//
// So that a waiting workload is not admitted for a moment, on an answer
// given before the admitted ones were counted again, and then displaced,
// the check warms up after it starts: in a namespace with a budget, an
// evaluation of a workload that is not admitted and that the check does
// not hold is answered PENDING (reason RestartWarmUp, retry_after the
// warm-up left) and not remembered, until the restart grace
// (WithRestartGrace) has passed since the first WatchChanges stream
// opened, in which the admitter asks again about admitted workloads
// first; or, when no stream opens, until MaxRestartWarmUp after the
// start. Admitted evaluations are answered as ever meanwhile.
package budget

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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
	// ReasonDisplaced: READY, then revoked to make room for a workload
	// admitted before the check lost its state (a restart) and counted
	// again.
	ReasonDisplaced = "DisplacedByAdmitted"
	// ReasonWarmUp: PENDING, for a waiting workload, while the check,
	// just started, hears again about the admitted ones.
	ReasonWarmUp = "RestartWarmUp"
)

const (
	// DefaultRetryAfter is how long a workload over budget waits when no
	// released spend leaving the window would make room: what is in the
	// way is held by running workloads, whose end cannot be foreseen.
	DefaultRetryAfter = time.Minute
	// minRetryAfter keeps a wait that ends about now from being 0, which
	// would mean the check's backoff instead.
	minRetryAfter = time.Second
	// DefaultRestartGrace is the warm-up after the first WatchChanges
	// stream opened: time for the admitter's calls about admitted
	// workloads, which it makes first and in parallel, to arrive.
	DefaultRestartGrace = 10 * time.Second
	// MaxRestartWarmUp ends the warm-up of a check no WatchChanges stream
	// opened on (sluice reopens one with a backoff of at most a minute),
	// so that a check that is never watched does not stay closed.
	MaxRestartWarmUp = 2 * time.Minute
)

// Info describes the provider; version is the build's version.
func Info(version string) sdk.Info {
	return sdk.Info{
		Name:          ProviderName,
		VendorVersion: version,
		// Revision 3: Evaluate keeps the rule of EvaluateRequest.admitted.
		ContractRevision: checksv1.ContractRevision_CONTRACT_REVISION_3,
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
	// admitted: it was asked about as admitted at least once. Revocation
	// takes evaluations that are not admitted first.
	admitted bool
	// admittedFirst: admitted when first asked about, so admitted on an
	// answer an earlier instance of the check gave (or without one).
	admittedFirst bool
}

// Ranks of evaluations: which may be revoked for what.
const (
	rankWaiting        = iota // not admitted
	rankAdmittedHere          // admitted on an answer of this instance
	rankAdmittedBefore        // admitted before this instance knew of it
)

func (e *evaluation) rank() int {
	switch {
	case !e.admitted:
		return rankWaiting
	case !e.admittedFirst:
		return rankAdmittedHere
	default:
		return rankAdmittedBefore
	}
}

// spend is the cost of a released evaluation, counted until it leaves
// its namespace's window.
type spend struct {
	cost       Resources
	releasedAt time.Time
}

// Checker is the budget check. Create it with New.
type Checker struct {
	now   func() time.Time
	grace time.Duration

	mu       sync.Mutex
	notifier sdk.Notifier // nil until SetNotifier
	cfg      *Config
	seq      uint64
	evals    map[string]*evaluation // by evaluation key
	spent    map[string][]spend     // by namespace, oldest first
	// warmUntil: until then waiting evaluations it does not hold answer
	// PENDING (zero: no warm-up).
	warmUntil time.Time
	watched   bool // a WatchChanges stream opened
}

var (
	_ sdk.Checker        = (*Checker)(nil)
	_ sdk.NotifierSetter = (*Checker)(nil)
	_ sdk.WatchObserver  = (*Checker)(nil)
)

// Option configures New.
type Option func(*Checker)

// WithRestartGrace sets how long after the first WatchChanges stream
// opened the check warms up (default DefaultRestartGrace); 0 means no
// warm-up, for callers that never say a workload is admitted.
func WithRestartGrace(d time.Duration) Option {
	return func(c *Checker) { c.grace = d }
}

// New returns a Checker of cfg, warming up from now on (see the package
// comment). now is its clock (nil: time.Now).
func New(cfg *Config, now func() time.Time, opts ...Option) *Checker {
	if now == nil {
		now = time.Now
	}
	c := &Checker{now: now, grace: DefaultRestartGrace, cfg: cfg, evals: map[string]*evaluation{}, spent: map[string][]spend{}}
	for _, o := range opts {
		o(c)
	}
	if c.grace > 0 {
		c.warmUntil = now().Add(MaxRestartWarmUp)
	}
	return c
}

// WatchOpened implements sdk.WatchObserver: the first stream, on which
// the admitter asks again about what it holds, ends the warm-up a grace
// later (unless it has ended already).
func (c *Checker) WatchOpened() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.watched {
		return
	}
	c.watched = true
	if now := c.now(); now.Before(c.warmUntil) {
		c.warmUntil = now.Add(c.grace)
	}
}

// SetNotifier implements sdk.NotifierSetter.
func (c *Checker) SetNotifier(n sdk.Notifier) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.notifier = n
}

// Evaluate answers as the package comment says, the same for a key it
// answered before (marking it admitted when the request says so). The
// check takes no parameters. An admitted evaluation it does not hold may
// displace others (see the package comment); their keys are pushed
// before Evaluate returns; a push fails only for a programming error (no
// WatchChanges capability), which fails the call.
func (c *Checker) Evaluate(_ context.Context, req *checksv1.EvaluateRequest) (*checksv1.EvaluateResponse, error) {
	if err := sdk.DecodeParameters(req, &struct{}{}); err != nil {
		return nil, err
	}
	cost, err := Cost(req.GetWorkload())
	if err != nil {
		return nil, err
	}
	resp, displaced, notifier := c.evaluate(req, cost)
	if err := push(notifier, displaced); err != nil {
		return nil, status.Errorf(codes.Internal, "pushing the evaluation keys displaced by %s: %v", req.GetEvaluationKey(), err)
	}
	return resp, nil
}

// evaluate is Evaluate under c.mu: the answer, the keys it displaced and
// the notifier to push them with.
func (c *Checker) evaluate(req *checksv1.EvaluateRequest, cost Resources) (*checksv1.EvaluateResponse, []string, sdk.Notifier) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := req.GetEvaluationKey()
	if e, ok := c.evals[key]; ok {
		e.admitted = e.admitted || req.GetAdmitted()
		return proto.Clone(e.answer).(*checksv1.EvaluateResponse), nil, nil
	}
	ns := req.GetWorkload().GetNamespace()
	// Without a budget the answer does not depend on what is held.
	if _, limited := c.cfg.Namespaces[ns]; limited && !req.GetAdmitted() {
		if left := c.warmUntil.Sub(c.now()); left > 0 {
			resp := sdk.Pending(fmt.Sprintf("the budget check restarted and first hears again about the workloads already admitted, which count first in namespace %s's budget; waiting workloads are decided after that", ns),
				max(left, minRetryAfter))
			resp.Reason = ReasonWarmUp
			return resp, nil, nil
		}
	}
	e := &evaluation{namespace: ns, cost: cost, admitted: req.GetAdmitted(), admittedFirst: req.GetAdmitted()}
	// An admitted workload the check does not hold was counted before it
	// lost its state: what it has given since, without knowing of it,
	// must not stand in its way.
	e.answer = c.decide(req, e.namespace, cost, e.admittedFirst)
	if e.answer.GetState() == checksv1.State_STATE_READY {
		c.seq++
		e.holds, e.seq = true, c.seq
	}
	c.evals[key] = e
	var displaced []string
	if b, ok := c.cfg.Namespaces[e.namespace]; ok && e.admittedFirst && e.holds {
		displaced = c.takeBack(e.namespace, b, c.now(), rankAdmittedHere, ReasonDisplaced,
			fmt.Sprintf("namespace %s's budget is needed by workloads admitted before the check lost its state (a restart) and counted again now; this workload was let in without them, so it gives way",
				e.namespace))
	}
	return proto.Clone(e.answer).(*checksv1.EvaluateResponse), displaced, c.notifier
}

// push tells sluice that keys answer differently now. Call it without
// c.mu, after the answers changed: sluice's Evaluate must see the new
// ones.
func push(n sdk.Notifier, keys []string) error {
	if len(keys) == 0 || n == nil {
		return nil
	}
	return n.Changed(keys...)
}

// decide answers a new evaluation; admittedFirst counts only the usage of
// evaluations admitted when first asked about. c.mu is held.
func (c *Checker) decide(req *checksv1.EvaluateRequest, ns string, cost Resources, admittedFirst bool) *checksv1.EvaluateResponse {
	b, ok := c.cfg.Namespaces[ns]
	if !ok {
		return ready(ReasonNoBudget, fmt.Sprintf("namespace %s has no budget", ns))
	}
	if over := cost.over(b.Hard); len(over) > 0 {
		return sdk.Rejected(ReasonTooLarge, sdk.TruncateMessage(fmt.Sprintf("the workload needs %s, more than namespace %s's hard budget of %s: it can never fit",
			cost.format(over), ns, b.Hard.format(over))))
	}
	now := c.now()
	total := c.usage(ns, now, admittedFirst)
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

// usage is what ns holds (only its evaluations admitted when first asked
// about, when admittedFirst) plus its spend in the window, dropping spend
// that left it. c.mu is held.
func (c *Checker) usage(ns string, now time.Time, admittedFirst bool) Resources {
	c.expire(ns, now)
	u := Resources{}
	for _, e := range c.evals {
		if e.holds && e.namespace == ns && (e.admittedFirst || !admittedFirst) {
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
// over its hard limit it revokes READY evaluations until the usage fits
// (or none is left), those not admitted before admitted ones and the
// newest first within each: they answer RETRY from then on, and their
// keys are pushed to sluice, which evicts their workloads. It returns the
// revoked keys, and an error if pushing them failed.
func (c *Checker) SetConfig(cfg *Config) (revoked []string, err error) {
	c.mu.Lock()
	c.cfg = cfg
	now := c.now()
	for _, ns := range slices.Sorted(maps.Keys(cfg.Namespaces)) {
		b := cfg.Namespaces[ns]
		revoked = append(revoked, c.takeBack(ns, b, now, rankAdmittedBefore, ReasonCut,
			fmt.Sprintf("namespace %s's budget was cut to %s, below what it used; the newest admissions were revoked",
				ns, b.Hard.format(slices.Sorted(maps.Keys(b.Hard)))))...)
	}
	for ns := range c.spent {
		c.expire(ns, now) // a shorter window, or no budget any more
	}
	notifier := c.notifier
	c.mu.Unlock()

	if err := push(notifier, revoked); err != nil {
		return revoked, fmt.Errorf("pushing revoked evaluation keys: %w", err)
	}
	return revoked, nil
}

// takeBack revokes ns's READY evaluations of rank up to maxRank until its
// usage fits b.Hard: those not admitted first, the newest first, then
// admitted ones, the newest first. Each revoked evaluation answers RETRY
// with reason and message, and a retry_after as an exhausted budget's.
// It returns the revoked keys, to push. c.mu is held.
func (c *Checker) takeBack(ns string, b Budget, now time.Time, maxRank int, reason, message string) []string {
	usage := c.usage(ns, now, false)
	if len(usage.over(b.Hard)) == 0 {
		return nil
	}
	var held []string
	for key, e := range c.evals {
		if e.holds && e.namespace == ns && e.rank() <= maxRank {
			held = append(held, key)
		}
	}
	slices.SortFunc(held, func(x, y string) int {
		ex, ey := c.evals[x], c.evals[y]
		if ex.admitted != ey.admitted {
			if ey.admitted {
				return -1 // not admitted first
			}
			return 1
		}
		return cmp.Compare(ey.seq, ex.seq) // newest first
	})
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
		e.answer = sdk.Retry(sdk.TruncateMessage(message), c.retryAfter(ns, total, b, now))
		e.answer.Reason = reason
	}
	return revoked
}
