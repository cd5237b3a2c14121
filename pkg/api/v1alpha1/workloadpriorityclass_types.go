package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +genclient
// +genclient:nonNamespaced
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName={wpc},categories=sluice
// +kubebuilder:printcolumn:name="Value",type=integer,JSONPath=`.value`
// +kubebuilder:printcolumn:name="Description",type=string,JSONPath=`.description`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// WorkloadPriorityClass says how urgent a workload is without changing its
// pods' scheduling priority: pods name it with the label
// kueue.x-k8s.io/priority-class, and their Workload is queued (and, with
// preemption, protected) at its value. sluice reads the value when the
// Workload is created; editing it changes the priority of workloads
// created afterwards, not of those already queued or running.
type WorkloadPriorityClass struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// value is the priority of the workloads whose pods name this class:
	// higher is more urgent.
	Value int32 `json:"value"`

	// description says when to use this class, for people.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	Description string `json:"description,omitempty"`
}

// +kubebuilder:object:root=true

// WorkloadPriorityClassList is a list of WorkloadPriorityClasses.
type WorkloadPriorityClassList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []WorkloadPriorityClass `json:"items"`
}
