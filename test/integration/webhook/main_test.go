// Package webhook tests sluice's pod webhook against a real kube-apiserver:
// the webhook binary runs in self-register mode on loopback and every pod is
// created through the API server, which calls it over HTTPS.
package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/test/harness"
	"github.com/sluice-dev/sluice/test/testenv"
)

// suite is the state shared by the tests of this package.
type suite struct {
	env     *testenv.Env
	client  client.Client
	binary  string // the built webhook binary
	webhook *harness.Service
	tmpDirs []string // removed after a passing run
}

var s suite

func TestMain(m *testing.M) {
	code := testenv.RunMain(m, testenv.Options{}, setUp)
	if s.webhook != nil {
		if err := s.webhook.Stop(10 * time.Second); err != nil {
			fmt.Fprintf(os.Stderr, "stop webhook: %v\n", err)
		}
		if code != 0 {
			fmt.Fprintf(os.Stderr, "webhook log: %s\n", s.webhook.LogPath)
		}
	}
	if code == 0 {
		for _, d := range s.tmpDirs {
			_ = os.RemoveAll(d)
		}
	}
	os.Exit(code)
}

func setUp(env *testenv.Env) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s.env = env
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		return err
	}
	c, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	s.client = c
	s.binary, err = buildWebhook(ctx)
	if err != nil {
		return err
	}
	// Start the webhook before the CRDs it watches exist, as happens when
	// everything is applied at once: it must wait for them, not ready
	// meanwhile, and become ready once they are served. This instance
	// outlives the API server (RunMain stops the control plane first), so it
	// leaves its configurations in place.
	p, err := launchWebhook("sluice-webhook")
	if err != nil {
		return err
	}
	s.webhook = p
	if err := harness.Poll(ctx, func() error {
		if !strings.Contains(p.Tail(40), "waiting for sluice's CRDs") {
			return errors.New("webhook does not say it waits for sluice's CRDs")
		}
		return nil
	}); err != nil {
		return err
	}
	if err := harness.Poll(ctx, func() error { _, _, err := p.Get(ctx, "/readyz"); return err }); err != nil {
		return err
	}
	if body, code, _ := p.Get(ctx, "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "caches") {
		return fmt.Errorf("webhook without its caches: /readyz %d %q, want 503 naming the caches", code, body)
	}
	if err := installCRDs(ctx, c, "localqueues", "workloadpriorityclasses"); err != nil {
		return err
	}
	return p.WaitReady(ctx)
}

// buildWebhook compiles the webhook command into a temporary directory.
func buildWebhook(ctx context.Context) (string, error) {
	dir, err := os.MkdirTemp("", "sluice-webhook-test-")
	if err != nil {
		return "", err
	}
	s.tmpDirs = append(s.tmpDirs, dir)
	return harness.BuildBinary(ctx, dir, "./services/webhook")
}

// installCRDs installs sluice's CRDs of the given resources from
// deploy/crd and waits until they are served.
func installCRDs(ctx context.Context, c client.Client, resources ...string) error {
	root, err := testenv.ModuleRoot()
	if err != nil {
		return err
	}
	for _, resource := range resources {
		data, err := os.ReadFile(filepath.Join(root, "deploy", "crd", "sluice.dev_"+resource+".yaml"))
		if err != nil {
			return fmt.Errorf("read CRD of %s: %w", resource, err)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(data, crd); err != nil {
			return fmt.Errorf("decode CRD of %s: %w", resource, err)
		}
		if err := c.Create(ctx, crd); err != nil {
			return fmt.Errorf("create CRD %s: %w", crd.Name, err)
		}
		if err := waitEstablished(ctx, c, crd); err != nil {
			return err
		}
	}
	return nil
}

// waitEstablished polls until the API server serves crd.
func waitEstablished(ctx context.Context, c client.Client, crd *apiextensionsv1.CustomResourceDefinition) error {
	return harness.Poll(ctx, func() error {
		got := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(crd), got); err != nil {
			return err
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("CRD %s not established yet", crd.Name)
	})
}

// startWebhook runs the webhook in self-register mode under configName,
// with extra flags, and waits until it reports ready; if it does not, it
// is stopped.
func startWebhook(ctx context.Context, configName string, extra ...string) (*harness.Service, error) {
	p, err := launchWebhook(configName, extra...)
	if err != nil {
		return nil, err
	}
	if err := p.WaitReady(ctx); err != nil {
		_ = p.Stop(time.Second)
		return nil, err
	}
	return p, nil
}

// launchWebhook starts the webhook binary without waiting for it.
func launchWebhook(configName string, extra ...string) (*harness.Service, error) {
	webhookAddr, err := harness.FreeAddr()
	if err != nil {
		return nil, err
	}
	httpAddr, err := harness.FreeAddr()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "sluice-webhook-"+configName+"-")
	if err != nil {
		return nil, err
	}
	s.tmpDirs = append(s.tmpDirs, dir)
	args := []string{
		"--kubeconfig", s.env.Kubeconfig,
		"--self-register",
		"--webhook-config-name", configName,
		"--webhook-port", port(webhookAddr),
		"--cert-dir", filepath.Join(dir, "certs"),
		"--shutdown-delay", "0s",
		"--log-format", "text", "--log-level", "debug",
	}
	p := harness.NewService("webhook", s.binary, append(args, extra...), httpAddr, filepath.Join(dir, "webhook.log"))
	if err := p.Start(); err != nil {
		return nil, err
	}
	return p, nil
}

// port returns the port of a host:port address.
func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}
