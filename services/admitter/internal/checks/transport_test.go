package checks

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/internal/devca"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

// testNamespace is the namespace sluice runs in, for the tests.
const testNamespace = "sluice-system"

// secretStore is a client.Reader of Secrets held in memory, safe for
// concurrent use; tests change Secrets with put as the cache would see
// them change.
type secretStore struct {
	mu      sync.Mutex
	secrets map[client.ObjectKey]*corev1.Secret
}

func newSecretStore(secrets ...*corev1.Secret) *secretStore {
	s := &secretStore{secrets: map[client.ObjectKey]*corev1.Secret{}}
	for _, sec := range secrets {
		s.put(sec)
	}
	return s
}

func (s *secretStore) put(sec *corev1.Secret) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.secrets[client.ObjectKeyFromObject(sec)] = sec.DeepCopy()
}

func (s *secretStore) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	out, ok := obj.(*corev1.Secret)
	if !ok {
		return fmt.Errorf("secretStore reads Secrets only, not %T", obj)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sec, ok := s.secrets[key]
	if !ok {
		return apierrors.NewNotFound(corev1.Resource("secrets"), key.Name)
	}
	sec.DeepCopyInto(out)
	return nil
}

func (s *secretStore) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return errors.New("secretStore does not list")
}

func secret(namespace, name string, data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Data: data}
}

// tlsSecret is a kubernetes.io/tls Secret holding leaf.
func tlsSecret(name string, leaf devca.Leaf) *corev1.Secret {
	s := secret(testNamespace, name, map[string][]byte{corev1.TLSCertKey: leaf.CertPEM, corev1.TLSPrivateKeyKey: leaf.KeyPEM})
	s.Type = corev1.SecretTypeTLS
	return s
}

// testPKI is a CA and a client certificate it issued.
type testPKI struct {
	ca     *devca.CA
	client devca.Leaf
}

func newTestPKI(t *testing.T, name string) testPKI {
	t.Helper()
	ca, err := devca.New(name, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue(devca.Request{CommonName: "sluice-admitter", Life: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return testPKI{ca: ca, client: leaf}
}

// tlsCheck is an AdmissionCheck on endpoint with spec.tls.
func tlsCheck(endpoint string, tls v1alpha1.ProviderTLS) *v1alpha1.AdmissionCheck {
	ac := checkFor(endpoint)
	ac.Spec.TLS = &tls
	return ac
}

// insecurePlaintext sets ac's spec.insecurePlaintext.
func insecurePlaintext(ac *v1alpha1.AdmissionCheck) *v1alpha1.AdmissionCheck {
	ac.Spec.InsecurePlaintext = true
	return ac
}

// resolve resolves ac's transport and, for TLS, builds its credentials, as
// the pool does before it dials.
func resolve(ctx context.Context, src secretSource, ac *v1alpha1.AdmissionCheck) (transport, error) {
	tr, err := src.transport(ctx, ac)
	if err != nil || tr.plaintext {
		return tr, err
	}
	if _, err := tr.credentials(); err != nil {
		return transport{}, err
	}
	return tr, nil
}

func TestTransport(t *testing.T) {
	pki := newTestPKI(t, "provider CA")
	caPEM := pki.ca.CertPEM
	const remote = "dns:///checks.vendor-system:9091"
	secrets := newSecretStore(
		secret(testNamespace, "ca-default-key", map[string][]byte{"ca.crt": caPEM, "tls.crt": []byte("unused")}),
		secret(testNamespace, "ca-custom-key", map[string][]byte{"bundle.pem": caPEM}),
		secret(testNamespace, "ca-not-pem", map[string][]byte{"ca.crt": []byte("not PEM")}),
		secret("elsewhere", "ca-elsewhere", map[string][]byte{"ca.crt": caPEM}),
		tlsSecret("client", pki.client),
		secret(testNamespace, "client-without-key", map[string][]byte{corev1.TLSCertKey: pki.client.CertPEM}),
		tlsSecret("client-mismatched", devca.Leaf{CertPEM: pki.client.CertPEM, KeyPEM: newTestPKI(t, "other").client.KeyPEM}),
	)
	inlineCA := v1alpha1.ProviderTLS{CABundle: string(caPEM)}
	tests := []struct {
		name   string
		ac     *v1alpha1.AdmissionCheck
		noRead bool // the pool reads no Secrets
		// wantErr are substrings of the TLSConfigInvalid error; none: resolved.
		wantErr        []string
		wantPlaintext  bool
		wantServerName string
		wantClientCert bool
	}{
		{name: "inline CA", ac: tlsCheck(remote, inlineCA)},
		{name: "inline CA and server name", ac: tlsCheck(remote, v1alpha1.ProviderTLS{CABundle: string(caPEM), ServerName: "checks.example"}),
			wantServerName: "checks.example"},
		{name: "CA Secret, default key", ac: tlsCheck(remote, v1alpha1.ProviderTLS{CASecretRef: &v1alpha1.SecretKeyReference{Name: "ca-default-key"}})},
		{name: "CA Secret, custom key", ac: tlsCheck(remote, v1alpha1.ProviderTLS{CASecretRef: &v1alpha1.SecretKeyReference{Name: "ca-custom-key", Key: "bundle.pem"}})},
		{name: "missing CA Secret", ac: tlsCheck(remote, v1alpha1.ProviderTLS{CASecretRef: &v1alpha1.SecretKeyReference{Name: "nowhere"}}),
			wantErr: []string{"spec.tls.caSecretRef", "Secret sluice-system/nowhere not found"}},
		{name: "CA Secret in another namespace is not read",
			ac:      tlsCheck(remote, v1alpha1.ProviderTLS{CASecretRef: &v1alpha1.SecretKeyReference{Name: "ca-elsewhere"}}),
			wantErr: []string{"Secret sluice-system/ca-elsewhere not found"}},
		{name: "missing CA key", ac: tlsCheck(remote, v1alpha1.ProviderTLS{CASecretRef: &v1alpha1.SecretKeyReference{Name: "ca-custom-key"}}),
			wantErr: []string{"spec.tls.caSecretRef", "Secret sluice-system/ca-custom-key has no key ca.crt (it has: bundle.pem)"}},
		{name: "CA Secret that is not PEM", ac: tlsCheck(remote, v1alpha1.ProviderTLS{CASecretRef: &v1alpha1.SecretKeyReference{Name: "ca-not-pem"}}),
			wantErr: []string{"spec.tls.caSecretRef (Secret sluice-system/ca-not-pem, key ca.crt): holds no PEM certificate"}},
		{name: "inline CA that is not PEM", ac: tlsCheck(remote, v1alpha1.ProviderTLS{CABundle: "-----BEGIN NOTHING-----"}),
			wantErr: []string{"spec.tls.caBundle: holds no PEM certificate"}},
		{name: "no CA", ac: tlsCheck(remote, v1alpha1.ProviderTLS{ServerName: "x"}),
			wantErr: []string{"exactly one of caBundle and caSecretRef"}},
		{name: "two CAs", ac: tlsCheck(remote, v1alpha1.ProviderTLS{CABundle: string(caPEM), CASecretRef: &v1alpha1.SecretKeyReference{Name: "ca-default-key"}}),
			wantErr: []string{"exactly one of caBundle and caSecretRef"}},
		{name: "client certificate", ac: tlsCheck(remote, v1alpha1.ProviderTLS{CABundle: string(caPEM), ClientCertificateSecretRef: &v1alpha1.SecretReference{Name: "client"}}),
			wantClientCert: true},
		{name: "missing client certificate Secret",
			ac:      tlsCheck(remote, v1alpha1.ProviderTLS{CABundle: string(caPEM), ClientCertificateSecretRef: &v1alpha1.SecretReference{Name: "nowhere"}}),
			wantErr: []string{"spec.tls.clientCertificateSecretRef: Secret sluice-system/nowhere not found"}},
		{name: "client certificate without its key",
			ac:      tlsCheck(remote, v1alpha1.ProviderTLS{CABundle: string(caPEM), ClientCertificateSecretRef: &v1alpha1.SecretReference{Name: "client-without-key"}}),
			wantErr: []string{"Secret sluice-system/client-without-key has no key tls.key (it has: tls.crt)"}},
		{name: "client certificate with another key",
			ac:      tlsCheck(remote, v1alpha1.ProviderTLS{CABundle: string(caPEM), ClientCertificateSecretRef: &v1alpha1.SecretReference{Name: "client-mismatched"}}),
			wantErr: []string{"spec.tls.clientCertificateSecretRef (Secret sluice-system/client-mismatched, keys tls.crt and tls.key)", "private key does not match public key"}},
		{name: "a Secret without a reader", noRead: true,
			ac:      tlsCheck(remote, v1alpha1.ProviderTLS{CASecretRef: &v1alpha1.SecretKeyReference{Name: "ca-default-key"}}),
			wantErr: []string{"this admitter reads no Secrets"}},
		{name: "an inline CA without a reader", noRead: true, ac: tlsCheck(remote, inlineCA)},
		{name: "plaintext to loopback", ac: checkFor("dns:///127.0.0.1:9091"), wantPlaintext: true},
		{name: "plaintext to a unix socket", ac: checkFor("unix:///run/provider.sock"), wantPlaintext: true},
		{name: "plaintext refused off loopback", ac: checkFor(remote),
			wantErr: []string{"spec.endpoint dns:///checks.vendor-system:9091 is not on loopback, so plaintext is refused", "spec.insecurePlaintext"}},
		{name: "a name that only starts like localhost is not loopback", ac: checkFor("dns:///localhost.evil.example:9091"),
			wantErr: []string{"plaintext is refused"}},
		{name: "plaintext allowed off loopback by insecurePlaintext",
			ac: insecurePlaintext(checkFor(remote)), wantPlaintext: true},
		{name: "tls and insecurePlaintext together",
			ac:      insecurePlaintext(tlsCheck(remote, inlineCA)),
			wantErr: []string{"spec.tls and spec.insecurePlaintext are mutually exclusive"}},
		{name: "TLS to loopback when asked", ac: tlsCheck("127.0.0.1:9091", inlineCA)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := secretSource{reader: secrets, namespace: testNamespace}
			if tc.noRead {
				src = secretSource{}
			}
			tr, err := resolve(context.Background(), src, tc.ac)
			if len(tc.wantErr) > 0 {
				tlsErr, ok := AsTLSError(err)
				if !ok || tlsErr.Reason != v1alpha1.ReasonTLSConfigInvalid {
					t.Fatalf("error %v, want a TLSError with reason %s", err, v1alpha1.ReasonTLSConfigInvalid)
				}
				for _, want := range tc.wantErr {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q, want it to contain %q", err, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if tr.plaintext != tc.wantPlaintext {
				t.Fatalf("plaintext %v, want %v", tr.plaintext, tc.wantPlaintext)
			}
			if tr.plaintext {
				if tr.fingerprint() != plaintextFingerprint {
					t.Errorf("plaintext fingerprint %q, want %q", tr.fingerprint(), plaintextFingerprint)
				}
				return
			}
			if string(tr.caPEM) != string(caPEM) {
				t.Errorf("CA bundle %q, want the provider CA's", tr.caPEM)
			}
			if tr.serverName != tc.wantServerName {
				t.Errorf("server name %q, want %q", tr.serverName, tc.wantServerName)
			}
			if got := tr.certPEM != nil && tr.keyPEM != nil; got != tc.wantClientCert {
				t.Errorf("client certificate %v, want %v", got, tc.wantClientCert)
			}
		})
	}
}

// TestTransportFingerprint checks that a connection's key follows the
// material: a changed Secret, client certificate or server name gives a
// new fingerprint, the same material the same one.
func TestTransportFingerprint(t *testing.T) {
	first, second := newTestPKI(t, "first CA"), newTestPKI(t, "second CA")
	secrets := newSecretStore(
		secret(testNamespace, "ca", map[string][]byte{"ca.crt": first.ca.CertPEM}),
		tlsSecret("client", first.client),
	)
	src := secretSource{reader: secrets, namespace: testNamespace}
	ac := tlsCheck("dns:///checks.vendor-system:9091", v1alpha1.ProviderTLS{
		CASecretRef:                &v1alpha1.SecretKeyReference{Name: "ca"},
		ClientCertificateSecretRef: &v1alpha1.SecretReference{Name: "client"},
	})
	fingerprint := func(ac *v1alpha1.AdmissionCheck) string {
		t.Helper()
		tr, err := resolve(context.Background(), src, ac)
		if err != nil {
			t.Fatal(err)
		}
		return tr.fingerprint()
	}

	original := fingerprint(ac)
	if again := fingerprint(ac); again != original {
		t.Fatalf("same material: fingerprints %s and %s, want equal", original, again)
	}
	seen := map[string]string{original: "original"}
	change := func(what string, f func()) {
		t.Helper()
		f()
		got := fingerprint(ac)
		if prev, ok := seen[got]; ok {
			t.Fatalf("after %s: fingerprint %s, the same as %s", what, got, prev)
		}
		seen[got] = what
	}
	change("the CA Secret's data changed", func() {
		secrets.put(secret(testNamespace, "ca", map[string][]byte{"ca.crt": append(first.ca.CertPEM, second.ca.CertPEM...)}))
	})
	change("the client certificate was rotated", func() { secrets.put(tlsSecret("client", second.client)) })
	change("the server name was set", func() { ac.Spec.TLS.ServerName = "checks.example" })
	change("the client certificate was dropped", func() { ac.Spec.TLS.ClientCertificateSecretRef = nil })
}

func TestUsesSecret(t *testing.T) {
	both := tlsCheck("dns:///x:1", v1alpha1.ProviderTLS{
		CASecretRef:                &v1alpha1.SecretKeyReference{Name: "ca"},
		ClientCertificateSecretRef: &v1alpha1.SecretReference{Name: "client"},
	})
	tests := []struct {
		name   string
		ac     *v1alpha1.AdmissionCheck
		secret string
		want   bool
	}{
		{"CA Secret", both, "ca", true},
		{"client certificate Secret", both, "client", true},
		{"another Secret", both, "other", false},
		{"inline CA", tlsCheck("dns:///x:1", v1alpha1.ProviderTLS{CABundle: "pem"}), "ca", false},
		{"plaintext", checkFor("127.0.0.1:1"), "ca", false},
	}
	for _, tc := range tests {
		if got := UsesSecret(tc.ac, tc.secret); got != tc.want {
			t.Errorf("%s: UsesSecret(%q) = %v, want %v", tc.name, tc.secret, got, tc.want)
		}
	}
}
