package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// QueueingStrategy orders the pending workloads of a ClusterQueue.
// +kubebuilder:validation:Enum=StrictFIFO;BestEffortFIFO
type QueueingStrategy string

const (
	// StrictFIFO admits workloads strictly in order: one that does not fit
	// blocks those behind it.
	StrictFIFO QueueingStrategy = "StrictFIFO"
	// BestEffortFIFO admits in order but lets a workload that fits pass one
	// that does not.
	BestEffortFIFO QueueingStrategy = "BestEffortFIFO"
)

// StopPolicy stops a queue from admitting.
// +kubebuilder:validation:Enum=None;Hold;HoldAndDrain
type StopPolicy string

const (
	// None lets the queue admit.
	None StopPolicy = "None"
	// Hold admits nothing new; admitted workloads keep running.
	Hold StopPolicy = "Hold"
	// HoldAndDrain admits nothing new and evicts what was admitted.
	HoldAndDrain StopPolicy = "HoldAndDrain"
)

// ClusterQueueSpec is the quota a ClusterQueue hands out and how.
// +kubebuilder:validation:XValidation:rule="!has(self.resourceGroups) || self.resourceGroups.all(a, self.resourceGroups.all(b, a == b || a.coveredResources.all(r, !(r in b.coveredResources))))",message="a resource may be covered by one resource group only"
// +kubebuilder:validation:XValidation:rule="has(self.cohortName) || !has(self.resourceGroups) || self.resourceGroups.all(g, g.flavors.all(f, f.resources.all(r, !has(r.borrowingLimit) && !has(r.lendingLimit))))",message="borrowingLimit and lendingLimit need spec.cohortName: a ClusterQueue outside a cohort neither borrows nor lends"
type ClusterQueueSpec struct {
	// cohortName is the Cohort this queue shares quota in: it may borrow
	// the unused quota of the cohort's other members (and of the Cohort's
	// own pool), and lends them its own while it does not use it. The
	// Cohort object is optional: a name no Cohort carries makes one
	// without quota or parent. Empty means the queue neither borrows nor
	// lends.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	CohortName string `json:"cohortName,omitempty"`

	// resourceGroups list the quota, flavor by flavor, for groups of
	// resources that are assigned together.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	ResourceGroups []ResourceGroup `json:"resourceGroups,omitempty"`

	// namespaceSelector limits which namespaces may submit to this queue
	// through their LocalQueues. Empty or unset selects every namespace.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`

	// queueingStrategy orders pending workloads. Defaults to BestEffortFIFO.
	// +optional
	// +kubebuilder:default=BestEffortFIFO
	QueueingStrategy QueueingStrategy `json:"queueingStrategy,omitempty"`

	// admissionChecksStrategy names the AdmissionChecks every workload must
	// pass before it is admitted.
	// +optional
	AdmissionChecksStrategy *AdmissionChecksStrategy `json:"admissionChecksStrategy,omitempty"`

	// stopPolicy holds or drains the queue. Defaults to None.
	// +optional
	// +kubebuilder:default=None
	StopPolicy *StopPolicy `json:"stopPolicy,omitempty"`

	// waitForPodsReady gives the workloads this queue admits a start-up
	// deadline: a workload whose pods have not all started (by condition)
	// within timeout of its admission is evicted whole and requeued with
	// backoff. When set it replaces the admitter's cluster default as a
	// whole; unset means the default applies.
	// +optional
	WaitForPodsReady *WaitForPodsReady `json:"waitForPodsReady,omitempty"`

	// preemption says which admitted workloads a pending workload of this
	// queue may evict to fit: lower-priority ones of this queue, and those
	// of other queues of its cohort that hold quota beyond their nominal
	// quota. Unset preempts nothing.
	// +optional
	Preemption *ClusterQueuePreemption `json:"preemption,omitempty"`

	// flavorFungibility says whether a workload that could fit a flavor
	// only by borrowing, or only by preempting, tries the next flavor
	// first.
	// +optional
	FlavorFungibility *FlavorFungibility `json:"flavorFungibility,omitempty"`

	// podGroupReplacementWindow is how long a pod group that holds quota in
	// this queue may be left without any pod before that quota is given
	// back. Pods of the group created within the window (a controller
	// re-creating them) keep its admission; once the window passed with
	// still no pod, its Workload is deleted and the quota released. Zero
	// gives the quota back as soon as the group has no pod. Unset means the
	// admitter's default (--pod-group-replacement-window, 30s unless set).
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="podGroupReplacementWindow must not be negative"
	PodGroupReplacementWindow *metav1.Duration `json:"podGroupReplacementWindow,omitempty"`

	// fairSharing is the queue's weight in fair sharing among the members
	// of its cohort, when the admitter runs with --fair-sharing.
	// +optional
	FairSharing *FairSharing `json:"fairSharing,omitempty"`
}

// FairSharing is the weight of a ClusterQueue or Cohort in fair sharing:
// the share of what its cohort lends that a node borrows is divided by
// its weight, so that a node of weight 3 may borrow three times what a
// node of weight 1 borrows before the two count as even.
type FairSharing struct {
	// weight divides the node's share of what its cohort lends. 0 makes
	// the share infinite as soon as the node borrows: it borrows only
	// what nobody else wants and is the first to give it back. Defaults
	// to 1; a weight must be 0 or at least 1n (0.000000001), and a
	// quantity rounds any smaller positive value up to 1n.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('0')) == 0 || !quantity(string(self)).isLessThan(quantity('1n'))",message="weight must be 0 or at least 1n (0.000000001)"
	Weight *resource.Quantity `json:"weight,omitempty"`
}

// FairSharingStatus is the fair-sharing state of a ClusterQueue or
// Cohort.
type FairSharingStatus struct {
	// weightedShare is the node's dominant resource share divided by its
	// weight, rounded up: the most, over resources, of what it borrows
	// beyond its quota per 1000 of what its parent cohort could lend it
	// of that resource. 0 when it borrows nothing; 9223372036854775807
	// (the largest int64) for a weight of 0 while it borrows.
	WeightedShare int64 `json:"weightedShare"`
}

// PreemptionPolicy says which workloads may be preempted.
type PreemptionPolicy string

const (
	// PreemptionNever preempts nothing.
	PreemptionNever PreemptionPolicy = "Never"
	// PreemptionLowerPriority preempts workloads of lower priority.
	PreemptionLowerPriority PreemptionPolicy = "LowerPriority"
	// PreemptionLowerOrNewerEqualPriority also preempts workloads of equal
	// priority that were queued after the pending one.
	PreemptionLowerOrNewerEqualPriority PreemptionPolicy = "LowerOrNewerEqualPriority"
	// PreemptionAny preempts any workload that borrows.
	PreemptionAny PreemptionPolicy = "Any"
)

// ClusterQueuePreemption is a ClusterQueue's preemption policy. A victim
// is evicted (reason Preempted) and keeps its quota until its pods stop;
// the pending workload waits for that.
// +kubebuilder:validation:XValidation:rule="!(self.?reclaimWithinCohort.orValue('Never') == 'Never' && self.?borrowWithinCohort.?policy.orValue('Never') != 'Never')",message="borrowWithinCohort needs reclaimWithinCohort other than Never: preempting to borrow reclaims quota from other queues"
type ClusterQueuePreemption struct {
	// reclaimWithinCohort: which workloads of other queues of the cohort
	// that hold quota beyond their nominal quota may be preempted so that
	// a pending workload fits: Never, LowerPriority or Any. Defaults to
	// Never.
	// +optional
	// +kubebuilder:default=Never
	// +kubebuilder:validation:Enum=Never;LowerPriority;Any
	ReclaimWithinCohort PreemptionPolicy `json:"reclaimWithinCohort,omitempty"`

	// borrowWithinCohort: whether a pending workload that borrows may
	// preempt workloads of other queues to borrow in their place.
	// +optional
	BorrowWithinCohort *BorrowWithinCohort `json:"borrowWithinCohort,omitempty"`

	// withinClusterQueue: which workloads of this queue may be preempted
	// for a pending one: Never, LowerPriority or LowerOrNewerEqualPriority.
	// Defaults to Never.
	// +optional
	// +kubebuilder:default=Never
	// +kubebuilder:validation:Enum=Never;LowerPriority;LowerOrNewerEqualPriority
	WithinClusterQueue PreemptionPolicy `json:"withinClusterQueue,omitempty"`
}

// BorrowWithinCohort lets a pending workload that must borrow preempt
// lower-priority workloads of other queues that borrow.
type BorrowWithinCohort struct {
	// policy: Never or LowerPriority. Defaults to Never.
	// +optional
	// +kubebuilder:default=Never
	// +kubebuilder:validation:Enum=Never;LowerPriority
	Policy PreemptionPolicy `json:"policy,omitempty"`

	// maxPriorityThreshold, when set, protects workloads whose priority is
	// above it from such preemption.
	// +optional
	MaxPriorityThreshold *int32 `json:"maxPriorityThreshold,omitempty"`
}

// FlavorFungibilityPolicy says whether to look further than a flavor.
// +kubebuilder:validation:Enum=MayStopSearch;TryNextFlavor
type FlavorFungibilityPolicy string

const (
	// MayStopSearch takes the flavor.
	MayStopSearch FlavorFungibilityPolicy = "MayStopSearch"
	// TryNextFlavor tries the next flavor first, and comes back to this
	// one only if none fits better.
	TryNextFlavor FlavorFungibilityPolicy = "TryNextFlavor"
)

// FlavorFungibility says how a workload chooses among a resource group's
// flavors when the first it fits needs borrowing or preemption.
type FlavorFungibility struct {
	// whenCanBorrow: MayStopSearch (the default) takes a flavor the
	// workload fits by borrowing; TryNextFlavor looks for one it fits
	// without.
	// +optional
	// +kubebuilder:default=MayStopSearch
	WhenCanBorrow FlavorFungibilityPolicy `json:"whenCanBorrow,omitempty"`

	// whenCanPreempt: TryNextFlavor (the default) looks for a flavor the
	// workload fits without preempting; MayStopSearch preempts in the
	// first flavor where preemption makes it fit.
	// +optional
	// +kubebuilder:default=TryNextFlavor
	WhenCanPreempt FlavorFungibilityPolicy `json:"whenCanPreempt,omitempty"`
}

// PodsStartedCondition is what counts as a started pod.
// +kubebuilder:validation:Enum=PodsScheduled;PodsReady
type PodsStartedCondition string

const (
	// PodsScheduled: a pod started once it is bound to a node.
	PodsScheduled PodsStartedCondition = "PodsScheduled"
	// PodsReady: a pod started once its Ready condition is True.
	PodsReady PodsStartedCondition = "PodsReady"
)

// WaitForPodsReady is a start-up deadline and what follows missing it.
type WaitForPodsReady struct {
	// timeout is how long after its admission every pod of a workload has
	// to start. Zero turns the deadline off for this queue.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="timeout must not be negative"
	Timeout metav1.Duration `json:"timeout"`

	// condition is what counts as started: PodsScheduled (bound to a node)
	// or PodsReady (Ready condition True). Defaults to PodsReady.
	// +optional
	// +kubebuilder:default=PodsReady
	Condition PodsStartedCondition `json:"condition,omitempty"`

	// requeuingStrategy is the backoff of the requeues after a missed
	// deadline, and their limit.
	// +optional
	RequeuingStrategy *RequeuingStrategy `json:"requeuingStrategy,omitempty"`
}

// RequeuingStrategy is the backoff of requeues after a missed start-up
// deadline: the n-th requeue waits min(backoffBaseSeconds * 2^(n-1),
// backoffMaxSeconds).
type RequeuingStrategy struct {
	// backoffBaseSeconds is the wait before the first requeue. Defaults
	// to 60.
	// +optional
	// +kubebuilder:validation:Minimum=1
	BackoffBaseSeconds *int32 `json:"backoffBaseSeconds,omitempty"`

	// backoffMaxSeconds caps the wait. Defaults to 3600.
	// +optional
	// +kubebuilder:validation:Minimum=1
	BackoffMaxSeconds *int32 `json:"backoffMaxSeconds,omitempty"`

	// backoffLimitCount is how many requeues are allowed; the next missed
	// deadline deactivates the workload (spec.active=false) instead.
	// Unset requeues forever.
	// +optional
	// +kubebuilder:validation:Minimum=0
	BackoffLimitCount *int32 `json:"backoffLimitCount,omitempty"`
}

// AdmissionChecksStrategy lists the AdmissionChecks of a ClusterQueue.
type AdmissionChecksStrategy struct {
	// admissionChecks are the checks to run, by AdmissionCheck name.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	AdmissionChecks []AdmissionCheckStrategyRule `json:"admissionChecks"`
}

// AdmissionCheckStrategyRule names one AdmissionCheck and the flavors it
// applies to.
type AdmissionCheckStrategyRule struct {
	// name of the AdmissionCheck.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`

	// onFlavors limits the check to workloads assigned one of these
	// flavors. Empty means every workload.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	OnFlavors []string `json:"onFlavors,omitempty"`
}

// ResourceGroup is a set of resources that are assigned one flavor together,
// with the quota each flavor offers for them.
// +kubebuilder:validation:XValidation:rule="self.flavors.all(f, size(f.resources) == size(self.coveredResources) && f.resources.all(r, r.name in self.coveredResources))",message="every flavor must list quota for exactly the resources in coveredResources"
type ResourceGroup struct {
	// coveredResources are the resources this group gives quota for.
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	CoveredResources []corev1.ResourceName `json:"coveredResources"`

	// flavors are tried in this order for every pod set.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	Flavors []FlavorQuotas `json:"flavors"`
}

// FlavorQuotas is the quota of one flavor.
type FlavorQuotas struct {
	// name of the ResourceFlavor.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`

	// resources are the quotas per covered resource.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	Resources []ResourceQuota `json:"resources"`
}

// ResourceQuota is the quota of one resource in one flavor.
type ResourceQuota struct {
	// name of the resource, such as cpu or memory.
	Name corev1.ResourceName `json:"name"`

	// nominalQuota is how much of the resource admitted workloads may use
	// at once. It must not be negative; the admitter marks a ClusterQueue
	// with a negative quota inactive. (The schema cannot refuse it: CEL
	// rules on int-or-string fields exceed the API server's cost budget.)
	NominalQuota resource.Quantity `json:"nominalQuota"`

	// borrowingLimit caps how much more than its nominal quota this queue
	// (or, on a Cohort, this cohort's subtree) may take from its parent
	// cohort. Unset means no cap beyond what the cohort has unused. Only
	// with a cohort (parentName on a Cohort).
	// +optional
	BorrowingLimit *resource.Quantity `json:"borrowingLimit,omitempty"`

	// lendingLimit caps how much of the nominal quota (on a Cohort: of
	// the subtree's quota) the parent cohort may lend to others; the rest
	// is kept for this queue (or subtree) alone. Unset lends all of it
	// while unused, so others may hold it when this queue wants it back.
	// On a ClusterQueue it must not exceed nominalQuota; a queue whose
	// lendingLimit does, is inactive. Only with a cohort (parentName on a
	// Cohort).
	// +optional
	LendingLimit *resource.Quantity `json:"lendingLimit,omitempty"`
}

// ClusterQueueStatus reports what a ClusterQueue holds.
type ClusterQueueStatus struct {
	// conditions: Active tells whether the queue can admit, and why not.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// pendingWorkloads is the number of workloads waiting for quota.
	// +optional
	// +kubebuilder:default=0
	PendingWorkloads int32 `json:"pendingWorkloads"`

	// reservingWorkloads is the number of workloads holding quota.
	// +optional
	// +kubebuilder:default=0
	ReservingWorkloads int32 `json:"reservingWorkloads"`

	// admittedWorkloads is the number of admitted workloads.
	// +optional
	// +kubebuilder:default=0
	AdmittedWorkloads int32 `json:"admittedWorkloads"`

	// flavorsReservation is the quota held per flavor and resource,
	// including workloads still waiting for their admission checks, what
	// of it is borrowed beyond the nominal quota, and what of the nominal
	// quota others in the cohort hold.
	// +optional
	// +listType=map
	// +listMapKey=name
	FlavorsReservation []FlavorUsage `json:"flavorsReservation,omitempty"`

	// fairSharing is the queue's share, while the admitter runs with
	// --fair-sharing; unset otherwise.
	// +optional
	FairSharing *FairSharingStatus `json:"fairSharing,omitempty"`
}

// FlavorUsage is the quota used in one flavor.
type FlavorUsage struct {
	// name of the flavor.
	Name string `json:"name"`
	// resources used, per resource.
	// +listType=map
	// +listMapKey=name
	Resources []ResourceUsage `json:"resources"`
}

// ResourceUsage is the quota used of one resource.
type ResourceUsage struct {
	// name of the resource.
	Name corev1.ResourceName `json:"name"`
	// total quantity in use.
	Total resource.Quantity `json:"total,omitempty"`
	// borrowed is the part of total beyond the nominal quota, taken from
	// the cohort (for a Cohort: beyond its subtree's quota, taken from its
	// parent).
	// +optional
	Borrowed *resource.Quantity `json:"borrowed,omitempty"`
	// lent is the part of the lendable quota (nominal quota beyond what a
	// lendingLimit keeps) that others in the cohort hold: what is
	// unavailable to this queue (or subtree) until they give it back.
	// +optional
	Lent *resource.Quantity `json:"lent,omitempty"`
}

// ClusterQueue condition types.
const (
	// ClusterQueueActive is True when the queue can admit workloads.
	ClusterQueueActive = "Active"
)

// ReasonCohortCycle is the Active condition's reason on ClusterQueues and
// Cohorts whose chain of parents loops: their quota cannot be computed,
// so nothing below the loop is admitted until it is broken.
const ReasonCohortCycle = "CohortCycle"

// +genclient
// +genclient:nonNamespaced
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName={cq},categories=sluice
// +kubebuilder:printcolumn:name="Cohort",type=string,JSONPath=`.spec.cohortName`
// +kubebuilder:printcolumn:name="Strategy",type=string,JSONPath=`.spec.queueingStrategy`,priority=1
// +kubebuilder:printcolumn:name="Active",type=string,JSONPath=`.status.conditions[?(@.type=="Active")].status`
// +kubebuilder:printcolumn:name="Pending",type=integer,JSONPath=`.status.pendingWorkloads`
// +kubebuilder:printcolumn:name="Reserving",type=integer,JSONPath=`.status.reservingWorkloads`
// +kubebuilder:printcolumn:name="Admitted",type=integer,JSONPath=`.status.admittedWorkloads`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// ClusterQueue is a pool of quota, per flavor, that workloads from
// LocalQueues are admitted against.
type ClusterQueue struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the quota and the policy.
	// +optional
	Spec ClusterQueueSpec `json:"spec,omitempty"`
	// status is what the queue holds, written by the admitter.
	// +optional
	Status ClusterQueueStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// ClusterQueueList is a list of ClusterQueues.
type ClusterQueueList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterQueue `json:"items"`
}
