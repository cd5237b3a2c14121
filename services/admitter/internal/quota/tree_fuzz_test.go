package quota

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// The property tests drive a Tree and a refTree with the same operations
// and, after every one, check that
//
//	(a) every figure the Tree reports (cohort usage, subtree quota and lent
//	    amount; queue usage, available, potential available, borrowed and
//	    lent amounts, cycle) equals the refTree's, which recomputes it from
//	    scratch from the raw definitions and the raw per-queue usage;
//	(b) Fits agrees with the refTree's available amounts, and admitting what
//	    fits, or finishing what was admitted, never increases any violation
//	    measured by refTree.violations: a pool without usable parent holding
//	    more than its subtree quota, or a node with a borrowing limit
//	    holding more than lendable + BL in its parent's pool. Lending limits
//	    are part of this: a node's local quota is never in any pool, so
//	    usage from outside the node can only be held against other quota.
//	    Quota and structure edits may create violations out of usage already
//	    held; admissions must then not add to them;
//	(c) Available is tight: in a tree without violations, admitting exactly
//	    Available of one FR creates none, and one more unit creates one.

var (
	fuzzCohorts = []string{"c0", "c1", "c2", "c3"}
	// "c1" is also a ClusterQueue: the two namespaces are separate.
	fuzzQueues = []string{"q0", "q1", "q2", "q3", "c1"}
	fuzzFRs    = []FR{{Flavor: "f0", Resource: corev1.ResourceCPU}, {Flavor: "f1", Resource: corev1.ResourceMemory}}
)

const maxFuzzOps = 200

func FuzzTree(f *testing.F) {
	const none = -1
	// The lending-limit example of TestTree, then a borrowing limit.
	f.Add([]byte(fuzzInput{}.
		setClusterQueue(0, 0, &seedQuota{10, none, 4}, nil).
		setClusterQueue(1, 0, &seedQuota{10, none, none}, nil).
		admit(0, 8, 0).admit(1, 6, 0).admit(1, 6, 0).admit(0, 1, 0).
		finish(1).
		editClusterQueueQuota(0, 0, seedQuota{10, 1, 4}).
		admit(0, 3, 0).admit(1, 4, 0)))
	// A loop of two cohorts above a queue with usage, then repaired.
	f.Add([]byte(fuzzInput{}.
		setCohort(0, 1, &seedQuota{5, none, none}, nil).
		setCohort(1, none, &seedQuota{5, none, none}, nil).
		setClusterQueue(0, 0, &seedQuota{10, none, none}, &seedQuota{3, none, none}).
		admit(0, 4, 2).
		moveCohort(1, 0).admit(0, 1, 0).
		moveCohort(1, none).admit(0, 8, 1)))
	// A nested cohort with limits, a quota shrunk below usage, and an
	// explicit cohort deleted under its children.
	f.Add([]byte(fuzzInput{}.
		setCohort(0, none, &seedQuota{4, none, none}, nil).
		setCohort(1, 0, &seedQuota{6, 2, 10}, &seedQuota{2, none, 1}).
		setClusterQueue(0, 1, &seedQuota{5, none, none}, &seedQuota{5, none, none}).
		setClusterQueue(1, 1, &seedQuota{5, none, none}, nil).
		setClusterQueue(2, 0, &seedQuota{10, 3, 2}, nil).
		admit(0, 8, 3).admit(0, 7, 3).admit(2, 8, 0).admit(2, 7, 0).
		editClusterQueueQuota(0, 0, seedQuota{1, none, none}).
		admit(1, 1, 0).
		deleteCohort(1).finish(0).admit(1, 2, 2)))
	rng := rand.New(rand.NewPCG(7, 11))
	for range 8 {
		seed := make([]byte, 64+rng.IntN(256))
		for i := range seed {
			seed[i] = byte(rng.UintN(256))
		}
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		runOps(t, data)
	})
}

// TestTreeRandomOperations runs the fuzz target's checks over a fixed,
// pseudo-random sequence of operations, so plain `go test` covers them.
func TestTreeRandomOperations(t *testing.T) {
	rng := rand.New(rand.NewPCG(2024, 42))
	ops := 0
	for range 30 {
		data := make([]byte, 1200)
		for i := range data {
			data[i] = byte(rng.UintN(256))
		}
		ops += runOps(t, data)
	}
	if ops < 3000 {
		t.Fatalf("ran %d operations, want at least 3000", ops)
	}
}

// runOps decodes data into operations, applies each to a fresh Tree and
// refTree, checks the properties after each, and returns how many ran.
func runOps(t *testing.T, data []byte) int {
	h := &harness{tb: t, tree: NewTree(), ref: newRefTree()}
	in := &opReader{data: data}
	n := 0
	for ; n < maxFuzzOps && in.more(); n++ {
		h.step(in)
		h.checkFigures()
	}
	return n
}

type opReader struct{ data []byte }

func (r *opReader) more() bool { return len(r.data) > 0 }

// next returns the next byte, or 0 once the input is used up.
func (r *opReader) next() byte {
	if len(r.data) == 0 {
		return 0
	}
	b := r.data[0]
	r.data = r.data[1:]
	return b
}

func (r *opReader) intn(n int) int { return int(r.next()) % n }

func (r *opReader) queue() string { return fuzzQueues[r.intn(len(fuzzQueues))] }

func (r *opReader) cohort() string { return fuzzCohorts[r.intn(len(fuzzCohorts))] }

// cohortOrNone returns a cohort name or, one time in five, "".
func (r *opReader) cohortOrNone() string {
	if i := r.intn(len(fuzzCohorts) + 1); i < len(fuzzCohorts) {
		return fuzzCohorts[i]
	}
	return ""
}

// parentOrNone returns a cohort's parent: "" half of the time, so that
// trees grow deep more often than cohorts form loops.
func (r *opReader) parentOrNone() string {
	if i := r.intn(2 * len(fuzzCohorts)); i < len(fuzzCohorts) {
		return fuzzCohorts[i]
	}
	return ""
}

func (r *opReader) amount() int64 { return int64(r.intn(21)) }

func (r *opReader) limit() *int64 {
	if r.intn(2) == 0 {
		return nil
	}
	v := r.amount()
	return &v
}

func (r *opReader) quota() Quota {
	return Quota{Nominal: r.amount(), BorrowingLimit: r.limit(), LendingLimit: r.limit()}
}

func (r *opReader) quotas() map[FR]Quota {
	out := map[FR]Quota{}
	for _, fr := range fuzzFRs {
		if r.intn(4) != 0 {
			out[fr] = r.quota()
		}
	}
	return out
}

func (r *opReader) request() map[FR]int64 {
	out := map[FR]int64{}
	for _, fr := range fuzzFRs {
		if a := int64(r.intn(9)); a > 0 {
			out[fr] = a
		}
	}
	return out
}

type admission struct {
	cq string
	u  map[FR]int64
}

type harness struct {
	tb       testing.TB
	tree     *Tree
	ref      *refTree
	admitted []admission
	log      []string
}

func (h *harness) fatalf(format string, args ...any) {
	h.tb.Helper()
	h.tb.Fatalf("%s\noperations:\n  %s", fmt.Sprintf(format, args...), strings.Join(h.log, "\n  "))
}

func (h *harness) logf(format string, args ...any) {
	h.log = append(h.log, fmt.Sprintf(format, args...))
}

type opKind int

const (
	opSetClusterQueue opKind = iota
	opSetCohort
	opDeleteClusterQueue
	opDeleteCohort
	opAdmit
	opFinish
	opEditClusterQueueQuota
	opEditCohortQuota
	opMoveClusterQueue
	opMoveCohort
)

// opKinds maps an operation byte (mod 16) to its kind, weighting
// admissions so that queues often borrow.
var opKinds = [16]opKind{
	opSetClusterQueue, opSetClusterQueue, opSetCohort, opDeleteClusterQueue, opDeleteCohort,
	opAdmit, opAdmit, opAdmit, opAdmit, opAdmit, opAdmit, opFinish,
	opEditClusterQueueQuota, opEditCohortQuota, opMoveClusterQueue, opMoveCohort,
}

func (h *harness) step(in *opReader) {
	switch opKinds[in.intn(len(opKinds))] {
	case opSetClusterQueue:
		h.setClusterQueue(in.queue(), in.cohortOrNone(), in.quotas())
	case opSetCohort:
		h.setCohort(in.cohort(), in.parentOrNone(), in.quotas())
	case opDeleteClusterQueue:
		h.deleteClusterQueue(in.queue())
	case opDeleteCohort:
		h.deleteCohort(in.cohort())
	case opAdmit:
		h.admit(in.queue(), in.request())
	case opFinish:
		h.finish(in.intn(256))
	case opEditClusterQueueQuota:
		name, fr, q := in.queue(), fuzzFRs[in.intn(len(fuzzFRs))], in.quota()
		if spec, ok := h.ref.cqs[name]; ok {
			h.setClusterQueue(name, spec.parent, withQuota(spec.quotas, fr, q))
		}
	case opEditCohortQuota:
		name, fr, q := in.cohort(), fuzzFRs[in.intn(len(fuzzFRs))], in.quota()
		spec := h.ref.cohorts[name]
		h.setCohort(name, spec.parent, withQuota(spec.quotas, fr, q))
	case opMoveClusterQueue:
		name, cohort := in.queue(), in.cohortOrNone()
		if spec, ok := h.ref.cqs[name]; ok {
			h.setClusterQueue(name, cohort, spec.quotas)
		}
	case opMoveCohort:
		name, parent := in.cohort(), in.parentOrNone()
		h.setCohort(name, parent, h.ref.cohorts[name].quotas)
	}
}

func withQuota(quotas map[FR]Quota, fr FR, q Quota) map[FR]Quota {
	out := maps.Clone(quotas)
	if out == nil {
		out = map[FR]Quota{}
	}
	out[fr] = q
	return out
}

func (h *harness) setClusterQueue(name, cohort string, quotas map[FR]Quota) {
	h.logf("SetClusterQueue(%s, %q, %s)", name, cohort, formatQuotas(quotas))
	h.tree.SetClusterQueue(name, cohort, quotas)
	h.ref.cqs[name] = refSpec{parent: cohort, quotas: cloneQuotas(quotas)}
}

func (h *harness) setCohort(name, parent string, quotas map[FR]Quota) {
	h.logf("SetCohort(%s, %q, %s)", name, parent, formatQuotas(quotas))
	h.tree.SetCohort(name, parent, quotas)
	h.ref.cohorts[name] = refSpec{parent: parent, quotas: cloneQuotas(quotas)}
}

func (h *harness) deleteClusterQueue(name string) {
	h.logf("DeleteClusterQueue(%s)", name)
	h.tree.DeleteClusterQueue(name)
	delete(h.ref.cqs, name)
	delete(h.ref.usage, name)
	h.admitted = slices.DeleteFunc(h.admitted, func(a admission) bool { return a.cq == name })
}

func (h *harness) deleteCohort(name string) {
	h.logf("DeleteCohort(%s)", name)
	h.tree.DeleteCohort(name)
	delete(h.ref.cohorts, name)
}

// admit adds request to cq if it fits, checking Fits and Borrowing against
// the refTree, tightness (c) beforehand and non-increase (b) afterwards.
func (h *harness) admit(cq string, request map[FR]int64) {
	h.logf("admit(%s, %v)", cq, request)
	h.checkTight(cq)
	want := h.ref.fits(cq, request)
	if got := h.tree.Fits(cq, request); got != want {
		h.fatalf("Fits(%s, %v) = %v, want %v", cq, request, got, want)
	}
	for fr, amount := range request {
		if got, want := h.tree.Borrowing(cq, fr, amount), h.ref.borrowing(cq, fr, amount); got != want {
			h.fatalf("Borrowing(%s, %v, %d) = %v, want %v", cq, fr, amount, got, want)
		}
	}
	if !want {
		return
	}
	before := h.ref.violations()
	h.tree.AddUsage(cq, request)
	h.ref.addUsage(cq, request, 1)
	h.admitted = append(h.admitted, admission{cq: cq, u: request})
	h.checkNoWorse(before, "admission")
}

// finish removes an earlier admission, which must not worsen anything either.
func (h *harness) finish(pick int) {
	if len(h.admitted) == 0 {
		return
	}
	a := h.admitted[pick%len(h.admitted)]
	h.admitted = slices.Delete(h.admitted, pick%len(h.admitted), pick%len(h.admitted)+1)
	h.logf("finish(%s, %v)", a.cq, a.u)
	before := h.ref.violations()
	h.tree.RemoveUsage(a.cq, a.u)
	h.ref.addUsage(a.cq, a.u, -1)
	h.checkNoWorse(before, "finish")
}

func (h *harness) checkNoWorse(before map[string]int64, what string) {
	for k, v := range h.ref.violations() {
		if v > before[k] {
			h.fatalf("%s made %s worse: %d -> %d", what, k, before[k], v)
		}
	}
}

// checkTight checks (c) for cq, on copies of the refTree.
func (h *harness) checkTight(cq string) {
	if _, ok := h.ref.cqs[cq]; !ok || h.ref.cqCycle(cq) != nil || totalOf(h.ref.violations()) > 0 {
		return
	}
	for _, fr := range fuzzFRs {
		avail := h.tree.Available(cq, fr)
		if v := h.ref.withUsage(cq, fr, avail).violations(); totalOf(v) > 0 {
			h.fatalf("taking Available(%s, %v) = %d would violate %v", cq, fr, avail, positive(v))
		}
		if v := h.ref.withUsage(cq, fr, avail+1).violations(); totalOf(v) == 0 {
			h.fatalf("Available(%s, %v) = %d is not tight: one more unit violates nothing", cq, fr, avail)
		}
	}
}

func positive(v map[string]int64) map[string]int64 {
	out := maps.Clone(v)
	maps.DeleteFunc(out, func(_ string, x int64) bool { return x <= 0 })
	return out
}

func totalOf(v map[string]int64) int64 {
	var sum int64
	for _, x := range v {
		sum += x
	}
	return sum
}

// checkFigures checks (a) for every name the operations use, existing or not.
func (h *harness) checkFigures() {
	for _, fr := range fuzzFRs {
		for _, c := range fuzzCohorts {
			id := refID{cohort: true, name: c}
			h.expect("CohortUsage", c, fr, h.tree.CohortUsage(c, fr), h.ref.figure(id, fr, h.ref.usageOf))
			h.expect("CohortSubtreeQuota", c, fr, h.tree.CohortSubtreeQuota(c, fr), h.ref.figure(id, fr, h.ref.subtree))
			h.expect("CohortLent", c, fr, h.tree.CohortLent(c, fr), h.ref.figure(id, fr, h.ref.lent))
		}
		for _, q := range fuzzQueues {
			id := refID{name: q}
			h.expect("Usage", q, fr, h.tree.Usage(q, fr), h.ref.figure(id, fr, h.ref.usageOf))
			h.expect("Available", q, fr, h.tree.Available(q, fr), h.ref.cqAvailable(q, fr))
			h.expect("PotentialAvailable", q, fr, h.tree.PotentialAvailable(q, fr), h.ref.cqPotential(q, fr))
			h.expect("Borrowed", q, fr, h.tree.Borrowed(q, fr), h.ref.borrowed(q, fr))
			h.expect("Lent", q, fr, h.tree.Lent(q, fr), h.ref.figure(id, fr, h.ref.lent))
			// Explain's figures are the ones it explains.
			l := h.tree.Explain(q, fr)
			h.expect("Explain.Available", q, fr, l.Available, h.ref.cqAvailable(q, fr))
			h.expect("Explain.Potential", q, fr, l.Potential, h.ref.cqPotential(q, fr))
		}
	}
	for _, q := range fuzzQueues {
		if got, want := h.tree.Cycle(q), h.ref.cqCycle(q); !slices.Equal(got, want) {
			h.fatalf("Cycle(%s) = %v, want %v", q, got, want)
		}
	}
}

func (h *harness) expect(what, name string, fr FR, got, want int64) {
	if got != want {
		h.fatalf("%s(%s, %v) = %d, want %d", what, name, fr, got, want)
	}
}

func cloneQuotas(quotas map[FR]Quota) map[FR]Quota {
	out := make(map[FR]Quota, len(quotas))
	for fr, q := range quotas {
		out[fr] = Quota{Nominal: q.Nominal, BorrowingLimit: cloneLimit(q.BorrowingLimit), LendingLimit: cloneLimit(q.LendingLimit)}
	}
	return out
}

func cloneLimit(p *int64) *int64 {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

func formatQuotas(quotas map[FR]Quota) string {
	var parts []string
	for _, fr := range fuzzFRs {
		q, ok := quotas[fr]
		if !ok {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s:{%d bl=%s ll=%s}", fr.Flavor, q.Nominal, formatLimit(q.BorrowingLimit), formatLimit(q.LendingLimit)))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func formatLimit(p *int64) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprint(*p)
}

// refTree is a brute-force model of a cohort tree: the raw definitions and
// per-queue usage, with every figure recomputed from scratch on each call by
// following the definitions literally. It shares no state or code with Tree.
type refTree struct {
	cqs     map[string]refSpec
	cohorts map[string]refSpec // explicit cohorts only
	usage   map[string]map[FR]int64
}

type refSpec struct {
	parent string
	quotas map[FR]Quota
}

type refID struct {
	cohort bool
	name   string
}

func (id refID) String() string {
	if id.cohort {
		return "cohort " + id.name
	}
	return "queue " + id.name
}

func newRefTree() *refTree {
	return &refTree{cqs: map[string]refSpec{}, cohorts: map[string]refSpec{}, usage: map[string]map[FR]int64{}}
}

func (r *refTree) addUsage(cq string, u map[FR]int64, sign int64) {
	if _, ok := r.cqs[cq]; !ok {
		return
	}
	if r.usage[cq] == nil {
		r.usage[cq] = map[FR]int64{}
	}
	for fr, a := range u {
		r.usage[cq][fr] = max(0, r.usage[cq][fr]+sign*a)
	}
}

// withUsage returns a copy of r in which cq holds delta more of fr.
func (r *refTree) withUsage(cq string, fr FR, delta int64) *refTree {
	c := *r
	c.usage = maps.Clone(r.usage)
	c.usage[cq] = maps.Clone(r.usage[cq])
	if c.usage[cq] == nil {
		c.usage[cq] = map[FR]int64{}
	}
	c.usage[cq][fr] += delta
	return &c
}

// cohortNames are the explicit cohorts and every name a queue or an
// explicit cohort uses as its parent.
func (r *refTree) cohortNames() []string {
	set := map[string]bool{}
	for name, s := range r.cohorts {
		set[name] = true
		if s.parent != "" {
			set[s.parent] = true
		}
	}
	for _, s := range r.cqs {
		if s.parent != "" {
			set[s.parent] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// exists reports whether id is a queue, an explicit cohort, or a cohort
// some queue or explicit cohort names as its parent.
func (r *refTree) exists(id refID) bool {
	if !id.cohort {
		_, ok := r.cqs[id.name]
		return ok
	}
	if _, ok := r.cohorts[id.name]; ok {
		return true
	}
	for _, s := range r.cqs {
		if s.parent == id.name {
			return true
		}
	}
	for _, s := range r.cohorts {
		if s.parent == id.name {
			return true
		}
	}
	return false
}

// inLoop reports whether following parents from cohort c leads back to c.
// Only explicit cohorts have parents, so a loop is at most that long.
func (r *refTree) inLoop(c string) bool {
	p := r.cohorts[c].parent
	for range len(r.cohorts) + 1 {
		if p == "" {
			return false
		}
		if p == c {
			return true
		}
		p = r.cohorts[p].parent
	}
	return false
}

// cohortCycle is the sorted loop cohort c's parent chain runs into, or nil.
func (r *refTree) cohortCycle(c string) []string {
	for range len(r.cohorts) + 2 {
		if c == "" {
			return nil
		}
		if r.inLoop(c) {
			loop := []string{c}
			for p := r.cohorts[c].parent; p != c; p = r.cohorts[p].parent {
				loop = append(loop, p)
			}
			slices.Sort(loop)
			return loop
		}
		c = r.cohorts[c].parent
	}
	return nil
}

func (r *refTree) cqCycle(cq string) []string {
	s, ok := r.cqs[cq]
	if !ok || s.parent == "" {
		return nil
	}
	return r.cohortCycle(s.parent)
}

func (r *refTree) quota(id refID, fr FR) Quota {
	if id.cohort {
		return r.cohorts[id.name].quotas[fr]
	}
	return r.cqs[id.name].quotas[fr]
}

// parent is id's usable parent: a queue's cohort, or a cohort's parent
// unless the cohort is part of a loop.
func (r *refTree) parent(id refID) (refID, bool) {
	if !id.cohort {
		p := r.cqs[id.name].parent
		return refID{cohort: true, name: p}, p != ""
	}
	p := r.cohorts[id.name].parent
	if p == "" || r.inLoop(id.name) {
		return refID{}, false
	}
	return refID{cohort: true, name: p}, true
}

func (r *refTree) children(c string) []refID {
	var out []refID
	for name, s := range r.cqs {
		if s.parent == c {
			out = append(out, refID{name: name})
		}
	}
	for name := range r.cohorts {
		if p, ok := r.parent(refID{cohort: true, name: name}); ok && p.name == c {
			out = append(out, refID{cohort: true, name: name})
		}
	}
	return out
}

func (r *refTree) subtree(id refID, fr FR) int64 {
	sq := r.quota(id, fr).Nominal
	if id.cohort {
		for _, c := range r.children(id.name) {
			sq += r.subtree(c, fr) - r.local(c, fr)
		}
	}
	return sq
}

func (r *refTree) local(id refID, fr FR) int64 {
	ll := r.quota(id, fr).LendingLimit
	if ll == nil {
		return 0
	}
	return max(0, r.subtree(id, fr)-*ll)
}

func (r *refTree) usageOf(id refID, fr FR) int64 {
	if !id.cohort {
		return r.usage[id.name][fr]
	}
	var u int64
	for _, c := range r.children(id.name) {
		u += max(0, r.usageOf(c, fr)-r.local(c, fr))
	}
	return u
}

func (r *refTree) available(id refID, fr FR) int64 {
	sq, u := r.subtree(id, fr), r.usageOf(id, fr)
	p, ok := r.parent(id)
	if !ok {
		return sq - u
	}
	loc := r.local(id, fr)
	fromParent := r.available(p, fr)
	if bl := r.quota(id, fr).BorrowingLimit; bl != nil {
		fromParent = min(fromParent, sq-loc-max(0, u-loc)+*bl)
	}
	return max(0, loc-u) + max(0, fromParent)
}

func (r *refTree) potential(id refID, fr FR) int64 {
	p, ok := r.parent(id)
	if !ok {
		return r.subtree(id, fr)
	}
	pot := r.local(id, fr) + r.potential(p, fr)
	if bl := r.quota(id, fr).BorrowingLimit; bl != nil {
		pot = min(pot, r.subtree(id, fr)+*bl)
	}
	return pot
}

func (r *refTree) lent(id refID, fr FR) int64 {
	p, ok := r.parent(id)
	if !ok {
		return 0
	}
	lendable := r.subtree(id, fr) - r.local(id, fr)
	own := max(0, r.usageOf(id, fr)-r.local(id, fr))
	free := max(0, r.subtree(p, fr)-r.usageOf(p, fr))
	return max(0, lendable-own-free)
}

// figure is f for an existing node, 0 for an unknown one.
func (r *refTree) figure(id refID, fr FR, f func(refID, FR) int64) int64 {
	if !r.exists(id) {
		return 0
	}
	return f(id, fr)
}

func (r *refTree) cqAvailable(cq string, fr FR) int64 {
	if _, ok := r.cqs[cq]; !ok || r.cqCycle(cq) != nil {
		return 0
	}
	return max(0, r.available(refID{name: cq}, fr))
}

func (r *refTree) cqPotential(cq string, fr FR) int64 {
	if _, ok := r.cqs[cq]; !ok || r.cqCycle(cq) != nil {
		return 0
	}
	return max(0, r.potential(refID{name: cq}, fr))
}

func (r *refTree) fits(cq string, request map[FR]int64) bool {
	if _, ok := r.cqs[cq]; !ok || r.cqCycle(cq) != nil {
		return false
	}
	for fr, a := range request {
		if a > r.cqAvailable(cq, fr) {
			return false
		}
	}
	return true
}

func (r *refTree) borrowing(cq string, fr FR, request int64) bool {
	s, ok := r.cqs[cq]
	return ok && s.parent != "" && r.usage[cq][fr]+request > s.quotas[fr].Nominal
}

func (r *refTree) borrowed(cq string, fr FR) int64 {
	s, ok := r.cqs[cq]
	if !ok || s.parent == "" {
		return 0
	}
	return max(0, r.usage[cq][fr]-s.quotas[fr].Nominal)
}

// violations measures, per constraint and FR, how far usage exceeds what
// the tree allows (0 when within):
//
//   - "pool": a node without usable parent (a queue without cohort, a root
//     cohort, a cohort in a loop) uses at most its subtree quota;
//   - "borrowing": a node with a usable parent and a borrowing limit BL
//     holds at most lendable + BL in its parent's pool, that is
//     max(0, usage − local) − (subtree − local) ≤ BL.
//
// Nodes with a parent and no borrowing limit are bounded by their
// ancestors' constraints, into whose pools their excess usage flows.
func (r *refTree) violations() map[string]int64 {
	out := map[string]int64{}
	var nodes []refID
	for name := range r.cqs {
		nodes = append(nodes, refID{name: name})
	}
	for _, name := range r.cohortNames() {
		nodes = append(nodes, refID{cohort: true, name: name})
	}
	for _, id := range nodes {
		for _, fr := range fuzzFRs {
			sq, u := r.subtree(id, fr), r.usageOf(id, fr)
			if _, ok := r.parent(id); !ok {
				out[fmt.Sprintf("pool of %v in %s", id, fr.Flavor)] = max(0, u-sq)
				continue
			}
			if bl := r.quota(id, fr).BorrowingLimit; bl != nil {
				loc := r.local(id, fr)
				out[fmt.Sprintf("borrowing of %v in %s", id, fr.Flavor)] = max(0, max(0, u-loc)-(sq-loc)-*bl)
			}
		}
	}
	return out
}

// fuzzInput encodes operations the way opReader decodes them, to write
// readable seeds. Queues and cohorts are indexes into fuzzQueues and
// fuzzCohorts; -1 means no cohort, and no limit in a seedQuota.
type fuzzInput []byte

type seedQuota struct{ nominal, borrowingLimit, lendingLimit int }

func (b fuzzInput) op(kind opKind, args ...byte) fuzzInput {
	return append(append(b, byte(slices.Index(opKinds[:], kind))), args...)
}

func cohortByte(i int) byte {
	if i < 0 {
		return byte(len(fuzzCohorts))
	}
	return byte(i)
}

func (q seedQuota) bytes() []byte {
	out := []byte{byte(q.nominal)}
	for _, l := range []int{q.borrowingLimit, q.lendingLimit} {
		if l < 0 {
			out = append(out, 0)
		} else {
			out = append(out, 1, byte(l))
		}
	}
	return out
}

// quotaBytes encodes one optional quota per FR of fuzzFRs.
func quotaBytes(perFR ...*seedQuota) []byte {
	var out []byte
	for _, q := range perFR {
		if q == nil {
			out = append(out, 0)
			continue
		}
		out = append(out, 1)
		out = append(out, q.bytes()...)
	}
	return out
}

func (b fuzzInput) setClusterQueue(q, cohort int, perFR ...*seedQuota) fuzzInput {
	return b.op(opSetClusterQueue, append([]byte{byte(q), cohortByte(cohort)}, quotaBytes(perFR...)...)...)
}

func (b fuzzInput) setCohort(c, parent int, perFR ...*seedQuota) fuzzInput {
	return b.op(opSetCohort, append([]byte{byte(c), cohortByte(parent)}, quotaBytes(perFR...)...)...)
}

func (b fuzzInput) deleteCohort(c int) fuzzInput { return b.op(opDeleteCohort, byte(c)) }

func (b fuzzInput) admit(q int, perFR ...int) fuzzInput {
	args := []byte{byte(q)}
	for _, a := range perFR {
		args = append(args, byte(a))
	}
	return b.op(opAdmit, args...)
}

func (b fuzzInput) finish(pick int) fuzzInput { return b.op(opFinish, byte(pick)) }

func (b fuzzInput) editClusterQueueQuota(q, fr int, quota seedQuota) fuzzInput {
	return b.op(opEditClusterQueueQuota, append([]byte{byte(q), byte(fr)}, quota.bytes()...)...)
}

func (b fuzzInput) moveCohort(c, parent int) fuzzInput {
	return b.op(opMoveCohort, byte(c), cohortByte(parent))
}
