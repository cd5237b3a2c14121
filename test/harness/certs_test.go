package harness

import (
	"crypto/tls"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sluice-dev/sluice/internal/devca"
)

// TestChecksServeTheIssuedAdmitter keeps the checks service's
// --admitter-identity the identity the admitter's certificate carries, so
// that the checks service serves the admitter in every suite.
func TestChecksServeTheIssuedAdmitter(t *testing.T) {
	dir := t.TempDir()
	if err := issueIdentityFiles(dir); err != nil {
		t.Fatal(err)
	}
	admitter := filepath.Join(dir, "admitter")
	pair, err := tls.LoadX509KeyPair(filepath.Join(admitter, devca.CertFile), filepath.Join(admitter, devca.KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	var uris []string
	for _, u := range pair.Leaf.URIs {
		uris = append(uris, u.String())
	}
	args := checksTLSArgs(dir)
	i := slices.Index(args, "--admitter-identity")
	if i < 0 || i+1 >= len(args) {
		t.Fatalf("the checks service's flags %q name no --admitter-identity", args)
	}
	if !slices.Contains(uris, args[i+1]) {
		t.Errorf("the checks service serves %s; the admitter's certificate names %q", args[i+1], uris)
	}
}
