// Command sluice-certs issues the certificates a local sluice runs with:
// it creates a local CA in <dir>/ca once (or reuses it) and writes each
// service's identity (tls.crt, tls.key, ca.crt) to <dir>/<service>/.
// Running it again renews the service certificates under the same CA, and
// running services pick them up without a restart. hack/sluice-up.sh runs
// it; in a cluster cert-manager does this job.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/sluice-dev/sluice/internal/devca"
	"github.com/sluice-dev/sluice/pkg/mtls"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "sluice-certs: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	dir := flag.String("dir", ".local/certs", "directory of the CA and the service identities")
	namespace := flag.String("namespace", "sluice-system", "namespace of the services' ServiceAccounts, in their identities")
	trustDomain := flag.String("trust-domain", mtls.DefaultTrustDomain, "SPIFFE trust domain of the identities")
	life := flag.Duration("life", 30*24*time.Hour, "validity of each service certificate")
	flag.Parse()

	caDir := filepath.Join(*dir, "ca")
	ca, err := devca.Load(caDir)
	if errors.Is(err, fs.ErrNotExist) {
		if ca, err = devca.New("sluice local CA", 10*365*24*time.Hour); err != nil {
			return err
		}
		if err := ca.WriteCA(caDir); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	return ca.IssueServices(*dir, *trustDomain, *namespace, *life)
}
