// Package v1alpha1 holds sluice's API types, group sluice.dev version
// v1alpha1: ResourceFlavor, ClusterQueue, LocalQueue, AdmissionCheck and
// Workload. Field names follow Kueue's kueue.x-k8s.io/v1beta2 API wherever the
// concept exists, so a Kueue user reads them at a glance.
//
// +kubebuilder:object:generate=true
// +groupName=sluice.dev
package v1alpha1
