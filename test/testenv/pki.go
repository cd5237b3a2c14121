package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

const (
	adminUser  = "admin"
	adminGroup = "system:masters"
	certLife   = 10 * 365 * 24 * time.Hour
)

// credentials are what clients need: the CA to trust and the admin token.
type credentials struct {
	caPEM []byte
	token string
}

// ensureCredentials creates the CA, the loopback serving certificate, the
// service-account signing key and the admin token, or reuses them when a
// persistent state dir already has them (so kubeconfigs and issued
// service-account tokens stay valid across restarts).
func ensureCredentials(f layout) (credentials, error) {
	files := []string{f.caCert, f.caKey, f.servingCert, f.servingKey, f.saKey, f.saPub, f.tokenCSV, f.token}
	if allExist(files) {
		ca, err := os.ReadFile(f.caCert)
		if err != nil {
			return credentials{}, fmt.Errorf("testenv: read CA: %w", err)
		}
		tok, err := os.ReadFile(f.token)
		if err != nil {
			return credentials{}, fmt.Errorf("testenv: read admin token: %w", err)
		}
		return credentials{caPEM: ca, token: strings.TrimSpace(string(tok))}, nil
	}
	if err := os.MkdirAll(filepath.Dir(f.caCert), 0o700); err != nil {
		return credentials{}, fmt.Errorf("testenv: create pki dir: %w", err)
	}
	caKey, caCert, caPEM, err := newCA()
	if err != nil {
		return credentials{}, err
	}
	servingCert, servingKey, err := newServingCert(caKey, caCert)
	if err != nil {
		return credentials{}, err
	}
	saKey, saPub, err := newServiceAccountKey()
	if err != nil {
		return credentials{}, err
	}
	caKeyPEM, err := ecKeyPEM(caKey)
	if err != nil {
		return credentials{}, err
	}
	token, err := randomToken()
	if err != nil {
		return credentials{}, err
	}
	csv := fmt.Sprintf("%s,%s,%s,%q\n", token, adminUser, adminUser, adminGroup)
	for path, data := range map[string][]byte{
		f.caCert: caPEM, f.caKey: caKeyPEM,
		f.servingCert: servingCert, f.servingKey: servingKey,
		f.saKey: saKey, f.saPub: saPub,
		f.tokenCSV: []byte(csv), f.token: []byte(token + "\n"),
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return credentials{}, fmt.Errorf("testenv: write %s: %w", path, err)
		}
	}
	return credentials{caPEM: caPEM, token: token}, nil
}

func allExist(paths []string) bool {
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			return false
		}
	}
	return true
}

func newCA() (*ecdsa.PrivateKey, *x509.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("testenv: CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "sluice-local-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(certLife),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("testenv: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("testenv: parse CA certificate: %w", err)
	}
	return key, cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// newServingCert returns a certificate for every name the components are
// reached by: loopback, and the in-cluster names of the API server.
func newServingCert(caKey *ecdsa.PrivateKey, ca *x509.Certificate) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("testenv: serving key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "sluice-local-control-plane"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(certLife),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local"},
		IPAddresses: []net.IP{net.ParseIP(loopback), net.ParseIP("10.96.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("testenv: serving certificate: %w", err)
	}
	keyPEM, err = ecKeyPEM(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

func newServiceAccountKey() (keyPEM, pubPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("testenv: service-account key: %w", err)
	}
	keyPEM, err = ecKeyPEM(key)
	if err != nil {
		return nil, nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, nil, fmt.Errorf("testenv: service-account public key: %w", err)
	}
	return keyPEM, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), nil
}

func ecKeyPEM(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("testenv: encode key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

func randomToken() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("testenv: admin token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// adminConfig is the admin client configuration for the API server.
func adminConfig(url string, c credentials) *rest.Config {
	return &rest.Config{
		Host:            url,
		BearerToken:     c.token,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.caPEM},
		QPS:             ClientQPS,
		Burst:           ClientBurst,
	}
}

// writeConfigFiles writes the admin kubeconfig and kube-scheduler's
// configuration.
func writeConfigFiles(f layout, url string, c credentials) error {
	const name = "sluice-local"
	kc := clientcmdapi.NewConfig()
	kc.Clusters[name] = &clientcmdapi.Cluster{Server: url, CertificateAuthorityData: c.caPEM}
	kc.AuthInfos[adminUser] = &clientcmdapi.AuthInfo{Token: c.token}
	kc.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: adminUser, Namespace: "default"}
	kc.CurrentContext = name
	if err := clientcmd.WriteToFile(*kc, f.kubeconfig); err != nil {
		return fmt.Errorf("testenv: write kubeconfig: %w", err)
	}
	if err := os.WriteFile(f.schedulerConfig, []byte(schedulerConfig(f)), 0o644); err != nil {
		return fmt.Errorf("testenv: write scheduler config: %w", err)
	}
	return nil
}
