package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// LocalQueueSpec points a namespace's queue at a ClusterQueue.
type LocalQueueSpec struct {
	// clusterQueue is the ClusterQueue this queue submits to.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="clusterQueue is immutable"
	ClusterQueue string `json:"clusterQueue"`

	// stopPolicy holds or drains the queue. Defaults to None.
	// +optional
	// +kubebuilder:default=None
	StopPolicy *StopPolicy `json:"stopPolicy,omitempty"`
}

// LocalQueueStatus reports what a LocalQueue holds.
type LocalQueueStatus struct {
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
}

// +genclient
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName={lq,queue,queues},categories=sluice
// +kubebuilder:printcolumn:name="ClusterQueue",type=string,JSONPath=`.spec.clusterQueue`
// +kubebuilder:printcolumn:name="Pending",type=integer,JSONPath=`.status.pendingWorkloads`
// +kubebuilder:printcolumn:name="Admitted",type=integer,JSONPath=`.status.admittedWorkloads`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// LocalQueue is the queue users in one namespace submit pods to, with the
// label kueue.x-k8s.io/queue-name.
type LocalQueue struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec names the ClusterQueue.
	Spec LocalQueueSpec `json:"spec"`
	// status is what the queue holds, written by the admitter.
	// +optional
	Status LocalQueueStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// LocalQueueList is a list of LocalQueues.
type LocalQueueList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []LocalQueue `json:"items"`
}
