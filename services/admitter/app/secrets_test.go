package app

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
)

func TestProviderSecrets(t *testing.T) {
	scope := providerSecrets("sluice-system")
	if _, ok := scope.Namespaces["sluice-system"]; !ok || len(scope.Namespaces) != 1 {
		t.Errorf("namespaces %v, want only sluice-system", scope.Namespaces)
	}
	for _, tc := range []struct {
		typ  corev1.SecretType
		want bool
	}{
		{corev1.SecretTypeTLS, true},
		{corev1.SecretTypeOpaque, true},
		{corev1.SecretTypeServiceAccountToken, false},
	} {
		if got := scope.Field.Matches(fields.Set{"type": string(tc.typ)}); got != tc.want {
			t.Errorf("field selector %q matches a %s Secret: %v, want %v", scope.Field, tc.typ, got, tc.want)
		}
	}
}

func TestTrimSecret(t *testing.T) {
	data := map[string][]byte{"ca.crt": []byte("pem")}
	in := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: "ca", Namespace: "sluice-system", UID: "u", ResourceVersion: "7",
			Labels:        map[string]string{"app": "x"},
			Annotations:   map[string]string{"kubectl.kubernetes.io/last-applied-configuration": `{"data":{"ca.crt":"cGVt"}}`},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
		},
		Type: corev1.SecretTypeOpaque,
		Data: data,
	}
	got, err := trimSecret(in)
	if err != nil {
		t.Fatal(err)
	}
	want := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "ca", Namespace: "sluice-system", UID: "u", ResourceVersion: "7"},
		Type:       corev1.SecretTypeOpaque,
		Data:       data,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("trimSecret = %+v, want %+v", got, want)
	}
	if other, err := trimSecret("not a Secret"); err != nil || other != "not a Secret" {
		t.Fatalf("trimSecret of another object = %v, %v; want it back as it was", other, err)
	}
}
