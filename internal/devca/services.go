package devca

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/sluice-dev/sluice/pkg/mtls"
)

// Services are the sluice services that speak gRPC and so get an
// identity, each named as its ServiceAccount is (sluice-<service>).
var Services = []string{"admitter", "grouper", "checks"}

// IssueServices issues each of Services a certificate for its identity in
// namespace (mtls.ServiceIdentity with trustDomain), valid for life on the
// loopback names and on its in-cluster Service names, and writes it with
// the CA bundle to dir/<service>/.
func (ca *CA) IssueServices(dir, trustDomain, namespace string, life time.Duration) error {
	for _, svc := range Services {
		sa := "sluice-" + svc
		leaf, err := ca.Issue(Request{
			CommonName: sa,
			URIs:       []string{mtls.ServiceIdentity(trustDomain, namespace, sa)},
			DNSNames: append([]string{sa + "." + namespace, sa + "." + namespace + ".svc"},
				LoopbackNames...),
			IPs:  LoopbackIPs(),
			Life: life,
		})
		if err != nil {
			return fmt.Errorf("devca: issue %s: %w", svc, err)
		}
		if err := WriteIdentity(filepath.Join(dir, svc), leaf, ca.CertPEM); err != nil {
			return err
		}
	}
	return nil
}
