package registration

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
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
	// label included: removing it is refused, as is any change of the
	// keys fixed at creation.
	judged := []string{
		podkeys.QueueNameLabel, podkeys.PodGroupNameLabel, podkeys.ManagedLabel,
		podkeys.PriorityClassLabel, podkeys.MaxExecTimeLabel,
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
		DefaultPath:     "/default-pods",
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

// TestOnlySluicePodsReachTheWebhook evaluates the entries' selectors as the
// API server does: a pod sluice is not asked to queue matches no entry, so
// it is created even while the webhook is down; every other pod matches
// exactly one entry per operation.
func TestOnlySluicePodsReachTheWebhook(t *testing.T) {
	o := Options{Namespaces: DefaultNamespaces("sluice-system"), SystemNamespace: "sluice-system"}
	plainNS := labels.Set{corev1.LabelMetadataName: "team"}
	optedIn := labels.Set{corev1.LabelMetadataName: "team", DefaultingLabel: DefaultingEnabled}
	queued := labels.Set{podkeys.QueueNameLabel: "q"}
	marked := labels.Set{podkeys.ManagedLabel: "true"}
	sluiceMarks := labels.Set{"sluice.dev/workload": "w"}
	type entry struct {
		name      string
		ns, obj   *metav1.LabelSelector
		operation admissionregistrationv1.OperationType
	}
	var entries []entry
	for _, w := range Mutating(o).Webhooks {
		entries = append(entries, entry{w.Name, w.NamespaceSelector, w.ObjectSelector, w.Rules[0].Operations[0]})
	}
	for _, w := range Validating(o).Webhooks {
		entries = append(entries, entry{w.Name, w.NamespaceSelector, w.ObjectSelector, w.Rules[0].Operations[0]})
		if fp := *w.FailurePolicy; fp != admissionregistrationv1.Fail {
			t.Errorf("%s failure policy = %s, want Fail", w.Name, fp)
		}
	}
	matching := func(op admissionregistrationv1.OperationType, ns labels.Set, pods ...labels.Set) []string {
		var names []string
		for _, e := range entries {
			if e.operation != op || !selects(t, e.ns, ns) {
				continue
			}
			if slices.ContainsFunc(pods, func(p labels.Set) bool { return selects(t, e.obj, p) }) {
				names = append(names, e.name)
			}
		}
		return names
	}
	create, update := admissionregistrationv1.Create, admissionregistrationv1.Update
	tests := []struct {
		name string
		op   admissionregistrationv1.OperationType
		ns   labels.Set
		pods []labels.Set // the object, and on UPDATE the old object too
		want []string
	}{
		{"plain pod", create, plainNS, []labels.Set{{"app": "x"}}, nil},
		{"pod with sluice.dev keys but no queue", create, plainNS, []labels.Set{sluiceMarks}, nil},
		{"pod that names a queue", create, plainNS, []labels.Set{queued}, []string{MutatingWebhookName}},
		{"managed label without queue", create, plainNS, []labels.Set{marked}, []string{UnqueuedWebhookName}},
		{"managed label without queue, opted in", create, optedIn, []labels.Set{marked}, []string{DefaultingWebhookName, UnqueuedWebhookName}},
		{"plain pod, opted in", create, optedIn, []labels.Set{{"app": "x"}}, []string{DefaultingWebhookName}},
		{"pod that names a queue, opted in", create, optedIn, []labels.Set{queued}, []string{DefaultingWebhookName}},
		{"kube-system", create, labels.Set{corev1.LabelMetadataName: "kube-system", DefaultingLabel: DefaultingEnabled}, []labels.Set{queued, marked}, nil},
		{"update of a plain pod", update, plainNS, []labels.Set{{"app": "x"}, {"app": "y"}}, nil},
		{"update of a pod that names a queue, not sluice's", update, plainNS, []labels.Set{queued, queued}, nil},
		{"update of a pod sluice queued", update, plainNS, []labels.Set{labels.Merge(queued, marked), labels.Merge(queued, marked)}, []string{ValidatingWebhookName}},
		{"update removing the managed label", update, plainNS, []labels.Set{queued, labels.Merge(queued, marked)}, []string{ValidatingWebhookName}},
		{"update adding the managed label", update, plainNS, []labels.Set{marked, {}}, []string{ValidatingWebhookName}},
	}
	for _, tc := range tests {
		if got := matching(tc.op, tc.ns, tc.pods...); !slices.Equal(got, tc.want) {
			t.Errorf("%s: entries called = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// selects evaluates a webhook's label selector; nil selects everything.
func selects(t *testing.T, ls *metav1.LabelSelector, set labels.Set) bool {
	t.Helper()
	if ls == nil {
		return true
	}
	sel, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		t.Fatalf("selector %v: %v", ls, err)
	}
	return sel.Matches(set)
}

func TestDefaultingKeepsManagedNamespaces(t *testing.T) {
	o := Options{Namespaces: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "ml"}}}
	m := Mutating(o)
	for _, w := range m.Webhooks {
		if w.NamespaceSelector.MatchLabels["team"] != "ml" {
			t.Errorf("%s namespace selector %v lost --managed-namespaces", w.Name, w.NamespaceSelector)
		}
	}
	if len(o.Namespaces.MatchExpressions) != 0 {
		t.Errorf("building the configuration changed the caller's selector: %v", o.Namespaces)
	}
}
