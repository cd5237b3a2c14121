package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the API group and version of every kind in this package.
var GroupVersion = schema.GroupVersion{Group: "sluice.dev", Version: "v1alpha1"}

// AddToScheme registers this package's kinds with a scheme.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&ResourceFlavor{}, &ResourceFlavorList{},
		&ClusterQueue{}, &ClusterQueueList{},
		&Cohort{}, &CohortList{},
		&LocalQueue{}, &LocalQueueList{},
		&AdmissionCheck{}, &AdmissionCheckList{},
		&Workload{}, &WorkloadList{},
		&WorkloadPriorityClass{}, &WorkloadPriorityClassList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
