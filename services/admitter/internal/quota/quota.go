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

// Quotas are the nominal quotas of a ClusterQueue per flavor and resource.
func Quotas(cq *v1alpha1.ClusterQueue) Usage {
	u := Usage{}
	for _, rg := range cq.Spec.ResourceGroups {
		for _, f := range rg.Flavors {
			for _, r := range f.Resources {
				u.AddQuantity(f.Name, r.Name, r.NominalQuota)
			}
		}
	}
	return u
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
	// Borrowing is true when the assignment takes more than the
	// ClusterQueue's nominal quota. Assign never borrows while queues do
	// not share quota in cohorts; the scheduler already orders heads that
	// fit without borrowing first.
	Borrowing bool
}

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
// that group fits: requests x count must not exceed nominalQuota minus used
// (and minus what earlier pod sets of the same workload took). flavors are
// the existing ResourceFlavors by name; a flavor whose taints the pod set
// does not tolerate, or whose node labels contradict its nodeSelector, is
// skipped. A requested resource that no resource group covers makes the
// workload unfit for good.
func Assign(cq *v1alpha1.ClusterQueue, podSets []v1alpha1.PodSet, flavors map[string]*v1alpha1.ResourceFlavor, used Usage) (Assignment, error) {
	taken := Usage{}
	out := Assignment{Usage: taken}
	for _, ps := range podSets {
		a, err := assignPodSet(cq, ps, flavors, used, taken)
		if err != nil {
			return Assignment{}, err
		}
		out.PodSets = append(out.PodSets, a)
	}
	return out, nil
}

func assignPodSet(cq *v1alpha1.ClusterQueue, ps v1alpha1.PodSet, flavors map[string]*v1alpha1.ResourceFlavor, used, taken Usage) (v1alpha1.PodSetAssignment, error) {
	need := Times(ps.Template.Requests, ps.Count)
	resources := slices.Sorted(maps.Keys(need))
	// Group the requested resources by the resource group covering them,
	// keeping the ClusterQueue's group order.
	perGroup := make([][]corev1.ResourceName, len(cq.Spec.ResourceGroups))
	for _, res := range resources {
		g := groupOf(cq, res)
		if g < 0 {
			return v1alpha1.PodSetAssignment{}, &UnfitError{
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
	for g, groupResources := range perGroup {
		if len(groupResources) == 0 {
			continue
		}
		flavor, reasons := pickFlavor(cq.Spec.ResourceGroups[g], groupResources, ps, need, flavors, used, taken)
		if flavor == "" {
			return v1alpha1.PodSetAssignment{}, &UnfitError{PodSet: ps.Name, Reasons: reasons}
		}
		for _, res := range groupResources {
			a.Flavors[res] = flavor
			taken.AddQuantity(flavor, res, need[res])
		}
	}
	return a, nil
}

func groupOf(cq *v1alpha1.ClusterQueue, res corev1.ResourceName) int {
	for i, rg := range cq.Spec.ResourceGroups {
		if slices.Contains(rg.CoveredResources, res) {
			return i
		}
	}
	return -1
}

// pickFlavor returns the first flavor of rg that fits, or "" and the
// reasons each flavor was passed over.
func pickFlavor(rg v1alpha1.ResourceGroup, resources []corev1.ResourceName, ps v1alpha1.PodSet, need corev1.ResourceList,
	flavors map[string]*v1alpha1.ResourceFlavor, used, taken Usage) (string, []string) {
	var reasons []string
	for _, fq := range rg.Flavors {
		if reason := flavorMismatch(fq.Name, ps, flavors); reason != "" {
			reasons = append(reasons, reason)
			continue
		}
		fits := true
		for _, res := range resources {
			avail := nominal(fq, res)
			avail.Sub(used.Get(fq.Name, res))
			avail.Sub(taken.Get(fq.Name, res))
			want := need[res]
			if want.Cmp(avail) > 0 {
				missing := want.DeepCopy()
				missing.Sub(avail)
				reasons = append(reasons, fmt.Sprintf("insufficient quota for %s in flavor %s, %s more needed", res, fq.Name, missing.String()))
				fits = false
			}
		}
		if fits {
			return fq.Name, nil
		}
	}
	return "", reasons
}

func nominal(fq v1alpha1.FlavorQuotas, res corev1.ResourceName) resource.Quantity {
	for _, r := range fq.Resources {
		if r.Name == res {
			return r.NominalQuota.DeepCopy()
		}
	}
	return resource.Quantity{}
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
