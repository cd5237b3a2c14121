package harness

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sluice-dev/sluice/internal/devca"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/mtls"
)

// AdmitterTLSSecret is the kubernetes.io/tls Secret in SystemNamespace
// that holds the admitter's certificate, key and CA (ca.crt), as
// cert-manager writes it in a cluster. AdmissionChecks of the built-in
// providers name it for both the CA and the client certificate.
const AdmitterTLSSecret = "sluice-admitter-tls"

// certLife is how long the harness's service certificates are valid:
// longer than any test run.
const certLife = 7 * 24 * time.Hour

// IssueIdentities creates a CA in dir/ca (or reuses the one there, so that
// restarted services keep trusting each other), issues each service its
// identity into dir/<service>, and stores the admitter's as
// AdmitterTLSSecret.
func IssueIdentities(ctx context.Context, cfg *rest.Config, dir string) error {
	if err := issueIdentityFiles(dir); err != nil {
		return err
	}
	return storeIdentity(ctx, cfg, filepath.Join(dir, "admitter"), AdmitterTLSSecret)
}

// issueIdentityFiles is IssueIdentities without the Secret: the CA in
// dir/ca and each service's identity in dir/<service>.
func issueIdentityFiles(dir string) error {
	caDir := filepath.Join(dir, "ca")
	ca, err := devca.Load(caDir)
	if errors.Is(err, fs.ErrNotExist) {
		if ca, err = devca.New("sluice test CA", certLife); err != nil {
			return err
		}
		err = ca.WriteCA(caDir)
	}
	if err != nil {
		return err
	}
	return ca.IssueServices(dir, mtls.DefaultTrustDomain, SystemNamespace, certLife)
}

// storeIdentity creates or replaces Secret name from the identity files in
// dir.
func storeIdentity(ctx context.Context, cfg *rest.Config, dir, name string) error {
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: SystemNamespace},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{},
	}
	for _, f := range []string{devca.CertFile, devca.KeyFile, devca.CAFile} {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return fmt.Errorf("harness: %w", err)
		}
		secret.Data[f] = data
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("harness: clientset: %w", err)
	}
	secrets := cs.CoreV1().Secrets(SystemNamespace)
	_, err = secrets.Create(ctx, secret, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = secrets.Update(ctx, secret, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("harness: store Secret %s/%s: %w", SystemNamespace, name, err)
	}
	return nil
}

// tlsArgs are the flags that give service its identity from dir.
func tlsArgs(dir, service string) []string {
	d := filepath.Join(dir, service)
	return []string{
		"--tls-cert-file", filepath.Join(d, devca.CertFile),
		"--tls-key-file", filepath.Join(d, devca.KeyFile),
		"--tls-ca-file", filepath.Join(d, devca.CAFile),
	}
}

// admitterIdentity is the identity (URI SAN) IssueIdentities gives the
// admitter's certificate: the SPIFFE ID of its ServiceAccount in
// SystemNamespace, as cert-manager gives it in deploy/.
func admitterIdentity() string {
	return mtls.ServiceIdentity(mtls.DefaultTrustDomain, SystemNamespace, ServiceAccount("admitter"))
}

// checksTLSArgs are the checks service's flags for mutual TLS: its
// identity from dir, and the one caller it serves, the admitter. The
// admitter's identity is named outright, so that it is the one
// IssueIdentities gave, whatever the service's default.
func checksTLSArgs(dir string) []string {
	return append(tlsArgs(dir, "checks"), "--admitter-identity", admitterIdentity())
}

// ChecksTLS is the spec.tls of an AdmissionCheck that reaches the built-in
// providers (ChecksTarget): mutual TLS with the admitter's certificate.
func (s *Sluice) ChecksTLS() *v1alpha1.ProviderTLS {
	return &v1alpha1.ProviderTLS{
		CASecretRef:                &v1alpha1.SecretKeyReference{Name: AdmitterTLSSecret, Key: devca.CAFile},
		ClientCertificateSecretRef: &v1alpha1.SecretReference{Name: AdmitterTLSSecret},
	}
}
