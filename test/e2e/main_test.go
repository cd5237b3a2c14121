// Package e2e runs sluice end to end: a local control plane with
// kube-scheduler and kwok nodes, and the four services as separate processes
// talking gRPC, driven only through the Kubernetes API as a user would.
package e2e

import (
	"context"
	"os"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/pkg/kube"
	"github.com/sluice-dev/sluice/test/harness"
	"github.com/sluice-dev/sluice/test/testenv"
)

var (
	env    *testenv.Env
	sluice *harness.Sluice
	k8s    client.Client
)

func TestMain(m *testing.M) {
	os.Exit(testenv.RunMain(m, testenv.Options{Scheduler: true, ControllerManager: true, Kwok: true, Nodes: 2},
		func(e *testenv.Env) error {
			env = e
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			var err error
			// As in `make run`: KEP-976 groups get a scheduler gang, so
			// every group test also binds through a PodGroup.
			opts := harness.Options{
				BinDir: os.Getenv("SLUICE_SERVICES_BIN"),
				Args: map[string][]string{"webhook": {"--gang-scheduling"},
					// A deleted Workload waits this long for a provider
					// that is down (owed_release_test.go).
					"admitter": {"--release-wait", "3s"}},
			}
			if sluice, err = harness.Start(ctx, e, opts); err != nil {
				return err
			}
			scheme, err := kube.Scheme()
			if err != nil {
				return err
			}
			k8s, err = client.New(e.Config, client.Options{Scheme: scheme})
			return err
		}))
}
