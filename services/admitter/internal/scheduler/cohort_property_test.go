package scheduler

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/services/admitter/internal/quota"
)

// TestCohortRandomOperations drives a Scheduler with random operations —
// workloads created in random queues, cycles whose reservations are written
// back (some of them later, or never: the write is lost), finishes,
// evictions, edits of the quotas and limits of ClusterQueues
// and Cohorts, queues joining and leaving cohorts, Cohorts moving (loops
// included) and deleted — over 5 ClusterQueues and 3 Cohorts, and checks
// against a brute-force model of the cohort tree (shadowTree, below) that:
//
//   - no reservation of a cycle, replayed in the order the cycle made them,
//     makes any constraint of the tree more violated than it was: a node
//     without usable parent holds at most its subtree quota, a node with a
//     borrowingLimit holds at most what it lends plus the limit in its
//     parent's pool (lending limits are in the definitions: what a node
//     keeps is in no pool). Edits may leave usage above a shrunk quota;
//     then a reservation must not add to the excess;
//   - no reservation is made in a queue that cannot admit (below a loop of
//     Cohorts, or a lendingLimit above its nominal quota);
//   - each pod set's recorded borrowed amount is what it took beyond the
//     queue's nominal quota, counting the usage at that moment and the
//     earlier pod sets of the workload; Borrowing says whether any did;
//   - the statuses report the usage each queue holds, what it borrows and
//     lends, and for each Cohort object the total below it, what it borrows
//     and lends, and whether it is below a loop;
//   - after a cycle that left nothing untried, no pending workload (of one
//     pod set) of a queue that can admit fits what the model says is
//     available: quota freed anywhere in a tree was offered to every queue
//     of the tree;
//   - once every workload is gone, a workload that fits the empty tree is
//     admitted by the next cycle.
//
// The seeds are fixed, plus one taken from the clock, logged on failure.
func TestCohortRandomOperations(t *testing.T) {
	seeds := []uint64{1, 2, 3, 5, 8, 13, 21, 34, 55, 89}
	seeds = append(seeds, uint64(time.Now().UnixNano()))
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			runShadowed(t, seed, 1000)
		})
	}
}

var (
	shadowQueues  = []string{"q0", "q1", "q2", "q3", "q4"}
	shadowCohorts = []string{"c0", "c1", "c2"}
	shadowFlavors = []string{"f", "g"}
	shadowRes     = []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory}
)

// Amounts in the shadow model are in millicores for cpu and in MiB for
// memory; every quantity the test makes is a whole number of these.
const mib = 1 << 20

func shadowAmount(res corev1.ResourceName, q resource.Quantity) int64 {
	if res == corev1.ResourceCPU {
		return q.MilliValue()
	}
	return q.Value() / mib
}

func shadowQuantity(res corev1.ResourceName, amount int64) resource.Quantity {
	if res == corev1.ResourceCPU {
		return *resource.NewMilliQuantity(amount, resource.DecimalSI)
	}
	return *resource.NewQuantity(amount*mib, resource.BinarySI)
}

// shadowLimits is what a node declares for one flavor and resource.
type shadowLimits struct {
	nominal            int64
	borrowing, lending *int64
}

// shadowNode is a ClusterQueue (parent: its cohort) or an explicit
// Cohort (parent: its parent).
type shadowNode struct {
	parent string
	limits map[quota.FR]shadowLimits
	// flavors are the flavors a ClusterQueue lists, in order.
	flavors []string
}

// shadowTree is a brute-force model of the cohort tree: the raw
// declarations and what each queue holds, every figure recomputed from
// the definitions on each call.
type shadowTree struct {
	queues  map[string]*shadowNode
	cohorts map[string]*shadowNode // explicit Cohorts
	held    map[string]map[quota.FR]int64
}

// id names a node: a queue, or a cohort with the "cohort/" prefix.
func cohortID(name string) string { return "cohort/" + name }

func (m *shadowTree) isCohort(id string) bool { return strings.HasPrefix(id, "cohort/") }

func (m *shadowTree) node(id string) *shadowNode {
	if m.isCohort(id) {
		return m.cohorts[strings.TrimPrefix(id, "cohort/")]
	}
	return m.queues[id]
}

func (m *shadowTree) limits(id string, fr quota.FR) shadowLimits {
	if n := m.node(id); n != nil {
		return n.limits[fr]
	}
	return shadowLimits{}
}

// declaredParent is the cohort a queue names, or the parent an explicit
// Cohort names; "" for an implicit Cohort.
func (m *shadowTree) declaredParent(id string) string {
	if n := m.node(id); n != nil {
		return n.parent
	}
	return ""
}

// inLoop reports whether following parents from Cohort c comes back to c.
func (m *shadowTree) inLoop(c string) bool {
	p := m.declaredParent(cohortID(c))
	for range len(m.cohorts) + 1 {
		switch p {
		case "":
			return false
		case c:
			return true
		}
		p = m.declaredParent(cohortID(p))
	}
	return false
}

// chain is the Cohorts above a queue, nearest first, up to the root or
// the first member of a loop.
func (m *shadowTree) chain(q string) []string {
	var out []string
	for c := m.queues[q].parent; c != ""; c = m.declaredParent(cohortID(c)) {
		out = append(out, c)
		if m.inLoop(c) {
			break
		}
	}
	return out
}

// belowLoop reports whether a queue's chain of Cohorts runs into a loop.
func (m *shadowTree) belowLoop(q string) bool {
	ch := m.chain(q)
	return len(ch) > 0 && m.inLoop(ch[len(ch)-1])
}

// cohortBelowLoop is belowLoop for a Cohort.
func (m *shadowTree) cohortBelowLoop(c string) bool {
	for range len(m.cohorts) + 2 {
		if c == "" {
			return false
		}
		if m.inLoop(c) {
			return true
		}
		c = m.declaredParent(cohortID(c))
	}
	return false
}

// parent is the usable parent of a node: a queue's cohort; a Cohort's
// parent unless the Cohort is in a loop.
func (m *shadowTree) parent(id string) (string, bool) {
	p := m.declaredParent(id)
	if p == "" || (m.isCohort(id) && m.inLoop(strings.TrimPrefix(id, "cohort/"))) {
		return "", false
	}
	return cohortID(p), true
}

// children are the nodes whose usable parent is Cohort c.
func (m *shadowTree) children(c string) []string {
	var out []string
	for name, q := range m.queues {
		if q.parent == c {
			out = append(out, name)
		}
	}
	for name, n := range m.cohorts {
		if n.parent == c && !m.inLoop(name) {
			out = append(out, cohortID(name))
		}
	}
	return out
}

// subtree is a node's quota: a queue's nominal, a Cohort's own plus what
// its children lend it.
func (m *shadowTree) subtree(id string, fr quota.FR) int64 {
	total := m.limits(id, fr).nominal
	if m.isCohort(id) {
		for _, ch := range m.children(strings.TrimPrefix(id, "cohort/")) {
			total += m.lendable(ch, fr)
		}
	}
	return total
}

// kept is the part of a node's subtree quota its lendingLimit keeps out
// of the parent's pool.
func (m *shadowTree) kept(id string, fr quota.FR) int64 {
	ll := m.limits(id, fr).lending
	if ll == nil {
		return 0
	}
	return max(0, m.subtree(id, fr)-*ll)
}

func (m *shadowTree) lendable(id string, fr quota.FR) int64 {
	return m.subtree(id, fr) - m.kept(id, fr)
}

// usage is what a queue holds, or what a Cohort's children hold in its
// pool.
func (m *shadowTree) usage(id string, fr quota.FR) int64 {
	if !m.isCohort(id) {
		return m.held[id][fr]
	}
	var total int64
	for _, ch := range m.children(strings.TrimPrefix(id, "cohort/")) {
		total += m.inPool(ch, fr)
	}
	return total
}

// inPool is what a node holds in its parent's pool: its usage beyond
// what it keeps.
func (m *shadowTree) inPool(id string, fr quota.FR) int64 {
	return max(0, m.usage(id, fr)-m.kept(id, fr))
}

// allNodes are the queues and every Cohort, explicit or named.
func (m *shadowTree) allNodes() []string {
	set := map[string]bool{}
	for name, q := range m.queues {
		set[name] = true
		if q.parent != "" {
			set[cohortID(q.parent)] = true
		}
	}
	for name, c := range m.cohorts {
		set[cohortID(name)] = true
		if c.parent != "" {
			set[cohortID(c.parent)] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

func shadowFRs() []quota.FR {
	var out []quota.FR
	for _, f := range shadowFlavors {
		for _, r := range shadowRes {
			out = append(out, quota.FR{Flavor: f, Resource: r})
		}
	}
	return out
}

// violations is, per constraint, how far usage is beyond it (0 within).
func (m *shadowTree) violations() map[string]int64 {
	out := map[string]int64{}
	for _, id := range m.allNodes() {
		for _, fr := range shadowFRs() {
			if _, ok := m.parent(id); !ok {
				out[fmt.Sprintf("%s holds at most its quota of %s/%s", id, fr.Flavor, fr.Resource)] =
					max(0, m.usage(id, fr)-m.subtree(id, fr))
				continue
			}
			if bl := m.limits(id, fr).borrowing; bl != nil {
				out[fmt.Sprintf("%s holds at most what it lends plus its borrowingLimit of %s/%s in its parent's pool", id, fr.Flavor, fr.Resource)] =
					max(0, m.inPool(id, fr)-m.lendable(id, fr)-*bl)
			}
		}
	}
	return out
}

// available is how much more a node's subtree can take, following the
// definitions: the root's free quota, capped on the way down by each
// borrowingLimit, plus what each node keeps and does not use.
func (m *shadowTree) available(id string, fr quota.FR) int64 {
	p, ok := m.parent(id)
	if !ok {
		return m.subtree(id, fr) - m.usage(id, fr)
	}
	fromParent := m.available(p, fr)
	if bl := m.limits(id, fr).borrowing; bl != nil {
		fromParent = min(fromParent, m.lendable(id, fr)-m.inPool(id, fr)+*bl)
	}
	return max(0, m.kept(id, fr)-m.usage(id, fr)) + max(0, fromParent)
}

// lent is the part of a node's lendable quota others must be holding.
func (m *shadowTree) lent(id string, fr quota.FR) int64 {
	p, ok := m.parent(id)
	if !ok {
		return 0
	}
	free := max(0, m.subtree(p, fr)-m.usage(p, fr))
	return max(0, m.lendable(id, fr)-m.inPool(id, fr)-free)
}

// totalBelow is what the queues below Cohort c hold (a loop's other
// members' subtrees not included).
func (m *shadowTree) totalBelow(c string, fr quota.FR) int64 {
	var total int64
	for q := range m.queues {
		if slices.Contains(m.chain(q), c) {
			total += m.held[q][fr]
		}
	}
	return total
}

// canAdmit reports whether a queue is active: not below a loop, and no
// lendingLimit above its nominal quota.
func (m *shadowTree) canAdmit(q string) bool {
	if m.belowLoop(q) {
		return false
	}
	for _, l := range m.queues[q].limits {
		if l.lending != nil && *l.lending > l.nominal {
			return false
		}
	}
	return true
}

func (m *shadowTree) add(q string, amounts map[quota.FR]int64, sign int64) {
	if m.held[q] == nil {
		m.held[q] = map[quota.FR]int64{}
	}
	for fr, a := range amounts {
		m.held[q][fr] += sign * a
	}
}

// shadowPodSet is one pod set of a generated workload.
type shadowPodSet struct {
	count    int32
	requests map[corev1.ResourceName]int64
}

type shadowWorkload struct {
	latest  *v1alpha1.Workload
	podSets []shadowPodSet
	// admitted: where it holds quota, and how much.
	queue   string
	amounts map[quota.FR]int64
	// assumed is the reservation while its write is not answered.
	assumed *Reservation
}

type shadowRun struct {
	t       *testing.T
	seed    uint64
	rng     *rand.Rand
	f       *fixture
	model   *shadowTree
	gen     map[string]int64
	cohorts map[string]bool // the Cohort objects the scheduler has
	wls     map[string]*shadowWorkload
	seq     int
	log     []string
	cycles  int
	admits  int
	borrows int
	// overUsed counts the reservations made while some constraint was
	// already violated (by an edit); loops the cycles run with a loop of
	// Cohorts.
	overUsed, loops int
}

func runShadowed(t *testing.T, seed uint64, ops int) {
	r := &shadowRun{
		t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, 0x5eed)),
		f:       newFixture(t),
		model:   &shadowTree{queues: map[string]*shadowNode{}, cohorts: map[string]*shadowNode{}, held: map[string]map[quota.FR]int64{}},
		gen:     map[string]int64{},
		cohorts: map[string]bool{},
		wls:     map[string]*shadowWorkload{},
	}
	r.f.s.SetFlavor(&v1alpha1.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: "g", UID: "g", Generation: 1}})
	// c1 is a child of c0; c2 is a root.
	r.setCohort("c0", "", r.cohortLimits(false))
	r.setCohort("c1", "c0", r.cohortLimits(true))
	r.setCohort("c2", "", r.cohortLimits(false))
	for i, q := range shadowQueues {
		r.setQueue(q, []string{"c1", "c1", "c0", "c2", "c2"}[i], r.queueFlavors(), nil)
		r.f.s.SetLocalQueue(&v1alpha1.LocalQueue{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "lq-" + q, UID: types.UID("lq-" + q), Generation: 1},
			Spec:       v1alpha1.LocalQueueSpec{ClusterQueue: q},
		})
	}
	for range ops {
		switch n := r.rng.IntN(100); {
		case n < 30:
			r.create()
		case n < 52:
			r.cycle()
		case n < 64:
			r.finish()
		case n < 70:
			r.evict()
		case n < 74:
			r.answer()
		case n < 79:
			q := r.pick(shadowQueues)
			r.setQueue(q, r.model.queues[q].parent, r.queueFlavors(), nil)
		case n < 84:
			q := r.pick(shadowQueues)
			r.setQueue(q, r.pick(append([]string{""}, shadowCohorts...)), nil, r.model.queues[q])
		case n < 90:
			c := r.pick(shadowCohorts)
			parent := r.declaredCohortParent(c)
			r.setCohort(c, parent, r.cohortLimits(parent != ""))
		case n < 95:
			c := r.pick(shadowCohorts)
			var parent string
			if r.rng.IntN(2) == 0 {
				parent = r.pick(shadowCohorts)
				if parent == c {
					parent = ""
				}
			}
			r.setCohort(c, parent, r.cohortLimits(parent != ""))
		default:
			r.deleteCohort(r.pick(shadowCohorts))
		}
	}
	r.cycle()
	r.checkLiveness()
	t.Logf("seed %d: %d cycles (%d with a loop of Cohorts), %d reservations (%d borrowing, %d with the tree over-used by an edit)",
		seed, r.cycles, r.loops, r.admits, r.borrows, r.overUsed)
}

func (r *shadowRun) fatalf(format string, args ...any) {
	r.t.Helper()
	from := max(0, len(r.log)-80)
	r.t.Fatalf("seed %d: %s\nlast operations:\n  %s", r.seed, fmt.Sprintf(format, args...), strings.Join(r.log[from:], "\n  "))
}

func (r *shadowRun) logf(format string, args ...any) {
	r.log = append(r.log, fmt.Sprintf(format, args...))
}

func (r *shadowRun) pick(from []string) string { return from[r.rng.IntN(len(from))] }

func (r *shadowRun) nextGen(key string) int64 {
	r.gen[key]++
	return r.gen[key]
}

func (r *shadowRun) declaredCohortParent(c string) string {
	if n := r.model.cohorts[c]; n != nil {
		return n.parent
	}
	return ""
}

// amountFor is a random quota amount of res: 0 to 8 cores in steps of
// 500m, or 0 to 2Gi in steps of 256Mi.
func (r *shadowRun) amountFor(res corev1.ResourceName) int64 {
	if res == corev1.ResourceCPU {
		return 500 * int64(r.rng.IntN(17))
	}
	return 256 * int64(r.rng.IntN(9))
}

// limitsFor is a random declaration; limits only when the node has a
// parent to borrow from or lend to. A lendingLimit is mostly at most the
// nominal quota, and above it now and then (which makes a ClusterQueue
// inactive).
func (r *shadowRun) limitsFor(res corev1.ResourceName, withLimits bool) shadowLimits {
	l := shadowLimits{nominal: r.amountFor(res)}
	if r.rng.IntN(3) == 0 {
		l.nominal = 0
	}
	if !withLimits {
		return l
	}
	if r.rng.IntN(2) == 0 {
		l.borrowing = ptr.To(r.amountFor(res))
	}
	switch r.rng.IntN(10) {
	case 0:
		l.lending = ptr.To(l.nominal + r.amountFor(res) + 1)
	case 1, 2, 3:
		if l.nominal > 0 {
			l.lending = ptr.To(r.rng.Int64N(l.nominal + 1))
		} else {
			l.lending = ptr.To(int64(0))
		}
	}
	return l
}

// cohortLimits is a Cohort's own pool: none half of the time; else, per
// flavor, nothing or every resource.
func (r *shadowRun) cohortLimits(withParent bool) map[quota.FR]shadowLimits {
	out := map[quota.FR]shadowLimits{}
	if r.rng.IntN(2) == 0 {
		return out
	}
	for _, fl := range shadowFlavors {
		if r.rng.IntN(3) == 0 {
			continue
		}
		for _, res := range shadowRes {
			l := r.limitsFor(res, withParent)
			if l.lending != nil && r.rng.IntN(2) == 0 {
				l.lending = nil
			}
			out[quota.FR{Flavor: fl, Resource: res}] = l
		}
	}
	return out
}

// queueFlavors returns a queue's flavors in order: f, or f and g, or g and f.
func (r *shadowRun) queueFlavors() []string {
	return [][]string{{"f"}, {"f", "g"}, {"g", "f"}}[r.rng.IntN(3)]
}

// setQueue records ClusterQueue q in cohort with quotas for flavors (new
// random ones), or with the declarations of keep.
func (r *shadowRun) setQueue(q, cohort string, flavors []string, keep *shadowNode) {
	n := &shadowNode{parent: cohort, limits: map[quota.FR]shadowLimits{}}
	if keep != nil {
		n.flavors, n.limits = keep.flavors, keep.limits
		if cohort == "" {
			// Limits need a cohort: leaving it drops them.
			n.limits = map[quota.FR]shadowLimits{}
			for fr, l := range keep.limits {
				n.limits[fr] = shadowLimits{nominal: l.nominal}
			}
		}
	} else {
		n.flavors = flavors
		for _, fl := range flavors {
			for _, res := range shadowRes {
				n.limits[quota.FR{Flavor: fl, Resource: res}] = r.limitsFor(res, cohort != "")
			}
		}
	}
	r.model.queues[q] = n
	obj := &v1alpha1.ClusterQueue{
		ObjectMeta: metav1.ObjectMeta{Name: q, UID: types.UID(q), Generation: r.nextGen("queue/" + q)},
		Spec: v1alpha1.ClusterQueueSpec{
			CohortName:     cohort,
			ResourceGroups: []v1alpha1.ResourceGroup{{CoveredResources: slices.Clone(shadowRes)}},
		},
	}
	for _, fl := range n.flavors {
		fq := v1alpha1.FlavorQuotas{Name: fl}
		for _, res := range shadowRes {
			fq.Resources = append(fq.Resources, resourceQuota(res, n.limits[quota.FR{Flavor: fl, Resource: res}]))
		}
		obj.Spec.ResourceGroups[0].Flavors = append(obj.Spec.ResourceGroups[0].Flavors, fq)
	}
	r.logf("set ClusterQueue %s: cohort %q, %s", q, cohort, describeLimits(n.flavors, n.limits))
	r.f.s.SetClusterQueue(obj)
}

func resourceQuota(res corev1.ResourceName, l shadowLimits) v1alpha1.ResourceQuota {
	rq := v1alpha1.ResourceQuota{Name: res, NominalQuota: shadowQuantity(res, l.nominal)}
	if l.borrowing != nil {
		rq.BorrowingLimit = ptr.To(shadowQuantity(res, *l.borrowing))
	}
	if l.lending != nil {
		rq.LendingLimit = ptr.To(shadowQuantity(res, *l.lending))
	}
	return rq
}

func describeLimits(flavors []string, limits map[quota.FR]shadowLimits) string {
	var parts []string
	show := func(p *int64) string {
		if p == nil {
			return "-"
		}
		return fmt.Sprint(*p)
	}
	for _, fl := range flavors {
		for _, res := range shadowRes {
			if l, ok := limits[quota.FR{Flavor: fl, Resource: res}]; ok {
				parts = append(parts, fmt.Sprintf("%s/%s=%d(bl %s, ll %s)", fl, res, l.nominal, show(l.borrowing), show(l.lending)))
			}
		}
	}
	return strings.Join(parts, " ")
}

func (r *shadowRun) setCohort(c, parent string, limits map[quota.FR]shadowLimits) {
	r.model.cohorts[c] = &shadowNode{parent: parent, limits: limits}
	r.cohorts[c] = true
	obj := &v1alpha1.Cohort{
		ObjectMeta: metav1.ObjectMeta{Name: c, UID: types.UID("cohort-" + c), Generation: r.nextGen("cohort/" + c)},
		Spec:       v1alpha1.CohortSpec{ParentName: parent},
	}
	var flavors []string
	for _, fl := range shadowFlavors {
		if _, ok := limits[quota.FR{Flavor: fl, Resource: shadowRes[0]}]; !ok {
			continue
		}
		if len(obj.Spec.ResourceGroups) == 0 {
			obj.Spec.ResourceGroups = []v1alpha1.ResourceGroup{{CoveredResources: slices.Clone(shadowRes)}}
		}
		fq := v1alpha1.FlavorQuotas{Name: fl}
		for _, res := range shadowRes {
			fq.Resources = append(fq.Resources, resourceQuota(res, limits[quota.FR{Flavor: fl, Resource: res}]))
		}
		obj.Spec.ResourceGroups[0].Flavors = append(obj.Spec.ResourceGroups[0].Flavors, fq)
		flavors = append(flavors, fl)
	}
	r.logf("set Cohort %s: parent %q, %s", c, parent, describeLimits(flavors, limits))
	r.f.s.SetCohort(obj)
}

func (r *shadowRun) deleteCohort(c string) {
	delete(r.model.cohorts, c)
	delete(r.cohorts, c)
	r.logf("delete Cohort %s", c)
	r.f.s.DeleteCohort(c)
}

// create adds a pending workload in a random queue: one or two pod sets
// of 1 to 3 pods, each asking for 500m to 2 cpu and up to 512Mi.
func (r *shadowRun) create() {
	r.seq++
	r.f.rv++
	name := fmt.Sprintf("w%04d", r.seq)
	q := r.pick(shadowQueues)
	sw := &shadowWorkload{}
	wl := &v1alpha1.Workload{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: name, UID: types.UID("uid-" + name), Generation: 1,
			ResourceVersion:   fmt.Sprint(r.f.rv),
			CreationTimestamp: metav1.NewTime(r.f.now.Add(time.Duration(r.rng.IntN(1000)) * time.Second)),
		},
		Spec: v1alpha1.WorkloadSpec{QueueName: "lq-" + q, Priority: ptr.To(int32(r.rng.IntN(3)))},
	}
	var desc []string
	for i := range 1 + r.rng.IntN(2) {
		ps := shadowPodSet{count: int32(1 + r.rng.IntN(3)), requests: map[corev1.ResourceName]int64{
			corev1.ResourceCPU: 500 * int64(1+r.rng.IntN(4)),
		}}
		if m := 256 * int64(r.rng.IntN(3)); m > 0 {
			ps.requests[corev1.ResourceMemory] = m
		}
		requests := corev1.ResourceList{}
		for res, a := range ps.requests {
			requests[res] = shadowQuantity(res, a)
		}
		wl.Spec.PodSets = append(wl.Spec.PodSets, v1alpha1.PodSet{
			Name: fmt.Sprintf("ps%d", i), Count: ps.count, Template: v1alpha1.PodSetTemplate{Requests: requests},
		})
		sw.podSets = append(sw.podSets, ps)
		desc = append(desc, fmt.Sprintf("%dx(cpu %dm, memory %dMi)", ps.count, ps.requests[corev1.ResourceCPU], ps.requests[corev1.ResourceMemory]))
	}
	sw.latest = wl
	r.wls[name] = sw
	r.logf("create %s in %s, priority %d: %s", name, q, *wl.Spec.Priority, strings.Join(desc, " + "))
	r.f.s.Observe(wl)
}

// admitted returns the names of the workloads holding quota whose
// reservation was written, sorted.
func (r *shadowRun) admitted() []string {
	var out []string
	for name, sw := range r.wls {
		if sw.queue != "" && sw.assumed == nil {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

func (r *shadowRun) finish() {
	names := r.admitted()
	if len(names) == 0 {
		return
	}
	name := r.pick(names)
	sw := r.wls[name]
	r.logf("finish %s (held %v in %s)", name, sw.amounts, sw.queue)
	r.model.add(sw.queue, sw.amounts, -1)
	delete(r.wls, name)
	r.f.s.Observe(r.f.next(sw.latest, finished))
}

// evict takes a workload's reservation away: it is pending again.
func (r *shadowRun) evict() {
	names := r.admitted()
	if len(names) == 0 {
		return
	}
	name := r.pick(names)
	sw := r.wls[name]
	r.logf("evict %s (held %v in %s)", name, sw.amounts, sw.queue)
	r.model.add(sw.queue, sw.amounts, -1)
	sw.queue, sw.amounts = "", nil
	sw.latest = r.f.next(sw.latest, func(wl *v1alpha1.Workload) {
		wl.Status.Admission = nil
		wl.Status.Conditions = nil
	})
	r.f.s.Observe(sw.latest)
}

// cycle runs a Cycle and checks each reservation, in order, against the
// model as it stood when the reservation was made; then writes the
// reservations back.
func (r *shadowRun) cycle() {
	r.cycles++
	for _, c := range shadowCohorts {
		if r.model.inLoop(c) {
			r.loops++
			break
		}
	}
	plan := r.f.cycle()
	r.logf("cycle: reserved %v", names(plan.Reservations))
	for _, res := range plan.Reservations {
		r.checkReservation(res)
	}
	r.checkStatuses()
	if !plan.More {
		r.checkNothingLeftThatFits()
	}
}

// checkNothingLeftThatFits: after a cycle that left nothing untried, no
// pending workload of one pod set, in a queue that can admit, fits what
// the model says is available. Quota only shrinks during a cycle, so such
// a workload that fits now either fitted when it was tried, or was not
// tried although quota was freed for it. (With several pod sets, picking
// the first flavor that fits pod set by pod set is not monotone: once
// others took some of the first flavor, an earlier pod set may move to
// the second and leave the first to a later one, so a workload can come
// to fit as quota shrinks. Those are left to the final liveness check.)
func (r *shadowRun) checkNothingLeftThatFits() {
	r.t.Helper()
	available := map[string]map[quota.FR]int64{}
	for _, q := range shadowQueues {
		available[q] = map[quota.FR]int64{}
		for _, fr := range shadowFRs() {
			available[q][fr] = r.model.available(q, fr)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(r.wls)) {
		sw := r.wls[name]
		if sw.queue != "" {
			continue
		}
		q := strings.TrimPrefix(sw.latest.Spec.QueueName, "lq-")
		if len(sw.podSets) == 1 && r.model.canAdmit(q) && r.fitsNow(q, sw, available[q]) {
			r.fatalf("%s stays pending in %s although it fits (cpu available per flavor: %v)", name, q, r.availableCPU(q))
		}
	}
}

// fitsNow reports whether, pod set by pod set, some flavor of q (in the
// queue's order) has room for the pod set in available, after what the
// earlier pod sets took.
func (r *shadowRun) fitsNow(q string, sw *shadowWorkload, available map[quota.FR]int64) bool {
	taken := map[quota.FR]int64{}
	for _, ps := range sw.podSets {
		placed := false
		for _, fl := range r.model.queues[q].flavors {
			room := true
			for res, per := range ps.requests {
				fr := quota.FR{Flavor: fl, Resource: res}
				if per*int64(ps.count) > available[fr]-taken[fr] {
					room = false
				}
			}
			if room {
				for res, per := range ps.requests {
					taken[quota.FR{Flavor: fl, Resource: res}] += per * int64(ps.count)
				}
				placed = true
				break
			}
		}
		if !placed {
			return false
		}
	}
	return true
}

func (r *shadowRun) checkReservation(rsv Reservation) {
	r.t.Helper()
	name, q := rsv.Workload.Name, rsv.ClusterQueue.Name
	sw := r.wls[name]
	switch {
	case sw == nil:
		r.fatalf("reserved %s, which the test does not know", name)
	case sw.queue != "":
		r.fatalf("reserved %s, which already holds quota in %s", name, sw.queue)
	case "lq-"+q != sw.latest.Spec.QueueName:
		r.fatalf("reserved %s in %s; its LocalQueue is %s", name, q, sw.latest.Spec.QueueName)
	case !r.model.canAdmit(q):
		r.fatalf("reserved %s in %s, which cannot admit (below a loop: %v; declarations %s)", name, q,
			r.model.belowLoop(q), describeLimits(r.model.queues[q].flavors, r.model.queues[q].limits))
	case len(rsv.Assignment.PodSets) != len(sw.podSets):
		r.fatalf("reserved %s with %d pod set assignments, want %d", name, len(rsv.Assignment.PodSets), len(sw.podSets))
	}

	// What it takes, and what each pod set borrows, from the model.
	spec := r.model.queues[q]
	inCohort := spec.parent != ""
	amounts := map[quota.FR]int64{}
	borrowing := false
	for i, psa := range rsv.Assignment.PodSets {
		ps := sw.podSets[i]
		for res, per := range ps.requests {
			flavor, ok := psa.Flavors[res]
			if !ok {
				r.fatalf("%s: pod set %s has no flavor for %s", name, psa.Name, res)
			}
			if !slices.Contains(spec.flavors, flavor) {
				r.fatalf("%s: pod set %s got flavor %s, which %s does not list", name, psa.Name, flavor, q)
			}
			fr := quota.FR{Flavor: flavor, Resource: res}
			before := r.model.held[q][fr] + amounts[fr]
			take := per * int64(ps.count)
			var want int64
			if inCohort {
				nominal := spec.limits[fr].nominal
				want = max(0, before+take-nominal) - max(0, before-nominal)
			}
			var got int64
			if b, ok := psa.Borrowed[res]; ok {
				got = shadowAmount(res, b)
			}
			if got != want {
				r.fatalf("%s in %s: pod set %s records %d of %s/%s borrowed, want %d (held %d with the earlier pod sets, takes %d, nominal %d)",
					name, q, psa.Name, got, flavor, res, want, before, take, spec.limits[fr].nominal)
			}
			borrowing = borrowing || want > 0
			amounts[fr] += take
		}
	}
	if rsv.Assignment.Borrowing != borrowing {
		r.fatalf("%s in %s: Borrowing = %v, want %v", name, q, rsv.Assignment.Borrowing, borrowing)
	}

	before := r.model.violations()
	for _, v := range before {
		if v > 0 {
			r.overUsed++
			break
		}
	}
	r.model.add(q, amounts, 1)
	for k, v := range r.model.violations() {
		if v > before[k] {
			r.fatalf("reserving %s (%v) in %s breaks a constraint: %s, by %d (before: %d)", name, amounts, q, k, v, before[k])
		}
	}
	sw.queue, sw.amounts = q, amounts
	r.admits++
	if borrowing {
		r.borrows++
	}
	// Most writes come back at once; the others stay assumed until a
	// later operation answers them.
	if r.rng.IntN(8) == 0 {
		sw.assumed = &rsv
		return
	}
	sw.latest = r.f.written(rsv, true)
	r.f.s.Observe(sw.latest)
}

// answer answers an assumed reservation's write: it lands (the written
// version is observed), or it was lost (Unassume: the workload is pending
// again and its quota free).
func (r *shadowRun) answer() {
	var names []string
	for name, sw := range r.wls {
		if sw.assumed != nil {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return
	}
	slices.Sort(names)
	name := r.pick(names)
	sw := r.wls[name]
	rsv := *sw.assumed
	sw.assumed = nil
	if r.rng.IntN(2) == 0 {
		r.logf("the reservation of %s in %s is written", name, sw.queue)
		sw.latest = r.f.written(rsv, true)
		r.f.s.Observe(sw.latest)
		return
	}
	r.logf("the reservation of %s in %s is lost (held %v)", name, sw.queue, sw.amounts)
	r.model.add(sw.queue, sw.amounts, -1)
	sw.queue, sw.amounts = "", nil
	r.f.s.Unassume(rsv.Workload)
}

// checkStatuses compares the statuses with the model.
func (r *shadowRun) checkStatuses() {
	r.t.Helper()
	amount := func(res corev1.ResourceName, q *resource.Quantity) string {
		if q == nil {
			return "-"
		}
		return fmt.Sprint(shadowAmount(res, *q))
	}
	cqs, _ := r.f.s.Statuses()
	for _, q := range shadowQueues {
		st, spec := cqs[q], r.model.queues[q]
		if st.Active != r.model.canAdmit(q) {
			r.fatalf("ClusterQueue %s: Active = %v (%s: %s), want %v", q, st.Active, st.Reason, st.Message, r.model.canAdmit(q))
		}
		if r.model.belowLoop(q) && st.Reason != v1alpha1.ReasonCohortCycle {
			r.fatalf("ClusterQueue %s below a loop: reason %s, want %s", q, st.Reason, v1alpha1.ReasonCohortCycle)
		}
		for _, fu := range st.Flavors {
			for _, ru := range fu.Resources {
				fr := quota.FR{Flavor: fu.Name, Resource: ru.Name}
				want := [3]string{fmt.Sprint(r.model.held[q][fr]), "-", "-"}
				if spec.parent != "" {
					want[1] = fmt.Sprint(max(0, r.model.held[q][fr]-spec.limits[fr].nominal))
					want[2] = fmt.Sprint(r.model.lent(q, fr))
				}
				got := [3]string{amount(ru.Name, &ru.Total), amount(ru.Name, ru.Borrowed), amount(ru.Name, ru.Lent)}
				if got != want {
					r.fatalf("ClusterQueue %s %s/%s: total, borrowed, lent = %v, want %v", q, fu.Name, ru.Name, got, want)
				}
			}
		}
	}
	cohorts := r.f.s.CohortStatuses()
	if len(cohorts) != len(r.cohorts) {
		r.fatalf("%d Cohort statuses, want %d", len(cohorts), len(r.cohorts))
	}
	for c := range r.cohorts {
		st := cohorts[c]
		if below := r.model.cohortBelowLoop(c); st.Active == below || (below && st.Reason != v1alpha1.ReasonCohortCycle) {
			r.fatalf("Cohort %s: Active = %v (%s), want %v", c, st.Active, st.Reason, !below)
		}
		seen := map[quota.FR]bool{}
		for _, fu := range st.Flavors {
			for _, ru := range fu.Resources {
				fr := quota.FR{Flavor: fu.Name, Resource: ru.Name}
				seen[fr] = true
				id := cohortID(c)
				var borrowed int64
				if _, ok := r.model.parent(id); ok {
					borrowed = max(0, r.model.usage(id, fr)-r.model.subtree(id, fr))
				}
				want := [3]string{fmt.Sprint(r.model.totalBelow(c, fr)), fmt.Sprint(borrowed), fmt.Sprint(r.model.lent(id, fr))}
				got := [3]string{amount(ru.Name, &ru.Total), amount(ru.Name, ru.Borrowed), amount(ru.Name, ru.Lent)}
				if got != want {
					r.fatalf("Cohort %s %s/%s: total, borrowed, lent = %v, want %v", c, fu.Name, ru.Name, got, want)
				}
			}
		}
		for _, fr := range shadowFRs() {
			if r.model.totalBelow(c, fr) > 0 && !seen[fr] {
				r.fatalf("Cohort %s does not report %s/%s, of which its queues hold %d", c, fr.Flavor, fr.Resource, r.model.totalBelow(c, fr))
			}
		}
	}
}

// checkLiveness finishes every workload, then checks that a workload that
// fits the empty tree is admitted by the next cycle.
func (r *shadowRun) checkLiveness() {
	r.t.Helper()
	for _, name := range slices.Sorted(maps.Keys(r.wls)) {
		sw := r.wls[name]
		if sw.queue != "" {
			r.model.add(sw.queue, sw.amounts, -1)
		}
		r.f.s.Observe(r.f.next(sw.latest, finished))
		delete(r.wls, name)
	}
	r.logf("finish every workload")
	if plan := r.f.cycle(); len(plan.Reservations) != 0 {
		r.fatalf("with no workload left, reserved %v", names(plan.Reservations))
	}
	for _, q := range shadowQueues {
		for fr, v := range r.model.held[q] {
			if v != 0 {
				r.fatalf("model: %s still holds %d of %v", q, v, fr)
			}
		}
	}
	cqs, _ := r.f.s.Statuses()
	for q, st := range cqs {
		for _, fu := range st.Flavors {
			for _, ru := range fu.Resources {
				if !ru.Total.IsZero() {
					r.fatalf("with no workload left, %s reports %s of %s/%s", q, ru.Total.String(), fu.Name, ru.Name)
				}
			}
		}
	}

	// A queue that can admit 500m of cpu in some flavor; if none can, q0
	// gets 2 cpu of f of its own.
	var target string
	for _, q := range shadowQueues {
		if !r.model.canAdmit(q) {
			continue
		}
		for _, fl := range r.model.queues[q].flavors {
			if r.model.available(q, quota.FR{Flavor: fl, Resource: corev1.ResourceCPU}) >= 500 {
				target = q
			}
		}
	}
	if target == "" {
		target = "q0"
		l := shadowLimits{nominal: 2000}
		r.model.queues[target] = &shadowNode{flavors: []string{"f"}, limits: map[quota.FR]shadowLimits{{Flavor: "f", Resource: corev1.ResourceCPU}: l}}
		r.f.s.SetClusterQueue(&v1alpha1.ClusterQueue{
			ObjectMeta: metav1.ObjectMeta{Name: target, UID: types.UID(target), Generation: r.nextGen("queue/" + target)},
			Spec: v1alpha1.ClusterQueueSpec{ResourceGroups: []v1alpha1.ResourceGroup{{
				CoveredResources: slices.Clone(shadowRes),
				Flavors:          []v1alpha1.FlavorQuotas{{Name: "f", Resources: []v1alpha1.ResourceQuota{resourceQuota(corev1.ResourceCPU, l)}}},
			}}},
		})
		r.logf("set ClusterQueue %s: no cohort, f/cpu=2000", target)
	}
	r.seq++
	name := fmt.Sprintf("w%04d", r.seq)
	wl := r.f.workload(name, "lq-"+target, "500m", 0, 0)
	r.wls[name] = &shadowWorkload{latest: wl, podSets: []shadowPodSet{{count: 1, requests: map[corev1.ResourceName]int64{corev1.ResourceCPU: 500}}}}
	r.logf("create %s in %s: 1x(cpu 500m)", name, target)
	r.f.s.Observe(wl)
	plan := r.f.cycle()
	if got := names(plan.Reservations); !slices.Equal(got, []string{name}) {
		r.fatalf("with the tree empty, %s (500m cpu in %s, which can take %v) was not admitted by the next cycle: reserved %v, waiting %v",
			name, target, r.availableCPU(target), got, messages(plan.Waiting))
	}
	r.checkReservation(plan.Reservations[0])
}

func (r *shadowRun) availableCPU(q string) map[string]int64 {
	out := map[string]int64{}
	for _, fl := range r.model.queues[q].flavors {
		out[fl] = r.model.available(q, quota.FR{Flavor: fl, Resource: corev1.ResourceCPU})
	}
	return out
}
