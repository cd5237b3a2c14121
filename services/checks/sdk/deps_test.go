package sdk

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoKubernetesDependencies keeps the vendor-facing packages free of
// Kubernetes modules: a provider that links the SDK or the conformance kit
// must not inherit client-go and its dependency tree.
func TestNoKubernetesDependencies(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go command not in PATH")
	}
	pkgs := []string{
		"github.com/sluice-dev/sluice/services/checks/sdk",
		"github.com/sluice-dev/sluice/services/checks/sdk/sdktest",
		"github.com/sluice-dev/sluice/pkg/mtls",
		"github.com/sluice-dev/sluice/services/checks/conformance",
		"github.com/sluice-dev/sluice/services/checks/conformance/cmd/sluice-check-conformance",
		"github.com/sluice-dev/sluice/pkg/checkvalidate",
		"github.com/sluice-dev/sluice/gen/sluice/checks/v1",
	}
	out, err := exec.Command("go", append([]string{"list", "-deps"}, pkgs...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	var bad []string
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "k8s.io/") || strings.HasPrefix(dep, "sigs.k8s.io/") {
			bad = append(bad, dep)
		}
	}
	if len(bad) > 0 {
		t.Fatalf("vendor-facing packages depend on Kubernetes packages: %s", strings.Join(bad, ", "))
	}
}
