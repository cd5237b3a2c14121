package fakecheck

import (
	"crypto/tls"
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/internal/devca"
	"github.com/sluice-dev/sluice/pkg/mtls"
)

// certLife is how long LoopbackTLS's certificates are valid: longer than
// any test.
const certLife = 24 * time.Hour

// LoopbackTLS is a server TLS configuration for a fake on loopback (pass
// it to WithTLS): a certificate that ca issues for 127.0.0.1, ::1 and
// localhost. With clientCAs (a PEM bundle) it requires mutual TLS: every
// client must present a certificate that one of them signs.
func LoopbackTLS(ca *devca.CA, clientCAs []byte) (*tls.Config, error) {
	leaf, err := ca.Issue(devca.Request{
		CommonName: ProviderName, DNSNames: devca.LoopbackNames, IPs: devca.LoopbackIPs(), Life: certLife,
	})
	if err != nil {
		return nil, fmt.Errorf("fakecheck: %w", err)
	}
	cert, err := tls.X509KeyPair(leaf.CertPEM, leaf.KeyPEM)
	if err != nil {
		return nil, fmt.Errorf("fakecheck: %w", err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	if clientCAs != nil {
		if cfg.ClientCAs, err = mtls.CertPool(clientCAs); err != nil {
			return nil, fmt.Errorf("fakecheck: client CAs: %w", err)
		}
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}
