package scheduler

import (
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/services/admitter/internal/quota"
	"github.com/sluice-dev/sluice/services/admitter/internal/store"
)

// The queue, flavor, check and namespace events. Status-only updates (the
// admitter's own queue status writes) change nothing here: objects are
// compared by generation, or by the fields admission reads.

// localQueue is one LocalQueue and how many workloads it holds.
type localQueue struct {
	lq     *v1alpha1.LocalQueue
	counts Counts
}

// SetClusterQueue records a ClusterQueue added or updated.
func (s *Scheduler) SetClusterQueue(obj *v1alpha1.ClusterQueue) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cq := s.clusterQueues[obj.Name]
	if cq != nil && cq.spec.UID == obj.UID && obj.Generation <= cq.spec.Generation {
		// Nothing admission reads changed (or a late, older event).
		if obj.Generation == cq.spec.Generation {
			cq.spec = obj
		}
		return
	}
	if cq == nil {
		cq = newClusterQueue(obj.Name, s.tree)
		s.clusterQueues[obj.Name] = cq
		delete(s.ghosts, obj.Name)
	}
	before := s.tree.Root(obj.Name)
	setOrDelete(s.drainingCQs, obj.Name, draining(obj.Spec.StopPolicy))
	cq.setSpec(obj, s.flavors, s.checks)
	s.replaceQueue(obj.Name)
	cq.wakeAll()
	// What the queue lends and may borrow changed for its tree, and for
	// the tree it left.
	s.wakeTree(before)
	s.wakeTree(s.tree.Root(obj.Name))
}

// DeleteClusterQueue records a ClusterQueue deleted.
func (s *Scheduler) DeleteClusterQueue(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cq, ok := s.clusterQueues[name]
	if !ok {
		return
	}
	root := s.tree.Root(name)
	delete(s.clusterQueues, name)
	delete(s.drainingCQs, name)
	if len(s.byAdmission[name]) > 0 {
		// Its workloads run on until they stop, on quota its cohort may
		// have lent: it stays in the tree, without quota of its own,
		// until they give it back (see dropGhosts).
		s.tree.SetClusterQueue(name, cq.spec.Spec.CohortName, nil)
		s.ghosts[name] = true
	} else {
		s.tree.DeleteClusterQueue(name)
	}
	s.replaceQueue(name)
	s.wakeTree(root)
}

// dropGhosts removes from the tree the deleted ClusterQueues whose
// workloads all gave their quota back.
func (s *Scheduler) dropGhosts() {
	for name := range s.ghosts {
		if len(s.byAdmission[name]) == 0 {
			delete(s.ghosts, name)
			s.tree.DeleteClusterQueue(name)
		}
	}
}

// SetCohort records a Cohort added or updated.
func (s *Scheduler) SetCohort(obj *v1alpha1.Cohort) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur := s.cohorts[obj.Name]; cur != nil && cur.UID == obj.UID && obj.Generation <= cur.Generation {
		if obj.Generation == cur.Generation {
			s.cohorts[obj.Name] = obj
		}
		return
	}
	s.cohorts[obj.Name] = obj
	s.cohortChanged(obj.Name, func() {
		s.tree.SetCohort(obj.Name, obj.Spec.ParentName, quota.QuotasOf(obj.Spec.ResourceGroups))
		s.tree.SetCohortWeight(obj.Name, quota.WeightOf(obj.Spec.FairSharing))
	})
}

// DeleteCohort records a Cohort deleted. Its ClusterQueues and child
// Cohorts stay together under its name, without its quota and parent.
func (s *Scheduler) DeleteCohort(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.cohorts[name]; !ok {
		return
	}
	delete(s.cohorts, name)
	s.cohortChanged(name, func() { s.tree.DeleteCohort(name) })
}

// cohortChanged applies change to the tree, then recomputes whether each
// ClusterQueue of the trees the Cohort was and is in can admit (a loop of
// parents may have formed or gone) and tries their parked workloads again.
func (s *Scheduler) cohortChanged(name string, change func()) {
	affected := map[string]bool{}
	for _, cq := range s.tree.ClusterQueuesUnder(s.tree.CohortRoot(name)) {
		affected[cq] = true
	}
	change()
	for _, cq := range s.tree.ClusterQueuesUnder(s.tree.CohortRoot(name)) {
		affected[cq] = true
	}
	for name := range affected {
		if cq := s.clusterQueues[name]; cq != nil {
			cq.refresh(s.flavors, s.checks)
			cq.wakeAll()
		}
	}
}

// wakeTree tries again the parked workloads of every ClusterQueue below
// the root Cohort root (none for "").
func (s *Scheduler) wakeTree(root string) {
	if root == "" {
		return
	}
	for _, name := range s.tree.ClusterQueuesUnder(root) {
		if cq := s.clusterQueues[name]; cq != nil {
			cq.wakeAll()
		}
	}
}

// replaceQueue re-places the workloads that count in ClusterQueue name:
// those reserving in it and those queued through its LocalQueues.
func (s *Scheduler) replaceQueue(name string) {
	s.replace(maps.Clone(s.byAdmission[name]))
	for key, lq := range s.localQueues {
		if lq.lq.Spec.ClusterQueue == name {
			s.replace(maps.Clone(s.byLocalQueue[key]))
		}
	}
}

// SetLocalQueue records a LocalQueue added or updated.
func (s *Scheduler) SetLocalQueue(obj *v1alpha1.LocalQueue) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := types.NamespacedName{Namespace: obj.Namespace, Name: obj.Name}
	lq := s.localQueues[key]
	if lq != nil && lq.lq.UID == obj.UID && obj.Generation <= lq.lq.Generation {
		if obj.Generation == lq.lq.Generation {
			lq.lq = obj
		}
		return
	}
	if lq == nil {
		lq = &localQueue{}
		s.localQueues[key] = lq
	}
	lq.lq = obj
	setOrDelete(s.drainingLQs, key, draining(obj.Spec.StopPolicy))
	s.replace(maps.Clone(s.byLocalQueue[key]))
}

// setOrDelete adds key to set when in is true, and removes it otherwise.
func setOrDelete[K comparable](set map[K]bool, key K, in bool) {
	if in {
		set[key] = true
	} else {
		delete(set, key)
	}
}

// DeleteLocalQueue records a LocalQueue deleted.
func (s *Scheduler) DeleteLocalQueue(key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.localQueues[key]; !ok {
		return
	}
	delete(s.localQueues, key)
	delete(s.drainingLQs, key)
	s.replace(maps.Clone(s.byLocalQueue[key]))
}

// SetFlavor records a ResourceFlavor added or updated.
func (s *Scheduler) SetFlavor(obj *v1alpha1.ResourceFlavor) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur := s.flavors[obj.Name]; cur != nil && cur.UID == obj.UID && obj.Generation <= cur.Generation {
		if obj.Generation == cur.Generation {
			s.flavors[obj.Name] = obj
		}
		return
	}
	s.flavors[obj.Name] = obj
	s.flavorChanged(obj.Name)
}

// DeleteFlavor records a ResourceFlavor deleted.
func (s *Scheduler) DeleteFlavor(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.flavors[name]; !ok {
		return
	}
	delete(s.flavors, name)
	s.flavorChanged(name)
}

// flavorChanged re-evaluates the ClusterQueues that name the flavor: their
// activity, and every workload they parked.
func (s *Scheduler) flavorChanged(name string) {
	for _, cq := range s.clusterQueues {
		if namesFlavor(cq.spec, name) {
			cq.refresh(s.flavors, s.checks)
			cq.wakeAll()
		}
	}
}

func namesFlavor(cq *v1alpha1.ClusterQueue, name string) bool {
	for _, rg := range cq.Spec.ResourceGroups {
		if slices.ContainsFunc(rg.Flavors, func(f v1alpha1.FlavorQuotas) bool { return f.Name == name }) {
			return true
		}
	}
	return false
}

// SetCheck records an AdmissionCheck added or updated (its Active
// condition included).
func (s *Scheduler) SetCheck(obj *v1alpha1.AdmissionCheck) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur := s.checks[obj.Name]; cur != nil && cur.UID == obj.UID && !store.Newer(obj.ResourceVersion, cur.ResourceVersion) {
		return // seen already (status included), or older
	}
	s.checks[obj.Name] = obj
	s.checkChanged(obj.Name)
}

// DeleteCheck records an AdmissionCheck deleted.
func (s *Scheduler) DeleteCheck(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.checks[name]; !ok {
		return
	}
	delete(s.checks, name)
	s.checkChanged(name)
}

// Check returns the AdmissionCheck name as last seen, or nil.
func (s *Scheduler) Check(name string) *v1alpha1.AdmissionCheck {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.checks[name]
}

// Catalog returns the ResourceFlavors and AdmissionChecks by name as last
// seen. The maps are copies; the objects are shared and must not be
// changed.
func (s *Scheduler) Catalog() (map[string]*v1alpha1.ResourceFlavor, map[string]*v1alpha1.AdmissionCheck) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.flavors), maps.Clone(s.checks)
}

// checkChanged recomputes the activity of the ClusterQueues that name the
// check; a queue whose activity changed looks at its parked workloads again.
func (s *Scheduler) checkChanged(name string) {
	for _, cq := range s.clusterQueues {
		strategy := cq.spec.Spec.AdmissionChecksStrategy
		if strategy == nil || !slices.ContainsFunc(strategy.AdmissionChecks, func(r v1alpha1.AdmissionCheckStrategyRule) bool { return r.Name == name }) {
			continue
		}
		active, reason, message := cq.active, cq.reason, cq.message
		cq.refresh(s.flavors, s.checks)
		if active != cq.active || reason != cq.reason || message != cq.message {
			cq.wakeAll()
		}
	}
}

// SetNamespace records a Namespace's labels, which ClusterQueues'
// namespace selectors match.
func (s *Scheduler) SetNamespace(name string, lbls map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.namespaces[name]; ok && equality.Semantic.DeepEqual(map[string]string(cur), lbls) {
		return
	}
	s.namespaces[name] = labels.Set(maps.Clone(lbls))
	s.namespaceChanged(name)
}

// DeleteNamespace records a Namespace deleted.
func (s *Scheduler) DeleteNamespace(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.namespaces[name]; !ok {
		return
	}
	delete(s.namespaces, name)
	s.namespaceChanged(name)
}

// namespaceChanged re-places the workloads of the namespace's LocalQueues
// whose ClusterQueue selects namespaces.
func (s *Scheduler) namespaceChanged(name string) {
	for key, lq := range s.localQueues {
		if key.Namespace != name {
			continue
		}
		if cq := s.clusterQueues[lq.lq.Spec.ClusterQueue]; cq != nil && !cq.selector.Empty() {
			s.replace(maps.Clone(s.byLocalQueue[key]))
		}
	}
}
