package scheduler

import (
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/services/admitter/internal/quota"
)

// ClusterQueueStatus is what a ClusterQueue's status reports.
type ClusterQueueStatus struct {
	Active          bool
	Reason, Message string
	Counts          Counts
	// Flavors is the quota reserved per flavor and covered resource, and
	// in a cohort what of it is borrowed and what of the quota is lent.
	Flavors []v1alpha1.FlavorUsage
	// Share is the queue's fair-sharing share; nil while fair sharing is
	// off.
	Share *quota.Share
}

// CohortStatus is what a Cohort's status reports.
type CohortStatus struct {
	Active          bool
	Reason, Message string
	// Flavors is, per flavor and resource, what the subtree's ClusterQueues
	// hold, borrow from the parent and lend it.
	Flavors []v1alpha1.FlavorUsage
	// Share is the Cohort's fair-sharing share in its parent; nil while
	// fair sharing is off.
	Share *quota.Share
}

// LocalQueueStatus is what a LocalQueue's status reports.
type LocalQueueStatus struct {
	Active          bool
	Reason, Message string
	Counts          Counts
}

// CohortStatuses returns the status of every Cohort object known.
func (s *Scheduler) CohortStatuses() map[string]CohortStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]CohortStatus, len(s.cohorts))
	for name := range s.cohorts {
		st := CohortStatus{Active: true, Reason: "Ready", Message: "Shares quota among its ClusterQueues"}
		if cycle := s.tree.CohortCycle(name); cycle != nil {
			st = CohortStatus{Reason: v1alpha1.ReasonCohortCycle, Message: CycleMessage(cycle)}
		}
		totals := s.tree.CohortTotals(name)
		byFlavor := map[string][]v1alpha1.ResourceUsage{}
		frs := s.tree.CohortFRs(name)
		for fr := range totals {
			if !slices.Contains(frs, fr) {
				frs = append(frs, fr)
			}
		}
		for _, fr := range frs {
			total := quantity(fr.Resource, totals[fr])
			byFlavor[fr.Flavor] = append(byFlavor[fr.Flavor], v1alpha1.ResourceUsage{
				Name:     fr.Resource,
				Total:    *total,
				Borrowed: quantity(fr.Resource, s.tree.CohortBorrowed(name, fr)),
				Lent:     quantity(fr.Resource, s.tree.CohortLent(name, fr)),
			})
		}
		for _, flavor := range slices.Sorted(maps.Keys(byFlavor)) {
			resources := byFlavor[flavor]
			slices.SortFunc(resources, func(a, b v1alpha1.ResourceUsage) int { return strings.Compare(string(a.Name), string(b.Name)) })
			st.Flavors = append(st.Flavors, v1alpha1.FlavorUsage{Name: flavor, Resources: resources})
		}
		if s.fairSharing.Enabled {
			share := s.tree.CohortShare(name)
			st.Share = &share
		}
		out[name] = st
	}
	return out
}

// quantity turns an amount the quota tree counts res in into a Quantity,
// in the format people write res in: binary for bytes, decimal otherwise.
func quantity(res corev1.ResourceName, amount int64) *resource.Quantity {
	format := resource.DecimalSI
	switch {
	case res == corev1.ResourceMemory, res == corev1.ResourceEphemeralStorage, res == corev1.ResourceStorage,
		strings.HasPrefix(string(res), corev1.ResourceHugePagesPrefix):
		format = resource.BinarySI
	}
	q := quota.QuantityOf(res, amount, format)
	return &q
}

// Statuses returns the status of every ClusterQueue and LocalQueue known.
func (s *Scheduler) Statuses() (map[string]ClusterQueueStatus, map[types.NamespacedName]LocalQueueStatus) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cqs := make(map[string]ClusterQueueStatus, len(s.clusterQueues))
	for name, cq := range s.clusterQueues {
		st := ClusterQueueStatus{Active: cq.active, Reason: cq.reason, Message: cq.message, Counts: cq.counts}
		for _, rg := range cq.spec.Spec.ResourceGroups {
			for _, f := range rg.Flavors {
				fu := v1alpha1.FlavorUsage{Name: f.Name}
				for _, res := range rg.CoveredResources {
					ru := v1alpha1.ResourceUsage{Name: res, Total: cq.usage.Get(f.Name, res)}
					if cq.spec.Spec.CohortName != "" {
						fr := quota.FR{Flavor: f.Name, Resource: res}
						ru.Borrowed = quantity(res, s.tree.Borrowed(name, fr))
						ru.Lent = quantity(res, s.tree.Lent(name, fr))
					}
					fu.Resources = append(fu.Resources, ru)
				}
				st.Flavors = append(st.Flavors, fu)
			}
		}
		if s.fairSharing.Enabled {
			share := s.tree.ClusterQueueShare(name, nil)
			st.Share = &share
		}
		cqs[name] = st
	}
	lqs := make(map[types.NamespacedName]LocalQueueStatus, len(s.localQueues))
	for key, lq := range s.localQueues {
		st := LocalQueueStatus{Counts: lq.counts}
		cq := s.clusterQueues[lq.lq.Spec.ClusterQueue]
		switch {
		case cq == nil:
			st.Reason, st.Message = "ClusterQueueNotFound", "ClusterQueue "+lq.lq.Spec.ClusterQueue+" doesn't exist"
		case stopped(lq.lq.Spec.StopPolicy):
			st.Reason, st.Message = "Stopped", "the LocalQueue is stopped (stopPolicy "+string(*lq.lq.Spec.StopPolicy)+")"
		case !cq.active:
			st.Reason, st.Message = "ClusterQueueInactive", "ClusterQueue "+cq.name+" is inactive: "+cq.message
		default:
			st.Active, st.Reason, st.Message = true, "Ready", "Can submit new workloads to ClusterQueue "+cq.name
		}
		lqs[key] = st
	}
	return cqs, lqs
}
