package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CohortSpec is a Cohort's own quota and its place in the tree of cohorts.
// +kubebuilder:validation:XValidation:rule="!has(self.resourceGroups) || self.resourceGroups.all(a, self.resourceGroups.all(b, a == b || a.coveredResources.all(r, !(r in b.coveredResources))))",message="a resource may be covered by one resource group only"
// +kubebuilder:validation:XValidation:rule="has(self.parentName) || !has(self.resourceGroups) || self.resourceGroups.all(g, g.flavors.all(f, f.resources.all(r, !has(r.borrowingLimit) && !has(r.lendingLimit))))",message="borrowingLimit and lendingLimit need spec.parentName: a Cohort without a parent neither borrows nor lends"
type CohortSpec struct {
	// parentName is the Cohort this one belongs to: its subtree lends the
	// parent what it does not use (within lendingLimit) and borrows from
	// it (within borrowingLimit). A name no Cohort carries makes one
	// without quota or parent. Empty makes this Cohort a root. A chain of
	// parents that loops makes every ClusterQueue below the loop inactive.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	ParentName string `json:"parentName,omitempty"`

	// resourceGroups are the Cohort's own quota: a pool every ClusterQueue
	// below it may borrow from, beyond what its members lend each other.
	// Flavors and resources are matched to the ClusterQueues' by name.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	ResourceGroups []ResourceGroup `json:"resourceGroups,omitempty"`

	// fairSharing is the Cohort's weight in fair sharing among the members
	// of its parent, when the admitter runs with --fair-sharing.
	// +optional
	FairSharing *FairSharing `json:"fairSharing,omitempty"`
}

// CohortStatus reports what a Cohort's subtree holds, written by the
// admitter.
type CohortStatus struct {
	// conditions: Active is False while the Cohort's chain of parents
	// loops (reason CohortCycle).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// flavorsReservation is, per flavor and resource the subtree has quota
	// for, the quota held by the ClusterQueues below the Cohort (total),
	// what the subtree takes from the parent beyond its own quota
	// (borrowed), and what of the quota it lends the parent others hold
	// (lent).
	// +optional
	// +listType=map
	// +listMapKey=name
	FlavorsReservation []FlavorUsage `json:"flavorsReservation,omitempty"`

	// fairSharing is the Cohort's share in its parent, while the admitter
	// runs with --fair-sharing; unset otherwise.
	// +optional
	FairSharing *FairSharingStatus `json:"fairSharing,omitempty"`
}

// +genclient
// +genclient:nonNamespaced
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName={co},categories=sluice
// +kubebuilder:validation:XValidation:rule="!has(self.spec) || !has(self.spec.parentName) || self.spec.parentName != self.metadata.name",message="spec.parentName: a Cohort cannot be its own parent"
// +kubebuilder:printcolumn:name="Parent",type=string,JSONPath=`.spec.parentName`
// +kubebuilder:printcolumn:name="Active",type=string,JSONPath=`.status.conditions[?(@.type=="Active")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// Cohort groups ClusterQueues (and other Cohorts) that share quota: unused
// quota of one member may be borrowed by the others, within the limits
// each sets, and the Cohort may add a pool of its own. Cohorts form a tree
// through parentName.
type Cohort struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the Cohort's quota and parent.
	// +optional
	Spec CohortSpec `json:"spec,omitempty"`
	// status is what the subtree holds, written by the admitter.
	// +optional
	Status CohortStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// CohortList is a list of Cohorts.
type CohortList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Cohort `json:"items"`
}
