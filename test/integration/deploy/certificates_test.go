package deploy

import (
	"context"
	"net/url"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/pkg/mtls"
)

// certificate is the part of a cert-manager Certificate this test reads.
type certificate struct {
	Metadata struct{ Name string }
	Spec     struct {
		SecretName string                `json:"secretName"`
		DNSNames   []string              `json:"dnsNames"`
		URIs       []string              `json:"uris"`
		Usages     []string              `json:"usages"`
		IssuerRef  struct{ Name string } `json:"issuerRef"`
	}
}

// TestMutualTLSWiring checks that deploy/'s mutual TLS fits together:
// each gRPC service mounts its own cert-manager Secret and names its files
// in its flags, its certificate carries the identity the admitter's
// authorization expects, the checks services serve the identity the
// admitter's certificate carries and nothing in plaintext, and the
// admitter's certificate holds the name the grouper dials.
func TestMutualTLSWiring(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, docs := render(ctx, t)
	certs := map[string]certificate{} // by secret name
	deployments := map[string]appsv1.Deployment{}
	for _, d := range docs {
		switch field(d, "kind: ") {
		case "Certificate":
			var c certificate
			if err := yaml.Unmarshal([]byte(d), &c); err != nil {
				t.Fatal(err)
			}
			certs[c.Spec.SecretName] = c
		case "Deployment":
			var dep appsv1.Deployment
			if err := yaml.Unmarshal([]byte(d), &dep); err != nil {
				t.Fatal(err)
			}
			deployments[dep.Name] = dep
		}
	}

	for _, svc := range []struct {
		name   string
		usages []string
	}{
		{"sluice-admitter", []string{"server auth", "client auth"}},
		{"sluice-grouper", []string{"client auth"}},
		{"sluice-checks", []string{"server auth"}},
		{"sluice-checks-budget", []string{"server auth"}},
		{"sluice-checks-approval", []string{"server auth"}},
	} {
		dep, ok := deployments[svc.name]
		if !ok {
			t.Fatalf("deploy/ has no Deployment %s", svc.name)
		}
		secret, mount := tlsMount(t, dep)
		cert, ok := certs[secret]
		if !ok {
			t.Errorf("%s mounts Secret %s, which no Certificate writes", svc.name, secret)
			continue
		}
		if cert.Spec.IssuerRef.Name != "sluice-ca" {
			t.Errorf("Certificate %s is issued by %s, want sluice-ca", cert.Metadata.Name, cert.Spec.IssuerRef.Name)
		}
		want := mtls.ServiceIdentity(mtls.DefaultTrustDomain, "sluice-system", dep.Spec.Template.Spec.ServiceAccountName)
		if !slices.Equal(cert.Spec.URIs, []string{want}) {
			t.Errorf("Certificate %s names %v, want its ServiceAccount's identity %s", cert.Metadata.Name, cert.Spec.URIs, want)
		}
		if !slices.Equal(cert.Spec.Usages, svc.usages) {
			t.Errorf("Certificate %s usages %v, want %v", cert.Metadata.Name, cert.Spec.Usages, svc.usages)
		}
		args := dep.Spec.Template.Spec.Containers[0].Args
		for flag, file := range map[string]string{"--tls-cert-file": "tls.crt", "--tls-key-file": "tls.key", "--tls-ca-file": "ca.crt"} {
			if !slices.Contains(args, flag+"="+path.Join(mount, file)) {
				t.Errorf("%s args %v lack %s=%s", svc.name, args, flag, path.Join(mount, file))
			}
		}
	}

	// The grouper is the admitter's default --grouper-identity.
	grouperID := mtls.ServiceIdentity(mtls.DefaultTrustDomain, "sluice-system", "sluice-grouper")
	if got := certs["sluice-grouper-tls"].Spec.URIs; !slices.Contains(got, grouperID) {
		t.Errorf("the grouper's certificate names %v; the admitter serves only %s", got, grouperID)
	}
	// The checks services serve the admitter's identity alone, over mutual
	// TLS (the loop above checked --tls-ca-file).
	admitterIDs := certs["sluice-admitter-tls"].Spec.URIs
	for _, name := range []string{"sluice-checks", "sluice-checks-budget", "sluice-checks-approval"} {
		args := deployments[name].Spec.Template.Spec.Containers[0].Args
		served := flagValues(args, "--admitter-identity")
		if len(served) == 0 || !slices.ContainsFunc(served, func(id string) bool { return slices.Contains(admitterIDs, id) }) {
			t.Errorf("%s serves %v (--admitter-identity); the admitter's certificate names %v", name, served, admitterIDs)
		}
		if slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--insecure-plaintext") }) {
			t.Errorf("%s args %v allow plaintext; deploy/ serves mutual TLS only", name, args)
		}
	}
	// The admitter's certificate holds the host the grouper dials.
	host := dialedHost(t, deployments["sluice-grouper"].Spec.Template.Spec.Containers[0].Args)
	if !slices.Contains(certs["sluice-admitter-tls"].Spec.DNSNames, host) {
		t.Errorf("the grouper dials %s, which the admitter's certificate (%v) does not name", host, certs["sluice-admitter-tls"].Spec.DNSNames)
	}
}

// tlsMount returns the Secret mounted at /etc/sluice/tls in dep and the
// mount path.
func tlsMount(t *testing.T, dep appsv1.Deployment) (secret, mount string) {
	t.Helper()
	pod := dep.Spec.Template.Spec
	for _, m := range pod.Containers[0].VolumeMounts {
		for _, v := range pod.Volumes {
			if v.Name == m.Name && v.Secret != nil && strings.HasSuffix(v.Secret.SecretName, "-tls") {
				return v.Secret.SecretName, m.MountPath
			}
		}
	}
	t.Fatalf("%s mounts no TLS Secret", dep.Name)
	return "", ""
}

// flagValues returns the values of every name=value in args.
func flagValues(args []string, name string) []string {
	var values []string
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			values = append(values, v)
		}
	}
	return values
}

// dialedHost is the host of the grouper's --admitter-addr.
func dialedHost(t *testing.T, args []string) string {
	t.Helper()
	for _, a := range args {
		if target, ok := strings.CutPrefix(a, "--admitter-addr="); ok {
			u, err := url.Parse(target)
			if err != nil {
				t.Fatal(err)
			}
			return strings.Split(strings.TrimPrefix(u.Path, "/"), ":")[0]
		}
	}
	t.Fatal("the grouper has no --admitter-addr")
	return ""
}
