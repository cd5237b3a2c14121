package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sluice-dev/sluice/test/testenv"
)

// WriteKubeconfig mints a token for the ServiceAccount of service
// (ServiceAccount(service) in SystemNamespace, e.g. "checks-approval") and
// writes a kubeconfig for it to dir/<service>.kubeconfig, whose path it
// returns. InstallAccess must have applied the ServiceAccount.
func WriteKubeconfig(ctx context.Context, env *testenv.Env, dir, service string) (string, error) {
	cs, err := env.Clientset()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("creating %s: %w", dir, err)
	}
	token, err := mintToken(ctx, cs, SystemNamespace, ServiceAccount(service))
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, service+".kubeconfig")
	if err := writeKubeconfig(path, env.Config, Username(service), token, SystemNamespace); err != nil {
		return "", err
	}
	return path, nil
}

// NewProvider describes another process of the checks binary the suite
// runs (serving, say, --provider budget), named name, with args plus a
// free --grpc-addr (its GRPCAddr) and --http-addr, plaintext unless args
// carry TLS flags, its log in the suite's log directory. It does not start
// it.
func (s *Sluice) NewProvider(name string, args ...string) (*Service, error) {
	grpcAddr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	httpAddr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	args = append([]string{"--grpc-addr", grpcAddr, "--log-format", "text"}, args...)
	svc := NewService(name, s.Checks.bin, args, httpAddr, filepath.Join(logDir(s.env), "sluice-"+name+".log"))
	svc.GRPCAddr = grpcAddr
	return svc, nil
}
