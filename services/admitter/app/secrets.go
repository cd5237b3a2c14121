package app

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// providerSecrets scopes the Secret informer to what AdmissionChecks'
// spec.tls may name: Secrets in the namespace sluice runs in, never
// ServiceAccount tokens (no provider's TLS material, and credentials the
// admitter has no business holding), trimmed to their data.
func providerSecrets(namespace string) cache.ByObject {
	return cache.ByObject{
		Namespaces: map[string]cache.Config{namespace: {}},
		Field:      fields.OneTermNotEqualSelector("type", string(corev1.SecretTypeServiceAccountToken)),
		Transform:  trimSecret,
	}
}

// trimSecret keeps of a Secret what the admitter reads: its name, version
// and data. Annotations go, kubectl's last-applied-configuration (a second
// copy of the data) among them.
func trimSecret(obj any) (any, error) {
	s, ok := obj.(*corev1.Secret)
	if !ok {
		return obj, nil
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: s.Name, Namespace: s.Namespace, UID: s.UID, ResourceVersion: s.ResourceVersion,
		},
		Type: s.Type,
		Data: s.Data,
	}, nil
}
