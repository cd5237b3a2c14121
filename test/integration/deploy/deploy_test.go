// Package deploy checks that the manifests in deploy/ build with kustomize
// and are accepted by a real API server (server-side dry run), so that
// `kubectl apply -k deploy/` keeps working as the code moves.
package deploy

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/test/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(testenv.RunMain(m, testenv.Options{}, func(e *testenv.Env) error { env = e; return nil }))
}

// certManagerKinds come from cert-manager, which a bare API server does not
// serve; everything else must be accepted as it is.
var certManagerKinds = map[string]bool{"Certificate": true, "Issuer": true}

func TestManifestsAreAccepted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kubectl, docs := render(ctx, t)
	var keep []string
	kinds := map[string]int{}
	for _, d := range docs {
		kind := field(d, "kind: ")
		kinds[kind]++
		if !certManagerKinds[kind] {
			keep = append(keep, d)
		}
	}
	for _, want := range []string{"CustomResourceDefinition", "Deployment", "ClusterRole", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "FlowSchema",
		"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} {
		if kinds[want] == 0 {
			t.Errorf("deploy/ builds no %s", want)
		}
	}
	// One per service, and one each for the budget and approval checks,
	// which keep state per process and so run apart from the stateless
	// checks service.
	if kinds["Deployment"] != 6 {
		t.Errorf("deploy/ builds %d Deployments, want one per service and per stateful built-in check (6)", kinds["Deployment"])
	}

	// A dry run cannot create the namespace the other objects live in.
	cs, err := env.Clientset()
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sluice-system"}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	apply := exec.CommandContext(ctx, kubectl, "--kubeconfig", env.Kubeconfig, "apply", "--dry-run=server", "-f", "-")
	apply.Stdin = strings.NewReader(strings.Join(keep, "\n---\n"))
	var out bytes.Buffer
	apply.Stdout, apply.Stderr = &out, &out
	if err := apply.Run(); err != nil {
		t.Fatalf("the API server refused deploy/ (dry run): %v\n%s", err, out.String())
	}
}

// render builds deploy/ with kubectl kustomize, as `kubectl apply -k`
// would, and returns kubectl's path and the built documents.
func render(ctx context.Context, t *testing.T) (kubectl string, docs []string) {
	t.Helper()
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	kubectl = kubectlPath(t, root)
	built, err := exec.CommandContext(ctx, kubectl, "kustomize", filepath.Join(root, "deploy")).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize deploy: %v", err)
	}
	return kubectl, strings.Split(string(built), "\n---\n")
}

func field(doc, prefix string) string {
	for _, l := range strings.Split(doc, "\n") {
		if strings.HasPrefix(l, prefix) {
			return strings.TrimSpace(strings.TrimPrefix(l, prefix))
		}
	}
	return ""
}

func kubectlPath(t *testing.T, root string) string {
	t.Helper()
	for _, dir := range []string{os.Getenv("SLUICE_BIN_DIR"), filepath.Join(root, "bin")} {
		if dir == "" {
			continue
		}
		if p := filepath.Join(dir, "kubectl"); fileExists(p) {
			return p
		}
	}
	t.Fatalf("kubectl not found in $SLUICE_BIN_DIR or bin/; run hack/build-cluster.sh")
	return ""
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
