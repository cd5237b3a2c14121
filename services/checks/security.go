package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/go-logr/logr"

	"github.com/sluice-dev/sluice/pkg/mtls"
	"github.com/sluice-dev/sluice/services/checks/sdk"
)

// defaultAdmitterIdentity is the identity the admitter's certificate
// carries in deploy/ (its ServiceAccount's SPIFFE ID): the one caller the
// checks service serves unless --admitter-identity says otherwise.
const defaultAdmitterIdentity = "spiffe://cluster.local/ns/sluice-system/sa/sluice-admitter"

// securityFlags say how the gRPC port is secured and whom it serves. The
// admitter sends workloads and their pod templates there and acts on the
// answers, so the port serves mutual TLS to the admitter's identity alone,
// or plaintext on loopback, where only this machine's processes reach it.
type securityFlags struct {
	tls               *mtls.Files
	insecurePlaintext bool
	admitters         mtls.IdentityList
}

func bindSecurityFlags(fs *flag.FlagSet) *securityFlags {
	f := &securityFlags{}
	f.tls = mtls.BindServerFlags(fs, "the admitter's client certificate (the AdmissionCheck's spec.tls.clientCertificateSecretRef)")
	fs.BoolVar(&f.insecurePlaintext, "insecure-plaintext", false,
		"serve gRPC in plaintext on a --grpc-addr that is not loopback, on purpose: only where the network itself is encrypted and trusted (without TLS flags, plaintext is otherwise served only on loopback)")
	fs.Var(&f.admitters, "admitter-identity",
		"with --tls-ca-file: certificate identity (URI SAN) of the admitter, the only caller served besides health and reflection; repeat for more (default: "+defaultAdmitterIdentity+")")
	return f
}

// validate checks the flags against the rules, for a gRPC port on
// grpcAddr; its errors name the flags and the rule.
func (f *securityFlags) validate(grpcAddr string) error {
	if !f.tls.Enabled() {
		return f.validatePlaintext(grpcAddr)
	}
	if f.insecurePlaintext {
		return errors.New("--insecure-plaintext allows plaintext, and the --tls-* flags serve TLS: choose one")
	}
	if err := f.tls.ValidateServer(); err != nil {
		return err
	}
	if len(f.admitters) > 0 && !f.mutualTLS() {
		return errors.New("--admitter-identity needs mutual TLS: --tls-ca-file names the CA of the client certificates whose identity it checks")
	}
	return nil
}

// validatePlaintext applies the plaintext rule: only on loopback, unless
// --insecure-plaintext.
func (f *securityFlags) validatePlaintext(grpcAddr string) error {
	if len(f.admitters) > 0 {
		return errors.New("--admitter-identity needs mutual TLS: set --tls-cert-file, --tls-key-file and --tls-ca-file")
	}
	if f.insecurePlaintext || mtls.LoopbackAddr(grpcAddr) {
		return nil
	}
	return fmt.Errorf("--grpc-addr %s is not a loopback address, and the checks service serves it without TLS only on loopback: "+
		"set --tls-cert-file, --tls-key-file and --tls-ca-file, or --insecure-plaintext to serve plaintext on purpose", grpcAddr)
}

func (f *securityFlags) mutualTLS() bool { return f.tls.Enabled() && f.tls.CAFile != "" }

// allowedCallers are the identities served with mutual TLS.
func (f *securityFlags) allowedCallers() []string {
	if len(f.admitters) == 0 {
		return []string{defaultAdmitterIdentity}
	}
	return f.admitters
}

// serverOptions are the SDK options that secure the port as the flags say.
func (f *securityFlags) serverOptions() []sdk.Option {
	switch {
	case f.mutualTLS():
		return []sdk.Option{sdk.WithTLS(*f.tls), sdk.WithClientIdentities(f.allowedCallers()...)}
	case f.tls.Enabled():
		return []sdk.Option{sdk.WithTLS(*f.tls)}
	case f.insecurePlaintext:
		return []sdk.Option{sdk.WithInsecurePlaintext()}
	}
	return nil
}

// transport says how the gRPC server secures its connections, for the log.
func (f *securityFlags) transport() string {
	switch {
	case f.mutualTLS():
		return "mutual TLS"
	case f.tls.Enabled():
		return "TLS"
	}
	return "plaintext"
}

// logStart says whom the port serves, and warns when that is anyone who
// can reach it.
func (f *securityFlags) logStart(log logr.Logger) {
	switch {
	case f.mutualTLS():
		log.Info("serving the admitter alone: callers must present a certificate from --tls-ca-file naming one of these identities",
			"admitterIdentities", strings.Join(f.allowedCallers(), ","))
	case f.tls.Enabled():
		log.Info("serving TLS without client certificates: any caller that reaches --grpc-addr may call; --tls-ca-file serves the admitter alone")
	case f.insecurePlaintext:
		// The SDK warns when it serves plaintext off loopback.
	default:
		log.Info("serving gRPC in plaintext on loopback: callers are not authenticated; the admitter calls a plaintext provider only on a loopback endpoint or when its AdmissionCheck sets spec.insecurePlaintext")
	}
}
