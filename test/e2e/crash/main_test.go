// Package crash kills sluice's services at named points of their work
// (pkg/crashpoint) and checks that the system still reaches the end state
// it reaches without the crash, with no decision taken twice and no write
// repeated. It runs the four services, built with the sluice_crashpoints
// tag, against a control plane with kube-scheduler, the controller-manager
// and kwok nodes, and drives them only through the Kubernetes API.
//
// Each case runs a scenario in a namespace and ClusterQueue of its own,
// restarts the service that owns the crash point with the point armed just
// before the scenario reaches it, waits for the process to die there,
// starts it again normally and checks the end state and the history that
// led to it. Cases run one after the other: they restart shared services.
package crash

import (
	"context"
	"os"
	"slices"
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
	k8s    client.WithWatch
)

func TestMain(m *testing.M) {
	os.Exit(testenv.RunMain(m, testenv.Options{Scheduler: true, ControllerManager: true, Kwok: true, Nodes: 2},
		func(e *testenv.Env) error {
			env = e
			// The first tagged build of the services may take minutes on a
			// small machine; later ones come from the build cache.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			var err error
			// Debug logs of the two services that crash: a failed case is
			// read from them.
			debug := []string{"--log-level", "debug"}
			// A deleted Workload waits this long for a provider that is
			// down (owed_release_test.go).
			admitter := append(slices.Clone(debug), "--release-wait", "2s")
			sluice, err = harness.Start(ctx, e, harness.Options{
				Tags: []string{"sluice_crashpoints"},
				// KEP-976 groups get a scheduler gang, as in `make run`.
				Args: map[string][]string{"admitter": admitter, "grouper": debug, "webhook": {"--gang-scheduling"}},
			})
			if err != nil {
				return err
			}
			scheme, err := kube.Scheme()
			if err != nil {
				return err
			}
			k8s, err = client.NewWithWatch(e.Config, client.Options{Scheme: scheme})
			return err
		}))
}
