package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/test/harness"
	"github.com/sluice-dev/sluice/test/testenv"
)

const (
	// jsPoolLabel and jsPoolValue are the node label the JavaScript
	// provider's AdmissionCheck names; the test puts it on one kwok node.
	jsPoolLabel = "checks-js.example.com/pool"
	jsPoolValue = "e2e"
)

// TestJSProviderAdmitsPod runs the JavaScript provider (examples/checks-js)
// as a process and points an AdmissionCheck at it: the admitter must see
// it Active with the identity it gives, the pod must be ungated with the
// provider's node selector and run on the one node that carries it, and
// when the pod finishes the admitter must release the evaluation the
// provider holds.
func TestJSProviderAdmitsPod(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	prov := startJSProvider(ctx, t)
	poolNode := testenv.NodeName(1)
	jsLabelNode(ctx, t, poolNode, jsPoolLabel, jsPoolValue)

	ns := createNamespace(ctx, t, "js-provider")
	check := &sluicev1alpha1.AdmissionCheck{
		ObjectMeta: metav1.ObjectMeta{Name: "js-pool"},
		Spec: sluicev1alpha1.AdmissionCheckSpec{
			Endpoint:   "dns:///" + prov.addr,
			Parameters: jsonParams(t, map[string]any{"nodeLabels": map[string]string{jsPoolLabel: jsPoolValue}}),
		},
	}
	mustCreate(ctx, t, check)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := k8s.Delete(ctx, check); err != nil {
			t.Errorf("deleting AdmissionCheck %s: %v", check.Name, err)
		}
	})
	createQueues(ctx, t, ns, "js-provider", "2", check.Name)

	// The admitter probed the provider and recorded what it said of itself.
	active := jsWaitAdmissionCheck(ctx, t, check.Name, "Active with the provider's identity", func(ac *sluicev1alpha1.AdmissionCheck) bool {
		return meta.IsStatusConditionTrue(ac.Status.Conditions, sluicev1alpha1.AdmissionCheckActive) &&
			ac.Status.Provider != nil && ac.Status.Provider.Name == "pool.checks.example.com"
	})
	for _, c := range []string{"CAPABILITY_POD_SET_UPDATES", "CAPABILITY_RELEASE"} {
		if !slices.Contains(active.Status.Provider.Capabilities, c) {
			t.Errorf("AdmissionCheck status.provider.capabilities = %v, want %s", active.Status.Provider.Capabilities, c)
		}
	}
	if !slices.Contains(active.Status.Provider.ContractVersions, "sluice.checks.v1") {
		t.Errorf("AdmissionCheck status.provider.contractVersions = %v, want sluice.checks.v1", active.Status.Provider.ContractVersions)
	}

	pod := newPod(ns, "js", "1", "3s")
	mustCreate(ctx, t, pod)
	if !hasGate(pod) {
		t.Fatalf("pod not gated by the webhook: gates %v", pod.Spec.SchedulingGates)
	}

	started := waitPod(ctx, t, pod, "ungated and running", func(p *corev1.Pod) bool {
		return !hasGate(p) && (p.Status.Phase == corev1.PodRunning || p.Status.Phase == corev1.PodSucceeded)
	})
	if got := started.Spec.NodeSelector[jsPoolLabel]; got != jsPoolValue {
		t.Errorf("nodeSelector[%s] = %q, want %q (from the JavaScript provider); nodeSelector %v",
			jsPoolLabel, got, jsPoolValue, started.Spec.NodeSelector)
	}
	if started.Spec.NodeName != poolNode {
		t.Errorf("pod runs on node %q, want %q, the only node labelled %s=%s", started.Spec.NodeName, poolNode, jsPoolLabel, jsPoolValue)
	}

	wl := waitWorkloadOf(ctx, t, started, "Admitted", func(w *sluicev1alpha1.Workload) bool {
		return meta.IsStatusConditionTrue(w.Status.Conditions, sluicev1alpha1.WorkloadAdmitted)
	})
	if len(wl.Status.AdmissionChecks) != 1 {
		t.Fatalf("admission checks = %+v, want one, %s", wl.Status.AdmissionChecks, check.Name)
	}
	st := wl.Status.AdmissionChecks[0]
	if st.Name != check.Name || st.State != sluicev1alpha1.CheckStateReady || st.Reason != "NodePoolAssigned" {
		t.Errorf("check state = %s %s reason %q, want %s Ready reason NodePoolAssigned", st.Name, st.State, st.Reason, check.Name)
	}
	if len(st.PodSetUpdates) != 1 || st.PodSetUpdates[0].NodeSelector[jsPoolLabel] != jsPoolValue {
		t.Errorf("check podSetUpdates = %+v, want one with nodeSelector %s=%s", st.PodSetUpdates, jsPoolLabel, jsPoolValue)
	}

	// The provider logged its decision under the evaluation key; once the
	// pod has finished, sluice releases that key.
	key := prov.waitLine(ctx, t, "its READY answer for "+ns+"/"+wl.Name,
		regexp.MustCompile(`STATE_READY ("[^"]*") for `+regexp.QuoteMeta(ns+"/"+wl.Name)+` `))
	waitPod(ctx, t, pod, "Succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
	prov.waitLine(ctx, t, "the release of "+key,
		regexp.MustCompile(`released `+regexp.QuoteMeta(key)+` \(RELEASE_REASON_FINISHED\)`))
}

// jsProvider is examples/checks-js/provider.js running under node.
type jsProvider struct {
	addr    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{} // closed once the process has exited
	err     error         // how it exited, valid once done is closed
}

// startJSProvider starts the JavaScript provider on a free loopback port,
// waits for the line it prints once it listens, and stops it with SIGTERM
// when the test ends (checking that it exits cleanly).
func startJSProvider(ctx context.Context, t *testing.T) *jsProvider {
	t.Helper()
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node not found (%v): the JavaScript provider needs Node.js 18 or later; on Debian: apt-get install nodejs npm", err)
	}
	dir := filepath.Join(root, "examples", "checks-js")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@grpc", "grpc-js", "package.json")); err != nil {
		t.Fatalf("examples/checks-js has no npm packages (%v): run hack/npm-install.sh (make examples-deps)", err)
	}
	addr, err := harness.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	p := &jsProvider{addr: addr, logPath: filepath.Join(env.LogDir(), "checks-js.log"), done: make(chan struct{})}
	logFile, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatalf("opening the JavaScript provider's log: %v", err)
	}
	defer logFile.Close() // the child has its own copy
	p.cmd = exec.Command(node, filepath.Join(dir, "provider.js"), "--addr", addr)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	spawner := testenv.NewSpawner(false)
	if err := spawner.Start(p.cmd); err != nil {
		spawner.Close()
		t.Fatalf("starting the JavaScript provider: %v", err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		defer spawner.Close()
		if err := p.stop(20 * time.Second); err != nil {
			t.Error(err)
		}
	})
	p.waitLine(ctx, t, "listening", regexp.MustCompile(`serving sluice\.checks\.v1 .* on `+regexp.QuoteMeta(addr)+` \(plaintext\)$`))
	return p
}

// waitLine polls the provider's log until a line matches re and returns
// the first submatch (or the whole match); it fails at once if the
// provider exits.
func (p *jsProvider) waitLine(ctx context.Context, t *testing.T, what string, re *regexp.Regexp) string {
	t.Helper()
	var found string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		b, err := os.ReadFile(p.logPath)
		if err != nil {
			return false, fmt.Errorf("reading %s: %w", p.logPath, err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if m := re.FindStringSubmatch(line); m != nil {
				found = m[len(m)-1]
				return true, nil
			}
		}
		select {
		case <-p.done:
			return false, fmt.Errorf("the JavaScript provider exited (%v)", p.err)
		default:
			return false, nil
		}
	})
	if err != nil {
		t.Fatalf("JavaScript provider: never logged %s: %v; log %s", what, err, p.logPath)
	}
	return found
}

// stop sends SIGTERM and waits up to grace for a clean exit; it kills the
// process when it takes longer.
func (p *jsProvider) stop(grace time.Duration) error {
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signalling the JavaScript provider: %w", err)
	}
	select {
	case <-p.done:
		if p.err != nil {
			return fmt.Errorf("the JavaScript provider exited after SIGTERM with %w, want status 0; log %s", p.err, p.logPath)
		}
		return nil
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("the JavaScript provider still ran %s after SIGTERM; killed; log %s", grace, p.logPath)
	}
}

// jsLabelNode sets one label on a node, and removes it when the test ends.
func jsLabelNode(ctx context.Context, t *testing.T, name, key, value string) {
	t.Helper()
	patchLabel := func(ctx context.Context, v *string) error {
		var node corev1.Node
		if err := k8s.Get(ctx, client.ObjectKey{Name: name}, &node); err != nil {
			return fmt.Errorf("getting node %s: %w", name, err)
		}
		patch := client.MergeFrom(node.DeepCopy())
		if node.Labels == nil {
			node.Labels = map[string]string{}
		}
		change := key + "-"
		if v == nil {
			delete(node.Labels, key)
		} else {
			node.Labels[key] = *v
			change = key + "=" + *v
		}
		if err := k8s.Patch(ctx, &node, patch); err != nil {
			return fmt.Errorf("labelling node %s %s: %w", name, change, err)
		}
		return nil
	}
	if err := patchLabel(ctx, &value); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := patchLabel(ctx, nil); err != nil {
			t.Error(err)
		}
	})
}

func jsWaitAdmissionCheck(ctx context.Context, t *testing.T, name, what string, ok func(*sluicev1alpha1.AdmissionCheck) bool) *sluicev1alpha1.AdmissionCheck {
	t.Helper()
	var ac sluicev1alpha1.AdmissionCheck
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := k8s.Get(ctx, client.ObjectKey{Name: name}, &ac); err != nil {
			return false, nil
		}
		return ok(&ac), nil
	})
	if err != nil {
		t.Fatalf("AdmissionCheck %s never %s: status %+v", name, what, ac.Status)
	}
	return &ac
}
