package mtls

import (
	"context"
	"crypto/x509"
	"fmt"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// DefaultTrustDomain is the SPIFFE trust domain of sluice's identities
// unless a service is told another.
const DefaultTrustDomain = "cluster.local"

// ServiceIdentity is the identity a sluice service's certificate carries
// as its URI SAN: the SPIFFE ID of its ServiceAccount,
// spiffe://<trust domain>/ns/<namespace>/sa/<service account>.
func ServiceIdentity(trustDomain, namespace, serviceAccount string) string {
	return fmt.Sprintf("spiffe://%s/ns/%s/sa/%s", trustDomain, namespace, serviceAccount)
}

// PeerIdentities returns the URI SANs of the certificate the caller of ctx
// presented, verified against the server's CA. ok is false when the call
// came without TLS or without a verified client certificate.
func PeerIdentities(ctx context.Context) (ids []string, ok bool) {
	p, found := peer.FromContext(ctx)
	if !found {
		return nil, false
	}
	info, isTLS := p.AuthInfo.(credentials.TLSInfo)
	if !isTLS || len(info.State.VerifiedChains) == 0 || len(info.State.PeerCertificates) == 0 {
		return nil, false
	}
	return uris(info.State.PeerCertificates[0]), true
}

func uris(c *x509.Certificate) []string {
	out := make([]string, 0, len(c.URIs))
	for _, u := range c.URIs {
		out = append(out, u.String())
	}
	return out
}
