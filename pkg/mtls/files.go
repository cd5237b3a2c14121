package mtls

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/tls/certprovider"
	"google.golang.org/grpc/security/advancedtls"
)

// DefaultRefresh is how often the files are read again unless Files says
// otherwise. cert-manager renews a certificate well before it expires (a
// third of its life by default), so a minute is far inside any renewal
// window while costing nothing.
const DefaultRefresh = time.Minute

// Files names the PEM files of one side of a mutual-TLS connection: its own
// certificate chain and key, and the CA bundle that signs its peers.
type Files struct {
	// CertFile holds the certificate chain presented to peers.
	CertFile string
	// KeyFile holds CertFile's private key.
	KeyFile string
	// CAFile holds the CA certificates a peer's certificate must chain to.
	CAFile string
	// Refresh is how often the three files are read again; zero means
	// DefaultRefresh.
	Refresh time.Duration

	flagPrefix string // how the flags were named, for errors; empty means "--tls-"
}

// BindFlags registers --tls-cert-file, --tls-key-file, --tls-ca-file and
// --tls-refresh-interval on fs and returns the Files they will hold once fs
// is parsed. peer says whom the CA file verifies ("the grouper's client
// certificates", say), for the help text.
func BindFlags(fs *flag.FlagSet, peer string) *Files {
	f := &Files{flagPrefix: "--tls-"}
	fs.StringVar(&f.CertFile, "tls-cert-file", "", "PEM certificate chain this service presents (mutual TLS; read again while running)")
	fs.StringVar(&f.KeyFile, "tls-key-file", "", "PEM private key of --tls-cert-file")
	fs.StringVar(&f.CAFile, "tls-ca-file", "", "PEM CA bundle that verifies "+peer)
	fs.DurationVar(&f.Refresh, "tls-refresh-interval", DefaultRefresh, "how often the TLS files are read again, so rotated certificates apply without a restart")
	return f
}

// Enabled reports whether any file is named: TLS is wanted.
func (f *Files) Enabled() bool {
	return f != nil && (f.CertFile != "" || f.KeyFile != "" || f.CAFile != "")
}

// flag names a field in errors as the command line knows it: --tls-<name>
// unless the flags were bound with another prefix.
func (f *Files) flag(name string) string {
	if f.flagPrefix == "" {
		return "--tls-" + name
	}
	return f.flagPrefix + name
}

// Validate checks that all three files are named and load: the key
// matches the certificate and lies in its directory, and the CA file holds
// at least one certificate.
// Its errors name the flag and the rule.
func (f *Files) Validate() error {
	var missing []error
	for _, n := range []struct{ name, value string }{{"cert-file", f.CertFile}, {"key-file", f.KeyFile}, {"ca-file", f.CAFile}} {
		if n.value == "" {
			missing = append(missing, fmt.Errorf("%s is required with mutual TLS (set all of %s, %s and %s)",
				f.flag(n.name), f.flag("cert-file"), f.flag("key-file"), f.flag("ca-file")))
		}
	}
	if len(missing) > 0 {
		return errors.Join(missing...)
	}
	return f.load()
}

// CertPool parses a PEM bundle that must hold at least one CA certificate.
func CertPool(pemBytes []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemBytes) {
		return nil, errors.New("holds no PEM certificate")
	}
	return pool, nil
}

// provider validates the files and starts the watcher that reads them
// every Refresh.
func (f *Files) provider() (certprovider.Provider, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	return f.watch()
}

// Credentials are transport credentials that read their files again every
// refresh interval. Close stops the reading; connections made before keep
// the certificates they were made with.
type Credentials struct {
	credentials.TransportCredentials
	provider certprovider.Provider
}

// Close stops watching the files.
func (c *Credentials) Close() { c.provider.Close() }

// ServerCredentials serves mutual TLS: the server presents CertFile and
// accepts only clients whose certificate chains to CAFile. Which of those
// clients may call what is for the server's authorization to decide (see
// Callers).
func (f *Files) ServerCredentials() (*Credentials, error) {
	p, err := f.provider()
	if err != nil {
		return nil, err
	}
	creds, err := advancedtls.NewServerCreds(&advancedtls.Options{
		IdentityOptions:   advancedtls.IdentityCertificateOptions{IdentityProvider: p},
		RootOptions:       advancedtls.RootCertificateOptions{RootProvider: p},
		RequireClientCert: true,
		VerificationType:  advancedtls.CertVerification,
		MinTLSVersion:     tls.VersionTLS13,
		MaxTLSVersion:     tls.VersionTLS13,
	})
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("mutual TLS server credentials: %w", err)
	}
	return &Credentials{TransportCredentials: creds, provider: p}, nil
}

// ClientCredentials dials with mutual TLS: the client presents CertFile
// and accepts only a server whose certificate chains to CAFile and names
// the host it dials. To expect another name, dial with grpc.WithAuthority.
func (f *Files) ClientCredentials() (*Credentials, error) {
	p, err := f.provider()
	if err != nil {
		return nil, err
	}
	creds, err := advancedtls.NewClientCreds(&advancedtls.Options{
		IdentityOptions:  advancedtls.IdentityCertificateOptions{IdentityProvider: p},
		RootOptions:      advancedtls.RootCertificateOptions{RootProvider: p},
		VerificationType: advancedtls.CertAndHostVerification,
		MinTLSVersion:    tls.VersionTLS13,
		MaxTLSVersion:    tls.VersionTLS13,
	})
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("mutual TLS client credentials: %w", err)
	}
	return &Credentials{TransportCredentials: creds, provider: p}, nil
}
