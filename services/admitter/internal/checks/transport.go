package checks

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/mtls"
)

// DefaultCAKey is the key of spec.tls.caSecretRef's Secret that holds the
// CA bundle when the reference names none (the API server defaults it
// too): the key cert-manager writes.
const DefaultCAKey = "ca.crt"

// TLSError is a failure to secure the connection to a provider: its
// transport settings cannot be used (Reason v1alpha1.ReasonTLSConfigInvalid)
// or the TLS handshake failed (v1alpha1.ReasonTLSHandshakeFailed). Unlike
// a provider that cannot be reached, it is never covered by failurePolicy
// Ignore: a provider that cannot be verified may not be the provider.
type TLSError struct {
	Reason string
	Err    error
}

func (e *TLSError) Error() string {
	if e.Reason == v1alpha1.ReasonTLSHandshakeFailed {
		return "TLS handshake with the provider failed: " + e.Err.Error()
	}
	return "the provider's transport settings cannot be used: " + e.Err.Error()
}

func (e *TLSError) Unwrap() error { return e.Err }

// GRPCStatus makes status.Code say UNAVAILABLE: no call reached the
// provider.
func (e *TLSError) GRPCStatus() *status.Status { return status.New(codes.Unavailable, e.Error()) }

// AsTLSError returns the TLSError in err's chain, if any.
func AsTLSError(err error) (*TLSError, bool) {
	var te *TLSError
	ok := errors.As(err, &te)
	return te, ok
}

func configInvalid(format string, args ...any) *TLSError {
	return &TLSError{Reason: v1alpha1.ReasonTLSConfigInvalid, Err: fmt.Errorf(format, args...)}
}

// UsesSecret reports whether ac's spec.tls names the Secret (in the
// namespace sluice runs in).
func UsesSecret(ac *v1alpha1.AdmissionCheck, name string) bool {
	t := ac.Spec.TLS
	if t == nil {
		return false
	}
	return (t.CASecretRef != nil && t.CASecretRef.Name == name) ||
		(t.ClientCertificateSecretRef != nil && t.ClientCertificateSecretRef.Name == name)
}

// transport is how a provider is dialled, with the TLS material resolved
// from an AdmissionCheck's spec and the Secrets it names.
type transport struct {
	plaintext bool
	// serverName is spec.tls.serverName; empty verifies the endpoint's
	// host, as gRPC takes it from the target.
	serverName string
	caPEM      []byte
	// certPEM and keyPEM are the client certificate (mutual TLS), or nil.
	certPEM, keyPEM []byte
	// caSource and certSource say where the material came from, for
	// errors; they are not part of the fingerprint.
	caSource, certSource string
}

// plaintextFingerprint is the fingerprint of every plaintext transport.
const plaintextFingerprint = "plaintext"

// fingerprint identifies the material, so that a connection is reused
// only by calls that would dial it the same way: a rotated Secret or a
// changed spec.tls gets a connection of its own.
func (t transport) fingerprint() string {
	if t.plaintext {
		return plaintextFingerprint
	}
	h := sha256.New()
	for _, part := range [][]byte{[]byte(t.serverName), t.caPEM, t.certPEM, t.keyPEM} {
		// Length-prefixed, so that bytes moved from one part to the next
		// change the sum.
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write(part)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// credentials parses the material into TLS client credentials: TLS 1.2 or
// later, the provider's certificate verified against the CA bundle and
// the server name, and the client certificate presented when there is
// one. Its errors are TLSConfigInvalid.
func (t transport) credentials() (credentials.TransportCredentials, error) {
	roots, err := mtls.CertPool(t.caPEM)
	if err != nil {
		return nil, configInvalid("%s: %w", t.caSource, err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots, ServerName: t.serverName}
	if t.certPEM != nil {
		pair, err := tls.X509KeyPair(t.certPEM, t.keyPEM)
		if err != nil {
			return nil, configInvalid("%s: %w", t.certSource, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return credentials.NewTLS(cfg), nil
}

// secretSource reads the Secrets spec.tls names, in the namespace sluice
// runs in. A zero secretSource reads none.
type secretSource struct {
	reader    client.Reader
	namespace string
}

// secretsOption carries WithSecrets' reader to NewPool; it does nothing by
// itself.
type secretsOption struct {
	grpc.EmptyDialOption
	source secretSource
}

// WithSecrets makes the pool read the Secrets that AdmissionChecks'
// spec.tls names through reader (the manager's cache), in namespace, the
// one sluice runs in. Without it a spec.tls naming a Secret fails with
// TLSConfigInvalid; an inline caBundle needs no Secret. It takes effect
// only when passed to NewPool.
func WithSecrets(reader client.Reader, namespace string) grpc.DialOption {
	return secretsOption{source: secretSource{reader: reader, namespace: namespace}}
}

// transport resolves how to dial ac's provider. Plaintext is allowed only
// without spec.tls, and only to a loopback endpoint or with
// spec.insecurePlaintext: the API server refuses anything else, but an
// AdmissionCheck stored under an older CRD may still say it. Its errors
// are TLSConfigInvalid.
func (s secretSource) transport(ctx context.Context, ac *v1alpha1.AdmissionCheck) (transport, error) {
	spec := ac.Spec
	switch {
	case spec.TLS != nil && spec.InsecurePlaintext:
		return transport{}, configInvalid("spec.tls and spec.insecurePlaintext are mutually exclusive")
	case spec.TLS == nil && (spec.InsecurePlaintext || mtls.LoopbackTarget(spec.Endpoint)):
		return transport{plaintext: true}, nil
	case spec.TLS == nil:
		return transport{}, configInvalid("spec.endpoint %s is not on loopback, so plaintext is refused: set spec.tls, or spec.insecurePlaintext: true", spec.Endpoint)
	}
	t := transport{serverName: spec.TLS.ServerName}
	if err := s.caBundle(ctx, spec.TLS, &t); err != nil {
		return transport{}, err
	}
	if ref := spec.TLS.ClientCertificateSecretRef; ref != nil {
		const field = "spec.tls.clientCertificateSecretRef"
		data, err := s.secretKeys(ctx, field, ref.Name, corev1.TLSCertKey, corev1.TLSPrivateKeyKey)
		if err != nil {
			return transport{}, err
		}
		t.certPEM, t.keyPEM = data[0], data[1]
		t.certSource = fmt.Sprintf("%s (Secret %s/%s, keys %s and %s)", field, s.namespace, ref.Name, corev1.TLSCertKey, corev1.TLSPrivateKeyKey)
	}
	return t, nil
}

// caBundle sets t's CA bundle, the PEM that verifies the provider, from
// spec.tls.
func (s secretSource) caBundle(ctx context.Context, spec *v1alpha1.ProviderTLS, t *transport) error {
	switch {
	case (spec.CABundle != "") == (spec.CASecretRef != nil):
		return configInvalid("spec.tls needs exactly one of caBundle and caSecretRef")
	case spec.CABundle != "":
		t.caPEM, t.caSource = []byte(spec.CABundle), "spec.tls.caBundle"
		return nil
	}
	const field = "spec.tls.caSecretRef"
	key := spec.CASecretRef.Key
	if key == "" {
		key = DefaultCAKey
	}
	data, err := s.secretKeys(ctx, field, spec.CASecretRef.Name, key)
	if err != nil {
		return err
	}
	t.caPEM = data[0]
	t.caSource = fmt.Sprintf("%s (Secret %s/%s, key %s)", field, s.namespace, spec.CASecretRef.Name, key)
	return nil
}

// secretKeys reads the named keys of Secret name; field names the
// reference in errors.
func (s secretSource) secretKeys(ctx context.Context, field, name string, keys ...string) ([][]byte, error) {
	if s.reader == nil {
		return nil, configInvalid("%s: Secret %s cannot be read: this admitter reads no Secrets", field, name)
	}
	var secret corev1.Secret
	if err := s.reader.Get(ctx, client.ObjectKey{Namespace: s.namespace, Name: name}, &secret); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, configInvalid("%s: Secret %s/%s not found", field, s.namespace, name)
		}
		return nil, configInvalid("%s: read Secret %s/%s: %w", field, s.namespace, name, err)
	}
	out := make([][]byte, len(keys))
	for i, k := range keys {
		v, ok := secret.Data[k]
		if !ok || len(v) == 0 {
			return nil, configInvalid("%s: Secret %s/%s has no key %s (it has: %s)", field, s.namespace, name, k, secretKeyList(&secret))
		}
		out[i] = v
	}
	return out, nil
}

// secretKeyList names a Secret's keys (never its values), for errors.
func secretKeyList(s *corev1.Secret) string {
	keys := slices.Sorted(maps.Keys(s.Data))
	if len(keys) == 0 {
		return "no keys"
	}
	return strings.Join(keys, ", ")
}
