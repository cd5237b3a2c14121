package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/sluice-dev/sluice/test/testenv"
)

// SystemNamespace is where sluice's own objects (the admitter's Lease) live.
const SystemNamespace = "sluice-system"

// stopGrace is how long Sluice.Stop lets each service shut down.
const stopGrace = 20 * time.Second

// Options tune a Sluice.
type Options struct {
	// BinDir holds prebuilt service binaries; empty builds them into a
	// temporary directory.
	BinDir string
	// Tags are build tags for the services built when BinDir is empty
	// (e.g. sluice_crashpoints). Prebuilt binaries cannot honour them, so
	// setting both is an error.
	Tags []string
	// Args adds flags to a service, by service name.
	Args map[string][]string
}

// Sluice is the four services running against one control plane.
type Sluice struct {
	Admitter, Checks, Grouper, Webhook *Service
	env                                *testenv.Env
}

// Start installs the CRDs, the system namespace and each service's
// ServiceAccount, RBAC and flow control from deploy/, the admission
// policies and the roles for users (InstallPolicies), issues each service
// a certificate for mutual TLS from a CA of its own (IssueIdentities), then
// starts the services, each with a kubeconfig of its own ServiceAccount (so
// a verb missing from deploy/ fails here as it would in a cluster), and
// waits until each is ready.
func Start(ctx context.Context, env *testenv.Env, opts Options) (*Sluice, error) {
	if opts.BinDir != "" && len(opts.Tags) > 0 {
		return nil, fmt.Errorf("harness: build tags %v need BinDir empty: the binaries in %s were built without them", opts.Tags, opts.BinDir)
	}
	if err := InstallCRDs(ctx, env.Config); err != nil {
		return nil, err
	}
	if err := InstallAccess(ctx, env.Config); err != nil {
		return nil, err
	}
	if err := InstallPolicies(ctx, env.Config); err != nil {
		return nil, err
	}
	kc, err := WriteKubeconfigs(ctx, env, filepath.Join(env.Dir, "sluice-identities"))
	if err != nil {
		return nil, err
	}
	certs := filepath.Join(env.Dir, "sluice-certs")
	if err := IssueIdentities(ctx, env.Config, certs); err != nil {
		return nil, err
	}
	bin := opts.BinDir
	if bin == "" {
		bin = filepath.Join(env.Dir, "sluice-bin")
		if err := Build(ctx, bin, opts.Tags...); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(logDir(env), 0o755); err != nil {
		return nil, fmt.Errorf("creating log dir: %w", err)
	}
	s := &Sluice{env: env}
	var admitterHTTP, admitterGRPC, checksHTTP, checksGRPC, grouperHTTP, webhookHTTP, webhookAddr string
	for _, addr := range []*string{&admitterHTTP, &admitterGRPC, &checksHTTP, &checksGRPC, &grouperHTTP, &webhookHTTP, &webhookAddr} {
		var err error
		if *addr, err = FreeAddr(); err != nil {
			return nil, err
		}
	}
	svc := func(name, httpAddr string, args ...string) *Service {
		args = append(args, "--log-format", "text")
		args = append(args, opts.Args[name]...)
		return NewService(name, filepath.Join(bin, name), args, httpAddr,
			filepath.Join(logDir(env), "sluice-"+name+".log"))
	}
	// The services speak mutual TLS to each other, as in a cluster.
	s.Admitter = svc("admitter", admitterHTTP, append(tlsArgs(certs, "admitter"), "--kubeconfig", kc["admitter"],
		"--grpc-addr", admitterGRPC, "--namespace", SystemNamespace, "--leader-elect=false")...)
	s.Admitter.GRPCAddr = admitterGRPC
	s.Checks = svc("checks", checksHTTP, append(checksTLSArgs(certs), "--grpc-addr", checksGRPC)...)
	s.Checks.GRPCAddr = checksGRPC
	s.Grouper = svc("grouper", grouperHTTP, append(tlsArgs(certs, "grouper"), "--kubeconfig", kc["grouper"],
		"--admitter-addr", admitterGRPC)...)
	s.Webhook = svc("webhook", webhookHTTP, "--kubeconfig", kc["webhook"], "--webhook-port", portOf(webhookAddr),
		"--self-register", "--shutdown-delay", "0s", "--cert-dir", filepath.Join(env.Dir, "webhook-certs"))
	s.Webhook.GRPCAddr = webhookAddr // its "gRPC" address is the HTTPS webhook's
	for _, svc := range s.All() {
		if err := svc.Start(); err != nil {
			s.Stop()
			return nil, err
		}
	}
	readyCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for _, svc := range s.All() {
		if err := svc.WaitReady(readyCtx); err != nil {
			s.Stop()
			return nil, err
		}
	}
	return s, nil
}

// All returns the services in start order.
func (s *Sluice) All() []*Service {
	return []*Service{s.Admitter, s.Checks, s.Grouper, s.Webhook}
}

// Stop stops every service, the webhook first so that pods are no longer
// gated by a webhook that is gone.
func (s *Sluice) Stop() error {
	var errs []error
	all := s.All()
	for i := len(all) - 1; i >= 0; i-- {
		if all[i] != nil {
			errs = append(errs, all[i].Stop(stopGrace))
		}
	}
	return errors.Join(errs...)
}

// ChecksTarget is the gRPC target an AdmissionCheck names to reach the
// built-in providers.
func (s *Sluice) ChecksTarget() string { return "dns:///" + s.Checks.GRPCAddr }

func portOf(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return port
}
