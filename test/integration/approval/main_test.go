// Package approval tests the approval check against a real kube-apiserver:
// the check reads Workloads with the token of its own ServiceAccount,
// limited to the RBAC of deploy/checks-approval, and is served by the SDK
// on loopback; the test annotates Workloads as a person would.
package approval

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/sluice-dev/sluice/test/harness"
	"github.com/sluice-dev/sluice/test/testenv"
)

// serviceAccount runs the check (deploy/checks-approval/serviceaccount.yaml).
const serviceAccount = "sluice-checks-approval"

var (
	env *testenv.Env
	// checkConfig authenticates as serviceAccount.
	checkConfig *rest.Config
)

func TestMain(m *testing.M) {
	os.Exit(testenv.RunMain(m, testenv.Options{}, setUp))
}

func setUp(e *testenv.Env) error {
	env = e
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := harness.InstallCRDs(ctx, e.Config); err != nil {
		return err
	}
	// Applies every deploy/*/serviceaccount.yaml and rbac.yaml, the
	// approval check's included.
	if err := harness.InstallAccess(ctx, e.Config); err != nil {
		return err
	}
	token, err := mintToken(ctx)
	if err != nil {
		return err
	}
	checkConfig = &rest.Config{
		Host:            e.Config.Host,
		TLSClientConfig: rest.TLSClientConfig{CAData: e.Config.CAData},
		BearerToken:     token,
	}
	return nil
}

// mintToken asks the TokenRequest API for a token of serviceAccount.
func mintToken(ctx context.Context) (string, error) {
	cs, err := env.Clientset()
	if err != nil {
		return "", err
	}
	seconds := int64(time.Hour / time.Second)
	tr, err := cs.CoreV1().ServiceAccounts(harness.SystemNamespace).CreateToken(ctx, serviceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("requesting a token for ServiceAccount %s/%s: %w", harness.SystemNamespace, serviceAccount, err)
	}
	return tr.Status.Token, nil
}
