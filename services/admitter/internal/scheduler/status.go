package scheduler

import (
	"k8s.io/apimachinery/pkg/types"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

// ClusterQueueStatus is what a ClusterQueue's status reports.
type ClusterQueueStatus struct {
	Active          bool
	Reason, Message string
	Counts          Counts
	// Flavors is the quota reserved per flavor and covered resource.
	Flavors []v1alpha1.FlavorUsage
}

// LocalQueueStatus is what a LocalQueue's status reports.
type LocalQueueStatus struct {
	Active          bool
	Reason, Message string
	Counts          Counts
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
					fu.Resources = append(fu.Resources, v1alpha1.ResourceUsage{Name: res, Total: cq.usage.Get(f.Name, res)})
				}
				st.Flavors = append(st.Flavors, fu)
			}
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
