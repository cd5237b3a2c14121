// Package quota is the admitter's quota arithmetic: how much a workload
// holds per flavor and resource, which flavor each of its pod sets fits
// in given what a ClusterQueue has already handed out, and (Tree) what
// ClusterQueues sharing quota through a tree of Cohorts may take and lend.
package quota

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

// Usage is an amount of quota per flavor and resource.
type Usage map[string]corev1.ResourceList

// Get returns the amount of res in flavor (zero when absent).
func (u Usage) Get(flavor string, res corev1.ResourceName) resource.Quantity {
	if q, ok := u[flavor][res]; ok {
		return q.DeepCopy()
	}
	return resource.Quantity{}
}

// AddQuantity adds q of res in flavor.
func (u Usage) AddQuantity(flavor string, res corev1.ResourceName, q resource.Quantity) {
	rl := u[flavor]
	if rl == nil {
		rl = corev1.ResourceList{}
		u[flavor] = rl
	}
	cur := rl[res]
	cur.Add(q)
	rl[res] = cur
}

// Add adds every amount of o to u.
func (u Usage) Add(o Usage) {
	for flavor, rl := range o {
		for res, q := range rl {
			u.AddQuantity(flavor, res, q)
		}
	}
}

// Sub subtracts every amount of o from u.
func (u Usage) Sub(o Usage) {
	for flavor, rl := range o {
		for res, q := range rl {
			neg := q.DeepCopy()
			neg.Neg()
			u.AddQuantity(flavor, res, neg)
		}
	}
}

// Times returns requests multiplied by count, for every non-zero request.
func Times(requests corev1.ResourceList, count int32) corev1.ResourceList {
	out := make(corev1.ResourceList, len(requests))
	for res, q := range requests {
		if q.IsZero() {
			continue
		}
		total := q.DeepCopy()
		total.Mul(int64(count))
		out[res] = total
	}
	return out
}

// WorkloadUsage is the quota a workload with status.admission holds:
// for each pod set, its per-pod requests times the pods that have not
// finished yet (count minus status.reclaimablePods), in the flavors of its
// assignment. A workload without admission holds nothing.
func WorkloadUsage(wl *v1alpha1.Workload) Usage {
	u := Usage{}
	if wl.Status.Admission == nil {
		return u
	}
	reclaimable := make(map[string]int32, len(wl.Status.ReclaimablePods))
	for _, r := range wl.Status.ReclaimablePods {
		reclaimable[r.Name] = r.Count
	}
	specs := make(map[string]*v1alpha1.PodSet, len(wl.Spec.PodSets))
	for i := range wl.Spec.PodSets {
		specs[wl.Spec.PodSets[i].Name] = &wl.Spec.PodSets[i]
	}
	for _, a := range wl.Status.Admission.PodSetAssignments {
		ps := specs[a.Name]
		if ps == nil {
			continue
		}
		count := ps.Count
		if a.Count != nil {
			count = *a.Count
		}
		count -= reclaimable[a.Name]
		if count <= 0 {
			continue
		}
		for res, q := range Times(ps.Template.Requests, count) {
			flavor, ok := a.Flavors[res]
			if !ok {
				continue
			}
			u.AddQuantity(flavor, res, q)
		}
	}
	return u
}

// QuotasOf is what resource groups (of a ClusterQueue or a Cohort)
// declare, per FR, in a Tree's units.
func QuotasOf(groups []v1alpha1.ResourceGroup) map[FR]Quota {
	out := map[FR]Quota{}
	for _, rg := range groups {
		for _, f := range rg.Flavors {
			for _, r := range f.Resources {
				q := Quota{Nominal: AmountOf(r.Name, r.NominalQuota)}
				if r.BorrowingLimit != nil {
					bl := AmountOf(r.Name, *r.BorrowingLimit)
					q.BorrowingLimit = &bl
				}
				if r.LendingLimit != nil {
					ll := AmountOf(r.Name, *r.LendingLimit)
					q.LendingLimit = &ll
				}
				out[FR{Flavor: f.Name, Resource: r.Name}] = q
			}
		}
	}
	return out
}

// Amounts is u in a Tree's units.
func Amounts(u Usage) map[FR]int64 {
	out := make(map[FR]int64, len(u))
	for flavor, rl := range u {
		for res, q := range rl {
			out[FR{Flavor: flavor, Resource: res}] = AmountOf(res, q)
		}
	}
	return out
}

// QuantityOf turns an amount in a Tree's units back into a Quantity of
// res, in format.
func QuantityOf(res corev1.ResourceName, amount int64, format resource.Format) resource.Quantity {
	if res == corev1.ResourceCPU {
		return *resource.NewMilliQuantity(amount, format)
	}
	return *resource.NewQuantity(amount, format)
}

// UnfitError says why a workload does not fit a ClusterQueue now.
type UnfitError struct {
	// PodSet is the pod set that could not be assigned a flavor.
	PodSet string
	// Reasons say, flavor by flavor, what is missing.
	Reasons []string
	// Permanent is true when no amount of freed quota would help (a
	// resource the ClusterQueue does not cover at all).
	Permanent bool
}

func (e *UnfitError) Error() string {
	return fmt.Sprintf("couldn't assign flavors to pod set %s: %s", e.PodSet, strings.Join(e.Reasons, "; "))
}

// Assignment is where a workload's pod sets fit and what they take.
type Assignment struct {
	// PodSets are the assignments in the order of spec.podSets.
	PodSets []v1alpha1.PodSetAssignment
	// Usage is the quota the assignment takes.
	Usage Usage
	// Borrowing is true when the assignment takes the ClusterQueue beyond
	// its nominal quota in some flavor and resource, which only a queue in
	// a cohort can do; the scheduler admits heads that do not borrow
	// first. Each pod set's borrowed field says how much.
	Borrowing bool
	// Preempting is true when some pod set fits its flavors only once
	// admitted workloads are preempted (see AssignWith): the assignment is
	// what the workload would take then, not what it can take now.
	Preempting bool
}

// Preemptible says whether preempting admitted workloads could make room
// in a ClusterQueue for request: amounts by FR, in a Tree's units, of one
// pod set together with what the workload's earlier pod sets take in the
// same flavors.
type Preemptible func(request map[FR]int64) bool

// Flavors returns the distinct flavor names of the assignment.
func (a Assignment) Flavors() []string {
	set := map[string]bool{}
	for _, ps := range a.PodSets {
		for _, f := range ps.Flavors {
			set[f] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// Assign picks, for every pod set, the first flavor of each resource group
// (in the group's order) in which every resource the pod set requests from
// that group fits: requests x count must not exceed what the tree says the
// ClusterQueue can still take (its free quota, and what it may borrow from
// its cohort), minus what earlier pod sets of the same workload took.
// flavors are the existing ResourceFlavors by name; a flavor whose taints
// the pod set does not tolerate, or whose node labels contradict its
// nodeSelector, is skipped. A requested resource that no resource group
// covers makes the workload unfit for good. tree must know cq.
//
// The ClusterQueue's flavorFungibility decides between flavors that need
// borrowing: with whenCanBorrow TryNextFlavor a later flavor that fits
// without borrowing is taken first, and the first that fits by borrowing
// only if none does.
func Assign(cq *v1alpha1.ClusterQueue, podSets []v1alpha1.PodSet, flavors map[string]*v1alpha1.ResourceFlavor, tree *Tree) (Assignment, error) {
	return AssignWith(cq, podSets, flavors, tree, nil)
}

// AssignWith is Assign for a workload that may preempt: a flavor the pod
// set does not fit now, but would once preemptible says admitted
// workloads are preempted, is taken as the ClusterQueue's whenCanPreempt
// says — at once with MayStopSearch; with TryNextFlavor (the default)
// only if no later flavor fits without preemption. The assignment is then
// marked Preempting. A flavor that fits by borrowing is preferred to one
// that needs preemption.
func AssignWith(cq *v1alpha1.ClusterQueue, podSets []v1alpha1.PodSet, flavors map[string]*v1alpha1.ResourceFlavor, tree *Tree, preemptible Preemptible) (Assignment, error) {
	taken := Usage{}
	out := Assignment{Usage: taken}
	search := searchOf(cq, preemptible)
	for _, ps := range podSets {
		a, preempting, err := assignPodSet(cq, ps, flavors, tree, taken, search)
		if err != nil {
			return Assignment{}, err
		}
		if len(a.Borrowed) > 0 {
			out.Borrowing = true
		}
		out.Preempting = out.Preempting || preempting
		out.PodSets = append(out.PodSets, a)
	}
	return out, nil
}

// search is how a pod set's flavors are searched.
type search struct {
	// nextWhenBorrowing: look further than a flavor that fits by
	// borrowing; nextWhenPreempting: than one that needs preemption.
	nextWhenBorrowing, nextWhenPreempting bool
	preemptible                           Preemptible
}

func searchOf(cq *v1alpha1.ClusterQueue, preemptible Preemptible) search {
	s := search{nextWhenPreempting: true, preemptible: preemptible}
	if f := cq.Spec.FlavorFungibility; f != nil {
		s.nextWhenBorrowing = f.WhenCanBorrow == v1alpha1.TryNextFlavor
		s.nextWhenPreempting = f.WhenCanPreempt != v1alpha1.MayStopSearch
	}
	return s
}

func assignPodSet(cq *v1alpha1.ClusterQueue, ps v1alpha1.PodSet, flavors map[string]*v1alpha1.ResourceFlavor, tree *Tree, taken Usage,
	how search) (v1alpha1.PodSetAssignment, bool, error) {
	need := Times(ps.Template.Requests, ps.Count)
	resources := slices.Sorted(maps.Keys(need))
	// Group the requested resources by the resource group covering them,
	// keeping the ClusterQueue's group order.
	perGroup := make([][]corev1.ResourceName, len(cq.Spec.ResourceGroups))
	for _, res := range resources {
		g := groupOf(cq, res)
		if g < 0 {
			return v1alpha1.PodSetAssignment{}, false, &UnfitError{
				PodSet:    ps.Name,
				Reasons:   []string{fmt.Sprintf("resource %s is not covered by ClusterQueue %s", res, cq.Name)},
				Permanent: true,
			}
		}
		perGroup[g] = append(perGroup[g], res)
	}
	count := ps.Count
	a := v1alpha1.PodSetAssignment{
		Name:          ps.Name,
		Flavors:       map[corev1.ResourceName]string{},
		ResourceUsage: need,
		Count:         &count,
	}
	preempting := false
	for g, groupResources := range perGroup {
		if len(groupResources) == 0 {
			continue
		}
		choice, reasons := pickFlavor(cq, cq.Spec.ResourceGroups[g], groupResources, ps, need, flavors, tree, taken, how)
		if choice.mode == noFit {
			return v1alpha1.PodSetAssignment{}, false, &UnfitError{PodSet: ps.Name, Reasons: reasons}
		}
		flavor := choice.flavor
		preempting = preempting || choice.mode == preempt
		for _, res := range groupResources {
			a.Flavors[res] = flavor
			fr := FR{Flavor: flavor, Resource: res}
			want := need[res]
			if b := borrowedBy(tree, cq.Name, fr, AmountOf(res, taken.Get(flavor, res)), AmountOf(res, want)); b > 0 {
				if a.Borrowed == nil {
					a.Borrowed = corev1.ResourceList{}
				}
				a.Borrowed[res] = QuantityOf(res, b, want.Format)
			}
			taken.AddQuantity(flavor, res, want)
		}
	}
	return a, preempting, nil
}

// borrowedBy is how much of amount, taken by the ClusterQueue cq after
// before more of fr, lies beyond its nominal quota.
func borrowedBy(tree *Tree, cq string, fr FR, before, amount int64) int64 {
	if !tree.Borrowing(cq, fr, satAdd(before, amount)) {
		return 0
	}
	used, nominal := tree.Usage(cq, fr), tree.Nominal(cq, fr)
	over := func(extra int64) int64 { return max(0, satAdd(used, extra)-nominal) }
	return over(satAdd(before, amount)) - over(before)
}

func groupOf(cq *v1alpha1.ClusterQueue, res corev1.ResourceName) int {
	for i, rg := range cq.Spec.ResourceGroups {
		if slices.Contains(rg.CoveredResources, res) {
			return i
		}
	}
	return -1
}

// mode is how a pod set can take a flavor, worst first.
type mode int

const (
	noFit mode = iota
	// preempt: only once admitted workloads are preempted.
	preempt
	// borrow: now, beyond the ClusterQueue's nominal quota.
	borrow
	// fit: now, within the nominal quota.
	fit
)

// flavorChoice is a flavor and how the pod set takes it.
type flavorChoice struct {
	flavor string
	mode   mode
}

// pickFlavor returns the flavor of rg the pod set takes, searching as how
// says: the first that fits, or, when the search goes on past one that
// needs borrowing or preemption, the best seen (fit, then borrow, then
// preempt; the earlier of equals). Its mode is noFit, with the reasons each
// flavor was passed over, when none will do.
func pickFlavor(cq *v1alpha1.ClusterQueue, rg v1alpha1.ResourceGroup, resources []corev1.ResourceName, ps v1alpha1.PodSet, need corev1.ResourceList,
	flavors map[string]*v1alpha1.ResourceFlavor, tree *Tree, taken Usage, how search) (flavorChoice, []string) {
	var reasons []string
	var best flavorChoice
	for _, fq := range rg.Flavors {
		if reason := flavorMismatch(fq.Name, ps, flavors); reason != "" {
			reasons = append(reasons, reason)
			continue
		}
		m, why := flavorMode(cq.Name, fq.Name, resources, need, tree, taken, how.preemptible)
		reasons = append(reasons, why...)
		if m > best.mode {
			best = flavorChoice{flavor: fq.Name, mode: m}
		}
		if m == fit || (m == borrow && !how.nextWhenBorrowing) || (m == preempt && !how.nextWhenPreempting) {
			return flavorChoice{flavor: fq.Name, mode: m}, nil
		}
	}
	if best.mode == noFit {
		return best, reasons
	}
	return best, nil
}

// flavorMode is how the pod set's resources of one group (need, in
// flavor) can be taken by the ClusterQueue cq after its workload's earlier
// pod sets took taken, with the shortfalls that keep it from taking them
// now.
func flavorMode(cq, flavor string, resources []corev1.ResourceName, need corev1.ResourceList, tree *Tree, taken Usage,
	preemptible Preemptible) (mode, []string) {
	var shortfalls []string
	borrowing := false
	for _, res := range resources {
		fr := FR{Flavor: flavor, Resource: res}
		want := need[res]
		wantAmount := AmountOf(res, want)
		took := AmountOf(res, taken.Get(flavor, res))
		if wantAmount > tree.Available(cq, fr)-took {
			shortfalls = append(shortfalls, Shortfall(cq, fr, wantAmount, took, tree.Explain(cq, fr), want.Format))
			continue
		}
		borrowing = borrowing || tree.Borrowing(cq, fr, satAdd(took, wantAmount))
	}
	switch {
	case len(shortfalls) == 0 && borrowing:
		return borrow, nil
	case len(shortfalls) == 0:
		return fit, nil
	case preemptible != nil && preemptible(requestOf(flavor, resources, need, taken)):
		return preempt, shortfalls
	default:
		return noFit, shortfalls
	}
}

// requestOf is what a pod set's resources need in flavor, together with
// what its workload's earlier pod sets took there, in a Tree's units.
func requestOf(flavor string, resources []corev1.ResourceName, need corev1.ResourceList, taken Usage) map[FR]int64 {
	request := make(map[FR]int64, len(resources))
	for _, res := range resources {
		request[FR{Flavor: flavor, Resource: res}] = satAdd(AmountOf(res, taken.Get(flavor, res)), AmountOf(res, need[res]))
	}
	return request
}

// Shortfall says why the ClusterQueue cq cannot take want more of fr
// after its workload's earlier pod sets took took: by how much it falls
// short and, in a cohort, whether borrowing could cover it and what stops
// it now. Amounts are in a Tree's units, shown in format.
func Shortfall(cq string, fr FR, want, took int64, l Limits, format resource.Format) string {
	show := func(v int64) string { q := QuantityOf(fr.Resource, v, format); return q.String() }
	avail := max(0, l.Available-took)
	msg := fmt.Sprintf("insufficient quota for %s in flavor %s, %s more needed", fr.Resource, fr.Flavor, show(want-avail))
	switch l.Ever.Kind {
	case CapNominal:
		return msg
	case CapCycle:
		return msg + fmt.Sprintf(": ClusterQueue %s is below a loop of Cohorts (%s)", cq, l.Ever.Node)
	}
	if potential := max(0, l.Potential-took); want > potential {
		return msg + fmt.Sprintf(": ClusterQueue %s could take at most %s even with nothing else in use, %s", cq, show(potential), capText(l.Ever, show, false))
	}
	giveBack := satAdd(want, took) - l.Headroom
	msg += fmt.Sprintf(": %s available with borrowing, %s; it fits once %s", show(avail), capText(l.Now, show, true), giveBackText(l.Now, show(giveBack)))
	if l.Lent > 0 && satAdd(satAdd(l.Usage, took), want) <= l.Nominal {
		msg += fmt.Sprintf(" (others hold %s of the queue's nominal quota, lent while it was unused)", show(l.Lent))
	}
	return msg
}

// giveBackText says what must be given back for amount more to fit.
func giveBackText(c Cap, amount string) string {
	if c.Kind == CapBorrowingLimit {
		kind := "ClusterQueue"
		if c.Cohort {
			kind = "Cohort"
		}
		return fmt.Sprintf("%s %s holds %s less", kind, c.Node, amount)
	}
	return fmt.Sprintf("%s more of Cohort %s's quota is given back", amount, c.Node)
}

// capText names what caps a ClusterQueue's take of an FR.
func capText(c Cap, show func(int64) string, now bool) string {
	kind := "ClusterQueue"
	if c.Cohort {
		kind = "Cohort"
	}
	switch c.Kind {
	case CapBorrowingLimit:
		return fmt.Sprintf("as %s %s may borrow at most %s (borrowingLimit)", kind, c.Node, show(c.Limit))
	case CapPool:
		if now {
			return fmt.Sprintf("as Cohort %s's pool has %s of its %s in use", c.Node, show(c.InUse), show(c.Limit))
		}
		return fmt.Sprintf("as Cohort %s's pool holds %s in all", c.Node, show(c.Limit))
	}
	return ""
}

// flavorMismatch says why the pod set cannot use the flavor at all, or "".
func flavorMismatch(name string, ps v1alpha1.PodSet, flavors map[string]*v1alpha1.ResourceFlavor) string {
	f := flavors[name]
	if f == nil {
		return fmt.Sprintf("flavor %s not found", name)
	}
	for _, k := range slices.Sorted(maps.Keys(f.Spec.NodeLabels)) {
		if v, ok := ps.Template.NodeSelector[k]; ok && v != f.Spec.NodeLabels[k] {
			return fmt.Sprintf("flavor %s doesn't match the pod set's nodeSelector %s=%s", name, k, v)
		}
	}
	for i := range f.Spec.NodeTaints {
		taint := &f.Spec.NodeTaints[i]
		if taint.Effect == corev1.TaintEffectPreferNoSchedule {
			continue
		}
		tolerated := slices.ContainsFunc(ps.Template.Tolerations, func(t corev1.Toleration) bool {
			return t.ToleratesTaint(klog.Background(), taint, false)
		})
		if !tolerated {
			return fmt.Sprintf("flavor %s has untolerated taint %s", name, taint.ToString())
		}
	}
	return ""
}
