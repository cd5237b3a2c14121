// Package devca is a small certificate authority for local runs and tests:
// it creates a CA and issues the certificates sluice's services present to
// each other (mutual TLS), each naming its service's SPIFFE identity as a
// URI SAN and the loopback names it serves on. In a cluster cert-manager
// plays this part (deploy/certificates.yaml); devca writes its files in the
// same layout (tls.crt, tls.key, ca.crt) so that services are configured
// the same way in both.
package devca

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// File names of an issued identity, as in a kubernetes.io/tls Secret
// written by cert-manager.
const (
	CertFile = "tls.crt"
	KeyFile  = "tls.key"
	CAFile   = "ca.crt"
)

// caKeyFile is where a CA written by WriteCA keeps its private key.
const caKeyFile = "ca.key"

// CA signs leaf certificates.
type CA struct {
	cert *x509.Certificate
	key  crypto.Signer
	// CertPEM is the CA certificate, the bundle peers trust.
	CertPEM []byte
}

// New creates a CA named commonName, valid for life.
func New(commonName string, life time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("devca: generate CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(life),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("devca: create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("devca: parse CA certificate: %w", err)
	}
	return &CA{cert: cert, key: key, CertPEM: pemBlock("CERTIFICATE", der)}, nil
}

// Load reads a CA that WriteCA wrote to dir.
func Load(dir string) (*CA, error) {
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, CAFile), filepath.Join(dir, caKeyFile))
	if err != nil {
		return nil, fmt.Errorf("devca: load CA from %s: %w", dir, err)
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("devca: CA key in %s cannot sign", dir)
	}
	certPEM, err := os.ReadFile(filepath.Join(dir, CAFile))
	if err != nil {
		return nil, fmt.Errorf("devca: %w", err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("devca: parse CA certificate: %w", err)
	}
	return &CA{cert: cert, key: signer, CertPEM: certPEM}, nil
}

// WriteCA writes the CA's certificate and key to dir (the key readable by
// the owner only).
func (ca *CA) WriteCA(dir string) error {
	keyDER, err := x509.MarshalPKCS8PrivateKey(ca.key)
	if err != nil {
		return fmt.Errorf("devca: encode CA key: %w", err)
	}
	return writeFiles(dir, map[string][]byte{CAFile: ca.CertPEM, caKeyFile: pemBlock("PRIVATE KEY", keyDER)})
}

// Request describes a leaf certificate. It serves and dials: it may be
// used by a server and by a client.
type Request struct {
	// CommonName is informational; identities are in URIs.
	CommonName string
	// URIs are the identities the certificate carries, such as
	// spiffe://cluster.local/ns/sluice-system/sa/sluice-grouper.
	URIs []string
	// DNSNames and IPs are the names a server presenting it answers to.
	DNSNames []string
	IPs      []net.IP
	// Life is how long it is valid from now.
	Life time.Duration
}

// Leaf is an issued certificate and its key, PEM-encoded.
type Leaf struct {
	CertPEM, KeyPEM []byte
}

// Issue signs a certificate for r.
func (ca *CA) Issue(r Request) (Leaf, error) {
	if r.Life <= 0 {
		return Leaf{}, errors.New("devca: Request.Life must be positive")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Leaf{}, fmt.Errorf("devca: generate key: %w", err)
	}
	var uris []*url.URL
	for _, s := range r.URIs {
		u, err := url.Parse(s)
		if err != nil {
			return Leaf{}, fmt.Errorf("devca: URI SAN %q: %w", s, err)
		}
		uris = append(uris, u)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: r.CommonName},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(r.Life),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs:         uris,
		DNSNames:     r.DNSNames,
		IPAddresses:  r.IPs,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return Leaf{}, fmt.Errorf("devca: sign certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return Leaf{}, fmt.Errorf("devca: encode key: %w", err)
	}
	return Leaf{CertPEM: pemBlock("CERTIFICATE", der), KeyPEM: pemBlock("PRIVATE KEY", keyDER)}, nil
}

// WriteIdentity writes leaf and the CA bundle that verifies its peers to
// dir as tls.crt, tls.key and ca.crt. Each file is replaced by a rename,
// so a process that reads them again never sees half a file.
func WriteIdentity(dir string, leaf Leaf, caBundle []byte) error {
	return writeFiles(dir, map[string][]byte{CertFile: leaf.CertPEM, KeyFile: leaf.KeyPEM, CAFile: caBundle})
}

// LoopbackNames are the names a local server answers to.
var LoopbackNames = []string{"localhost"}

// LoopbackIPs are the addresses a local server answers on.
func LoopbackIPs() []net.IP { return []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback} }

func writeFiles(dir string, files map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("devca: %w", err)
	}
	for name, data := range files {
		tmp, err := os.CreateTemp(dir, "."+name+"-")
		if err != nil {
			return fmt.Errorf("devca: %w", err)
		}
		if _, err := tmp.Write(data); err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
			return fmt.Errorf("devca: write %s: %w", name, err)
		}
		if err := tmp.Close(); err != nil {
			os.Remove(tmp.Name())
			return fmt.Errorf("devca: write %s: %w", name, err)
		}
		if err := os.Rename(tmp.Name(), filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("devca: %w", err)
		}
	}
	return nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(fmt.Sprintf("devca: crypto/rand failed: %v", err)) // crypto/rand does not fail on supported platforms
	}
	return n
}
