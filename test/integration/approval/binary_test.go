package approval

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/services/checks/conformance"
	"github.com/sluice-dev/sluice/test/harness"
)

// TestBinary runs the checks binary with --provider=approval and a
// kubeconfig of the check's ServiceAccount, and passes the conformance
// kit against it with an approved Workload whose approval the trigger
// removes.
func TestBinary(t *testing.T) {
	ctx := t.Context()
	k8s := adminClient(t)
	ns := createNamespace(ctx, t, k8s, "approval-binary")
	wl := createWorkload(ctx, t, k8s, ns, "kit-1", "conformance")

	dir := t.TempDir()
	bin, err := harness.BuildBinary(ctx, dir, "./services/checks")
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := writeKubeconfig(t, filepath.Join(dir, "kubeconfig"))
	grpcAddr, err := harness.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	httpAddr, err := harness.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	svc := harness.NewService("checks-approval", bin,
		[]string{"--provider", "approval", "--kubeconfig", kubeconfig, "--grpc-addr", grpcAddr}, httpAddr, filepath.Join(dir, "checks.log"))
	if err := svc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := svc.Stop(15 * time.Second); err != nil {
			t.Errorf("stopping the checks binary: %v\n%s", err, svc.Tail(20))
		}
	})
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := svc.WaitReady(wctx); err != nil {
		t.Fatalf("the checks binary is not ready: %v\n%s", err, svc.Tail(20))
	}
	conn := dial(t, grpcAddr)
	identity := checksv1.NewIdentityServiceClient(conn)
	err = harness.Poll(wctx, func() error {
		resp, err := identity.Probe(wctx, &checksv1.ProbeRequest{})
		if err != nil {
			return err
		}
		if !resp.GetReady() {
			return errors.New("not ready: " + resp.GetMessage())
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Probe: %v\n%s", err, svc.Tail(20))
	}

	conformance.Run(t, conn, conformance.Options{
		CheckName: "approval",
		Workload: &checksv1.Workload{
			Namespace: wl.Namespace, Name: wl.Name, Uid: string(wl.UID),
			PodSets: []*checksv1.PodSet{{Name: "main", Count: 1}},
		},
		TriggerChange: func(ctx context.Context, _ string) error {
			return patchApproval(ctx, k8s, wl, "")
		},
	})
}

// writeKubeconfig writes a kubeconfig that authenticates as the check's
// ServiceAccount.
func writeKubeconfig(t *testing.T, path string) string {
	t.Helper()
	const name = "approval-it"
	kc := clientcmdapi.NewConfig()
	kc.Clusters[name] = &clientcmdapi.Cluster{Server: checkConfig.Host, CertificateAuthorityData: checkConfig.CAData}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: checkConfig.BearerToken}
	kc.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	kc.CurrentContext = name
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}
