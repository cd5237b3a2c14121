package v1alpha1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// FailurePolicy says what a provider that cannot be reached means.
// +kubebuilder:validation:Enum=Fail;Ignore
type FailurePolicy string

const (
	// FailClosed keeps the workload pending while the provider cannot
	// answer, with a message that says why. It is the default.
	FailClosed FailurePolicy = "Fail"
	// IgnoreFailure treats a provider that cannot answer as Ready without
	// updates. Use it only for advisory checks. It never covers TLS
	// failures (see AdmissionCheckSpec.FailurePolicy).
	IgnoreFailure FailurePolicy = "Ignore"
)

// AdmissionCheckSpec says where a check's provider is and how to call it.
// +kubebuilder:validation:XValidation:rule="!(has(self.tls) && has(self.insecurePlaintext) && self.insecurePlaintext)",message="tls and insecurePlaintext are mutually exclusive"
// +kubebuilder:validation:XValidation:rule="has(self.tls) || (has(self.insecurePlaintext) && self.insecurePlaintext) || self.endpoint.matches('^(unix:|unix-abstract:|((dns|passthrough):(//[^/]*)?/)?(localhost|127([.][0-9]{1,3}){3}|[[]::1[]])(:[0-9]+)?$)')",message="a provider that is not on loopback needs tls (or insecurePlaintext: true to allow plaintext)"
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
	// Ignore counts such a provider as Ready without updates, but never a
	// TLS failure: when spec.tls cannot be used (a Secret or key missing,
	// a PEM that does not parse, plaintext refused) or the provider's
	// certificate does not verify, the workload waits whatever the policy,
	// because a provider that cannot be verified may not be the provider.
	// +optional
	// +kubebuilder:default=Fail
	FailurePolicy FailurePolicy `json:"failurePolicy,omitempty"`

	// retry sets the backoff between calls while the provider fails.
	// +optional
	Retry *RetryPolicy `json:"retry,omitempty"`

	// tls secures the connection to the provider: the CA that signs its
	// certificate and, for mutual TLS, the certificate the admitter
	// presents. Without it the connection is plaintext, which is allowed
	// only to a loopback endpoint or with insecurePlaintext.
	// +optional
	TLS *ProviderTLS `json:"tls,omitempty"`

	// insecurePlaintext allows a plaintext connection to a provider that is
	// not on loopback. Anyone on the path can then read the workloads and
	// forge the provider's answers; use it only inside a network that is
	// itself encrypted and trusted.
	// +optional
	InsecurePlaintext bool `json:"insecurePlaintext,omitempty"`
}

// ProviderTLS is how the admitter checks the provider's certificate and
// which certificate it presents. Secrets are read from the namespace sluice
// runs in and are read again when they change.
// +kubebuilder:validation:XValidation:rule="has(self.caBundle) != has(self.caSecretRef)",message="exactly one of caBundle and caSecretRef must be set"
type ProviderTLS struct {
	// serverName is the name the provider's certificate must hold.
	// Defaults to the host of spec.endpoint.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ServerName string `json:"serverName,omitempty"`

	// caBundle is the PEM bundle of CA certificates that sign the
	// provider's certificate.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=65536
	CABundle string `json:"caBundle,omitempty"`

	// caSecretRef names a Secret in sluice's namespace that holds the CA
	// bundle, such as a cert-manager Certificate's Secret (key ca.crt).
	// +optional
	CASecretRef *SecretKeyReference `json:"caSecretRef,omitempty"`

	// clientCertificateSecretRef names a kubernetes.io/tls Secret in
	// sluice's namespace whose certificate (tls.crt, tls.key) the admitter
	// presents to the provider: mutual TLS.
	// +optional
	ClientCertificateSecretRef *SecretReference `json:"clientCertificateSecretRef,omitempty"`
}

// SecretKeyReference is one key of a Secret in sluice's namespace.
type SecretKeyReference struct {
	// name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// key in the Secret's data. Defaults to ca.crt.
	// +optional
	// +kubebuilder:default="ca.crt"
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key,omitempty"`
}

// SecretReference is a Secret in sluice's namespace.
type SecretReference struct {
	// name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
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

	// owedReleases are Releases that deleted Workloads owed this check's
	// provider when their deletion could wait for it no longer. The
	// admitter delivers them when the provider answers again and then
	// removes them. While the list is full, deletions wait for the
	// provider.
	// +optional
	// +listType=map
	// +listMapKey=uid
	// +listMapKey=reservationID
	// +kubebuilder:validation:MaxItems=1000
	OwedReleases []OwedRelease `json:"owedReleases,omitempty"`
}

// OwedRelease is a Release owed for a Workload that is gone.
type OwedRelease struct {
	// namespace of the Workload.
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
	// name of the Workload.
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// uid of the Workload.
	UID types.UID `json:"uid"`
	// reservationID of the reservation released.
	// +kubebuilder:validation:MaxLength=64
	ReservationID string `json:"reservationID"`
	// reason the reservation was given up.
	Reason ReleaseReason `json:"reason"`
	// since is when the Workload's deletion stopped waiting for it.
	Since metav1.Time `json:"since"`
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
	// contractRevision is the revision of sluice.checks.v1 the provider is
	// written against; the admitter sends it only what that revision
	// knows. 1 is the first release.
	// +optional
	ContractRevision int32 `json:"contractRevision,omitempty"`
}

// AdmissionCheck condition types.
const (
	// AdmissionCheckActive is True when the provider is reachable.
	AdmissionCheckActive = "Active"
)

// Reasons of an Active condition, and of a workload's check state, when
// the connection to the provider cannot be secured. failurePolicy Ignore
// does not cover them.
const (
	// ReasonTLSConfigInvalid: spec.tls cannot be used — a Secret or key is
	// missing, a PEM bundle or key pair does not parse — or the spec asks
	// for plaintext to an endpoint that is not on loopback.
	ReasonTLSConfigInvalid = "TLSConfigInvalid"
	// ReasonTLSHandshakeFailed: the TLS handshake with the provider failed,
	// such as when its certificate does not verify against the CA bundle
	// (x509: certificate signed by unknown authority) or does not name the
	// server name, or when the provider refused the client certificate.
	ReasonTLSHandshakeFailed = "TLSHandshakeFailed"
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
