package kube

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

// Scheme returns a scheme with Kubernetes' built-in types and sluice's
// sluice.dev/v1alpha1 kinds, for clients that read and write both.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("add client-go scheme: %w", err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("add sluice.dev/v1alpha1 scheme: %w", err)
	}
	return s, nil
}
