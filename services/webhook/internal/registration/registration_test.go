package registration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/diff"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/pkg/podkeys"
)

func TestClientConfig(t *testing.T) {
	base := Options{Name: "sluice-webhook", MutatePath: "/mutate-pods", ValidatePath: "/validate-pods", CABundle: []byte("ca"), SystemNamespace: "sluice-system"}

	local := base
	local.URL = "https://127.0.0.1:9443/"
	if got := *Mutating(local).Webhooks[0].ClientConfig.URL; got != "https://127.0.0.1:9443/mutate-pods" {
		t.Errorf("mutating URL = %q", got)
	}
	if got := *Validating(local).Webhooks[0].ClientConfig.URL; got != "https://127.0.0.1:9443/validate-pods" {
		t.Errorf("validating URL = %q", got)
	}

	inCluster := base
	inCluster.Service = &admissionregistrationv1.ServiceReference{Namespace: "sluice-system", Name: "sluice-webhook"}
	cc := Validating(inCluster).Webhooks[0].ClientConfig
	if cc.URL != nil || cc.Service == nil || *cc.Service.Path != "/validate-pods" || string(cc.CABundle) != "ca" {
		t.Errorf("in-cluster client config = %+v", cc)
	}
	if inCluster.Service.Path != nil {
		t.Error("building a configuration changed the caller's ServiceReference")
	}
}

func TestOperations(t *testing.T) {
	m := Mutating(Options{}).Webhooks[0]
	if ops := m.Rules[0].Operations; len(ops) != 1 || ops[0] != admissionregistrationv1.Create {
		t.Errorf("mutating operations = %v, want CREATE only", ops)
	}
	if rp := m.ReinvocationPolicy; rp == nil || *rp != admissionregistrationv1.IfNeededReinvocationPolicy {
		t.Errorf("mutating reinvocation policy = %v, want IfNeeded: it validates CREATE and must see the final pod", rp)
	}
	v := Validating(Options{}).Webhooks[0]
	if ops := v.Rules[0].Operations; len(ops) != 1 || ops[0] != admissionregistrationv1.Update {
		t.Errorf("validating operations = %v, want UPDATE only (the mutating webhook validates CREATE)", ops)
	}
	for _, fp := range []*admissionregistrationv1.FailurePolicyType{m.FailurePolicy, v.FailurePolicy} {
		if *fp != admissionregistrationv1.Fail {
			t.Errorf("failure policy = %s, want Fail", *fp)
		}
	}
}

func TestMatchConditions(t *testing.T) {
	if got, want := SkipOwnServiceAccounts("ops"), `!request.userInfo.username.startsWith("system:serviceaccount:ops:")`; got != want {
		t.Errorf("SkipOwnServiceAccounts = %s, want %s", got, want)
	}
	expr := OnlyQueueingChanges()
	if !strings.HasPrefix(expr, "request.operation != 'UPDATE' || ") {
		t.Errorf("OnlyQueueingChanges does not keep every CREATE: %s", expr)
	}
	for _, k := range append(append([]string{}, QueueingLabels...), QueueingAnnotations...) {
		if !strings.Contains(expr, `[?"`+k+`"]`) {
			t.Errorf("OnlyQueueingChanges ignores %s: %s", k, expr)
		}
	}
	// Every key an update rule judges must reach the webhook, the managed
	// label included: removing it is refused.
	judged := []string{
		podkeys.QueueNameLabel, podkeys.PodGroupNameLabel, podkeys.ManagedLabel,
		podkeys.PodGroupTotalCountAnnotation, podkeys.RetriableInGroupAnnotation,
	}
	for _, k := range judged {
		if !strings.Contains(expr, `[?"`+k+`"] != oldObject`) {
			t.Errorf("OnlyQueueingChanges does not send updates of %s: %s", k, expr)
		}
	}
}

// TestDeployManifestsMatch keeps deploy/webhook/webhook-configurations.yaml
// in step with the configurations built here (the CA is injected there by
// cert-manager, so it is left out of the comparison).
func TestDeployManifestsMatch(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "deploy", "webhook", "webhook-configurations.yaml"))
	if err != nil {
		t.Fatalf("read deploy manifest: %v", err)
	}
	docs := strings.Split(string(data), "\n---\n")
	if len(docs) != 2 {
		t.Fatalf("deploy manifest has %d documents, want 2", len(docs))
	}
	var gotM admissionregistrationv1.MutatingWebhookConfiguration
	var gotV admissionregistrationv1.ValidatingWebhookConfiguration
	if err := yaml.UnmarshalStrict([]byte(docs[0]), &gotM); err != nil {
		t.Fatalf("decode mutating configuration: %v", err)
	}
	if err := yaml.UnmarshalStrict([]byte(docs[1]), &gotV); err != nil {
		t.Fatalf("decode validating configuration: %v", err)
	}
	o := Options{
		Name:            "sluice-webhook",
		Service:         &admissionregistrationv1.ServiceReference{Namespace: "sluice-system", Name: "sluice-webhook"},
		MutatePath:      "/mutate-pods",
		ValidatePath:    "/validate-pods",
		Namespaces:      DefaultNamespaces("sluice-system"),
		SystemNamespace: "sluice-system",
	}
	for i := range gotV.Webhooks {
		for j, mc := range gotV.Webhooks[i].MatchConditions {
			gotV.Webhooks[i].MatchConditions[j].Expression = strings.Join(strings.Fields(mc.Expression), " ")
		}
	}
	if want := Mutating(o).Webhooks; !equality.Semantic.DeepEqual(gotM.Webhooks, want) {
		t.Errorf("deploy mutating webhooks differ from registration.Mutating:\n%s", diff.Diff(want, gotM.Webhooks))
	}
	if want := Validating(o).Webhooks; !equality.Semantic.DeepEqual(gotV.Webhooks, want) {
		t.Errorf("deploy validating webhooks differ from registration.Validating:\n%s", diff.Diff(want, gotV.Webhooks))
	}
}
