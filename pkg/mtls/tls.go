package mtls

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/tls/certprovider"
	"google.golang.org/grpc/credentials/tls/certprovider/pemfile"
	"google.golang.org/grpc/security/advancedtls"
)

// This file serves the other side of sluice's connections: admission-check
// providers, which sluice's admitter dials. A provider serves TLS and may
// require client certificates (the AdmissionCheck's spec.tls names the CA
// and the admitter's certificate), so here the CA file of a server is
// optional, and a client may present no certificate or expect a server
// name other than the host it dials.

// BindServerFlags registers --tls-cert-file, --tls-key-file, --tls-ca-file
// and --tls-refresh-interval, as BindFlags does, for a server that serves
// TLS with the certificate and requires client certificates only when
// --tls-ca-file is set (see ValidateServer). peer says whose certificates
// the CA file verifies, for the help text.
func BindServerFlags(fs *flag.FlagSet, peer string) *Files {
	f := &Files{flagPrefix: "--tls-"}
	fs.StringVar(&f.CertFile, "tls-cert-file", "", "PEM certificate chain to serve TLS with (read again while running); without it the server is plaintext")
	fs.StringVar(&f.KeyFile, "tls-key-file", "", "PEM private key of --tls-cert-file, in the same directory")
	fs.StringVar(&f.CAFile, "tls-ca-file", "", "PEM CA bundle that verifies "+peer+"; with it every client must present a certificate it signs (mutual TLS)")
	fs.DurationVar(&f.Refresh, "tls-refresh-interval", DefaultRefresh, "how often the TLS files are read again, so rotated certificates apply without a restart")
	return f
}

// BindClientFlags registers <prefix>ca-file, <prefix>cert-file and
// <prefix>key-file for a client: the CA bundle that signs the server's
// certificate and, for a server that requires mutual TLS, the certificate
// the client presents (see ValidateClient). server names the server, for
// the help text. The files are read again every DefaultRefresh.
func BindClientFlags(fs *flag.FlagSet, prefix, server string) *Files {
	f := &Files{flagPrefix: "--" + prefix}
	fs.StringVar(&f.CAFile, prefix+"ca-file", "", "PEM CA bundle that signs "+server+"'s certificate; with it the connection is TLS")
	fs.StringVar(&f.CertFile, prefix+"cert-file", "", "PEM client certificate chain to present to "+server+" (mutual TLS)")
	fs.StringVar(&f.KeyFile, prefix+"key-file", "", "PEM private key of --"+prefix+"cert-file, in the same directory")
	return f
}

// ValidateServer checks the files a TLS server needs: CertFile and
// KeyFile, which must load and match, and CAFile only if it is named (then
// it must hold a certificate, and clients must present one it signs). Its
// errors name the flag and the rule.
func (f *Files) ValidateServer() error {
	var errs []error
	if f.CertFile == "" {
		errs = append(errs, fmt.Errorf("%s is required to serve TLS (%s and %s name the server's certificate and key; %s, optional, requires client certificates)",
			f.flag("cert-file"), f.flag("cert-file"), f.flag("key-file"), f.flag("ca-file")))
	}
	if f.KeyFile == "" {
		errs = append(errs, fmt.Errorf("%s is required to serve TLS: the private key of %s", f.flag("key-file"), f.flag("cert-file")))
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return f.load()
}

// ValidateClient checks the files a TLS client needs: CAFile, and CertFile
// and KeyFile together or not at all (without them the client presents no
// certificate, which a server requiring mutual TLS refuses). Its errors
// name the flag and the rule.
func (f *Files) ValidateClient() error {
	var errs []error
	if f.CAFile == "" {
		errs = append(errs, fmt.Errorf("%s is required for TLS: the CA bundle that signs the server's certificate", f.flag("ca-file")))
	}
	if (f.CertFile == "") != (f.KeyFile == "") {
		errs = append(errs, fmt.Errorf("%s and %s go together: the client certificate and its key (mutual TLS)", f.flag("cert-file"), f.flag("key-file")))
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return f.load()
}

// load checks that the named files load: the certificate matches its key
// and sits in the key's directory (the watcher reads the two together, as
// a Secret volume holds them), and the CA file holds a certificate.
func (f *Files) load() error {
	if f.Refresh < 0 {
		return fmt.Errorf("%s must not be negative", f.flag("refresh-interval"))
	}
	if f.CertFile != "" {
		if filepath.Dir(f.CertFile) != filepath.Dir(f.KeyFile) {
			return fmt.Errorf("%s and %s must be in the same directory, so that a rotation replaces both at once", f.flag("cert-file"), f.flag("key-file"))
		}
		if _, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile); err != nil {
			return fmt.Errorf("%s and %s: %w", f.flag("cert-file"), f.flag("key-file"), err)
		}
	}
	if f.CAFile == "" {
		return nil
	}
	ca, err := os.ReadFile(f.CAFile)
	if err != nil {
		return fmt.Errorf("%s: %w", f.flag("ca-file"), err)
	}
	if _, err := CertPool(ca); err != nil {
		return fmt.Errorf("%s %s: %w", f.flag("ca-file"), f.CAFile, err)
	}
	return nil
}

// watch starts reading the named files every Refresh. The files must have
// been validated.
func (f *Files) watch() (certprovider.Provider, error) {
	refresh := f.Refresh
	if refresh == 0 {
		refresh = DefaultRefresh
	}
	p, err := pemfile.NewProvider(pemfile.Options{
		CertFile: f.CertFile, KeyFile: f.KeyFile, RootFile: f.CAFile, RefreshDuration: refresh,
	})
	if err != nil {
		return nil, fmt.Errorf("watch TLS files: %w", err)
	}
	return p, nil
}

// TLSServerCredentials serves TLS with CertFile. With CAFile it accepts
// only clients whose certificate chains to it, as ServerCredentials does;
// without, it asks clients for no certificate.
func (f *Files) TLSServerCredentials() (*Credentials, error) {
	if err := f.ValidateServer(); err != nil {
		return nil, err
	}
	p, err := f.watch()
	if err != nil {
		return nil, err
	}
	opts := &advancedtls.Options{
		IdentityOptions:  advancedtls.IdentityCertificateOptions{IdentityProvider: p},
		VerificationType: advancedtls.CertVerification,
		MinTLSVersion:    tls.VersionTLS13,
		MaxTLSVersion:    tls.VersionTLS13,
	}
	if f.CAFile != "" {
		opts.RootOptions = advancedtls.RootCertificateOptions{RootProvider: p}
		opts.RequireClientCert = true
	}
	creds, err := advancedtls.NewServerCreds(opts)
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("TLS server credentials: %w", err)
	}
	return &Credentials{TransportCredentials: creds, provider: p}, nil
}

// TLSClientCredentials dials TLS: it accepts only a server whose
// certificate chains to CAFile and names serverName, or the host it dials
// when serverName is empty. With CertFile and KeyFile it presents them
// (mutual TLS); without, no certificate. It speaks TLS 1.2 and later, as
// sluice's admitter does to providers it does not build (sluice's own
// servers speak 1.3 only).
func (f *Files) TLSClientCredentials(serverName string) (*Credentials, error) {
	if err := f.ValidateClient(); err != nil {
		return nil, err
	}
	p, err := f.watch()
	if err != nil {
		return nil, err
	}
	opts := &advancedtls.Options{
		RootOptions:      advancedtls.RootCertificateOptions{RootProvider: p},
		VerificationType: advancedtls.CertAndHostVerification,
		MinTLSVersion:    tls.VersionTLS12,
		MaxTLSVersion:    tls.VersionTLS13,
	}
	if f.CertFile != "" {
		opts.IdentityOptions = advancedtls.IdentityCertificateOptions{IdentityProvider: p}
	}
	creds, err := advancedtls.NewClientCreds(opts)
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("TLS client credentials: %w", err)
	}
	if serverName != "" {
		creds = serverNameCredentials{TransportCredentials: creds, name: serverName}
	}
	return &Credentials{TransportCredentials: creds, provider: p}, nil
}

// serverNameCredentials verify the server against a fixed name instead of
// the authority dialled: the name goes into SNI and the host check, while
// the target (and :authority) stay as dialled. grpc.WithAuthority would
// change :authority too.
type serverNameCredentials struct {
	credentials.TransportCredentials
	name string
}

func (c serverNameCredentials) ClientHandshake(ctx context.Context, _ string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return c.TransportCredentials.ClientHandshake(ctx, c.name, raw)
}

func (c serverNameCredentials) Clone() credentials.TransportCredentials {
	return serverNameCredentials{TransportCredentials: c.TransportCredentials.Clone(), name: c.name}
}
