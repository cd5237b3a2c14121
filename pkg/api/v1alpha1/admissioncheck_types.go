package v1alpha1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FailurePolicy says what a provider that cannot be reached means.
// +kubebuilder:validation:Enum=Fail;Ignore
type FailurePolicy string

const (
	// FailClosed keeps the workload pending while the provider cannot
	// answer, with a message that says why. It is the default.
	FailClosed FailurePolicy = "Fail"
	// IgnoreFailure treats a provider that cannot answer as Ready without
	// updates. Use it only for advisory checks.
	IgnoreFailure FailurePolicy = "Ignore"
)

// AdmissionCheckSpec says where a check's provider is and how to call it.
type AdmissionCheckSpec struct {
	// endpoint is the gRPC target of the provider that serves
	// sluice.checks.v1, for example dns:///checks.sluice-system:9090.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="!self.contains(' ')",message="endpoint must be a gRPC target without spaces, such as dns:///checks.sluice-system:9090"
	Endpoint string `json:"endpoint"`

	// parameters are passed to the provider as they are, with every call.
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Type=object
	Parameters *apiextensionsv1.JSON `json:"parameters,omitempty"`

	// timeout bounds each call to the provider. Defaults to 10s.
	// +optional
	// +kubebuilder:default="10s"
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// failurePolicy says what happens when the provider cannot be reached
	// or answers with an error. Defaults to Fail: the workload waits.
	// +optional
	// +kubebuilder:default=Fail
	FailurePolicy FailurePolicy `json:"failurePolicy,omitempty"`

	// retry sets the backoff between calls while the provider fails.
	// +optional
	Retry *RetryPolicy `json:"retry,omitempty"`
}

// RetryPolicy is an exponential backoff.
type RetryPolicy struct {
	// initialBackoff is the wait after the first failure. Defaults to 1s.
	// +optional
	// +kubebuilder:default="1s"
	InitialBackoff *metav1.Duration `json:"initialBackoff,omitempty"`
	// maxBackoff caps the wait. Defaults to 5m.
	// +optional
	// +kubebuilder:default="5m"
	MaxBackoff *metav1.Duration `json:"maxBackoff,omitempty"`
}

// AdmissionCheckStatus reports the provider as the admitter sees it.
type AdmissionCheckStatus struct {
	// conditions: Active is True when the provider answered its probe with
	// a contract version the admitter speaks.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// provider is what the provider said of itself.
	// +optional
	Provider *ProviderInfo `json:"provider,omitempty"`
}

// ProviderInfo is a provider's identity.
type ProviderInfo struct {
	// name of the provider, a DNS subdomain such as nodepool.checks.sluice.dev.
	Name string `json:"name"`
	// version of the provider's own software.
	// +optional
	Version string `json:"version,omitempty"`
	// contractVersions the provider speaks, such as sluice.checks.v1.
	// +optional
	// +listType=set
	ContractVersions []string `json:"contractVersions,omitempty"`
	// capabilities the provider advertises.
	// +optional
	// +listType=set
	Capabilities []string `json:"capabilities,omitempty"`
}

// AdmissionCheck condition types.
const (
	// AdmissionCheckActive is True when the provider is reachable.
	AdmissionCheckActive = "Active"
)

// +genclient
// +genclient:nonNamespaced
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName={ac,check,checks},categories=sluice
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.spec.endpoint`
// +kubebuilder:printcolumn:name="Active",type=string,JSONPath=`.status.conditions[?(@.type=="Active")].status`
// +kubebuilder:printcolumn:name="Provider",type=string,JSONPath=`.status.provider.name`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// AdmissionCheck is a gate every workload of the ClusterQueues that name it
// must pass, answered by a provider over sluice.checks.v1.
type AdmissionCheck struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec says where the provider is.
	Spec AdmissionCheckSpec `json:"spec"`
	// status is written by the admitter.
	// +optional
	Status AdmissionCheckStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// AdmissionCheckList is a list of AdmissionChecks.
type AdmissionCheckList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AdmissionCheck `json:"items"`
}
