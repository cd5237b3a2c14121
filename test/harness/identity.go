package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/test/testenv"
)

// TokenLifetime is how long a service's token is valid. The test control
// plane sets no --service-account-max-token-expiration, so it is granted
// as asked; it is far longer than any suite may run (`make test` stops a
// package after 30 minutes), and a suite that outlived it would see its
// services' requests refused as unauthenticated.
const TokenLifetime = 24 * time.Hour

// fieldOwner applies the access manifests.
const fieldOwner = "sluice-harness"

// accessManifests are applied, in this order, before the services start:
// the system namespace, each service's ServiceAccount and RBAC, the flow
// control objects, all from deploy/, and the grant that only local runs
// need (the webhook's self-registration). Globs are relative to the module
// root; hack/sluice-up.sh applies the same files.
var accessManifests = []string{
	"deploy/namespace.yaml",
	"deploy/*/serviceaccount.yaml",
	"deploy/*/rbac.yaml",
	"deploy/flowcontrol.yaml",
	"hack/local-rbac.yaml",
}

// ServiceAccount is the ServiceAccount a service runs as in the system
// namespace.
func ServiceAccount(service string) string { return "sluice-" + service }

// Username is the name the API server knows a service by.
func Username(service string) string {
	return "system:serviceaccount:" + SystemNamespace + ":" + ServiceAccount(service)
}

// apiServices are the services that talk to the Kubernetes API; the checks
// service does not, and gets no credentials.
var apiServices = []string{"admitter", "grouper", "webhook"}

// accessProbes are permissions, one from each kind of RBAC object applied,
// that must be in force before the services start: the authorizer learns of
// new roles and bindings a moment after they are created, and a webhook
// refused its self-registration exits.
var accessProbes = []struct {
	service string
	attrs   authorizationv1.ResourceAttributes
}{
	{"admitter", authorizationv1.ResourceAttributes{Group: "sluice.dev", Resource: "workloads", Verb: "create"}},
	{"admitter", authorizationv1.ResourceAttributes{Namespace: SystemNamespace, Group: "coordination.k8s.io", Resource: "leases", Verb: "update"}},
	{"grouper", authorizationv1.ResourceAttributes{Resource: "pods", Verb: "patch"}},
	{"webhook", authorizationv1.ResourceAttributes{Group: "admissionregistration.k8s.io", Resource: "mutatingwebhookconfigurations", Verb: "create"}},
}

// InstallAccess applies the access manifests with cfg (an admin) and
// waits until the services' permissions are in force.
func InstallAccess(ctx context.Context, cfg *rest.Config) error {
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return fmt.Errorf("creating client: %w", err)
	}
	if err := applyManifests(ctx, c, accessManifests); err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating clientset: %w", err)
	}
	return waitAuthorized(ctx, cs)
}

// applyManifests server-side applies every file that globs (relative to
// the module root) match, in order; a glob that matches nothing is an
// error.
func applyManifests(ctx context.Context, c client.Client, globs []string) error {
	root, err := testenv.ModuleRoot()
	if err != nil {
		return err
	}
	for _, glob := range globs {
		files, err := filepath.Glob(filepath.Join(root, glob))
		if err != nil || len(files) == 0 {
			return fmt.Errorf("no manifest matches %s (%v)", glob, err)
		}
		for _, f := range files {
			if err := applyFile(ctx, c, f); err != nil {
				return err
			}
		}
	}
	return nil
}

// applyFile server-side applies every object of a YAML file.
func applyFile(ctx context.Context, c client.Client, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("parsing %s: %w", path, err)
		}
		if len(u.Object) == 0 {
			continue // an empty document
		}
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(&u), client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
			return fmt.Errorf("applying %s %s from %s: %w", u.GetKind(), u.GetName(), path, err)
		}
	}
}

// waitAuthorized polls SubjectAccessReviews until every access probe is
// allowed.
func waitAuthorized(ctx context.Context, cs kubernetes.Interface) error {
	pollCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for _, p := range accessProbes {
		attrs := p.attrs
		err := Poll(pollCtx, func() error {
			review, err := cs.AuthorizationV1().SubjectAccessReviews().Create(pollCtx, &authorizationv1.SubjectAccessReview{
				Spec: authorizationv1.SubjectAccessReviewSpec{
					User:               Username(p.service),
					Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + SystemNamespace, "system:authenticated"},
					ResourceAttributes: &attrs,
				},
			}, metav1.CreateOptions{})
			if err != nil {
				return err
			}
			if !review.Status.Allowed {
				return fmt.Errorf("%s may not %s %s.%s yet: %s", p.service, attrs.Verb, attrs.Resource, attrs.Group, review.Status.Reason)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("waiting for RBAC: %w", err)
		}
	}
	return nil
}

// WriteKubeconfigs mints a token for each API-using service's
// ServiceAccount with the TokenRequest API (valid TokenLifetime) and
// writes a kubeconfig per service into dir; it returns their paths by
// service name. InstallAccess must have run.
func WriteKubeconfigs(ctx context.Context, env *testenv.Env, dir string) (map[string]string, error) {
	cs, err := env.Clientset()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	paths := map[string]string{}
	for _, svc := range apiServices {
		token, err := mintToken(ctx, cs, SystemNamespace, ServiceAccount(svc))
		if err != nil {
			return nil, err
		}
		path := filepath.Join(dir, svc+".kubeconfig")
		if err := writeKubeconfig(path, env.Config, Username(svc), token, SystemNamespace); err != nil {
			return nil, err
		}
		paths[svc] = path
	}
	return paths, nil
}

func mintToken(ctx context.Context, cs kubernetes.Interface, namespace, serviceAccount string) (string, error) {
	seconds := int64(TokenLifetime / time.Second)
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, serviceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("requesting a token for ServiceAccount %s/%s: %w", namespace, serviceAccount, err)
	}
	// The API server may shorten the lifetime; a token that expires
	// during a suite would fail it in confusing ways.
	if left := time.Until(tr.Status.ExpirationTimestamp.Time); left < TokenLifetime-time.Hour {
		return "", fmt.Errorf("token for %s expires in %s, want %s: does the API server cap token lifetimes?", serviceAccount, left.Round(time.Second), TokenLifetime)
	}
	return tr.Status.Token, nil
}

// writeKubeconfig writes a kubeconfig for the API server of admin (its
// address and CA) that authenticates with token and works in namespace.
func writeKubeconfig(path string, admin *rest.Config, user, token, namespace string) error {
	const cluster = "sluice-local"
	kc := clientcmdapi.NewConfig()
	kc.Clusters[cluster] = &clientcmdapi.Cluster{Server: admin.Host, CertificateAuthorityData: admin.CAData}
	kc.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts[cluster] = &clientcmdapi.Context{Cluster: cluster, AuthInfo: user, Namespace: namespace}
	kc.CurrentContext = cluster
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("writing kubeconfig %s: %w", path, err)
	}
	return nil
}
