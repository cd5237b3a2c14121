package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/test/harness"
	"github.com/sluice-dev/sluice/test/testenv"
)

// policyRounds is how often each case of BenchmarkUngatePolicyCost runs;
// the cases alternate, so drift of the machine hits them alike.
const policyRounds = 3

// ungateCase is one way a burst of gated pods is ungated.
type ungateCase struct {
	name    string
	what    string
	managed bool // the pods carry kueue.x-k8s.io/managed=true: the policy matches them
	admin   bool // an admin ungates them, else sluice's grouper
	webhook bool // sluice's validating webhook is registered too
}

var ungateCases = []ungateCase{
	{name: "unmatched", what: "pods the policy does not match (no managed label), ungated by sluice's grouper"},
	{name: "grouper", what: "managed pods ungated by sluice's grouper: matched, skipped at the policy's first match condition", managed: true},
	{name: "judged", what: "managed pods ungated by an admin: judged in full, the authorizer asked for the permission to release pods", managed: true, admin: true},
	{name: "webhook", what: "the grouper's case with sluice's validating webhook registered too, skipped at its match conditions", managed: true, webhook: true},
}

// BenchmarkUngatePolicyCost measures what sluice's pod policy
// (deploy/policies/pods.yaml) costs the API server on the ungate path,
// with the policies in force on an API server alone: a burst of gated
// pods is created, then ungated as each of ungateCases says; the cases
// alternate policyRounds times, and the medians of the ungate phase are
// reported (ungate patches per second, kube-apiserver CPU per ungate).
// The grouper uses its own credentials under deploy/'s RBAC and flow
// control, as in sluice's runs. The last case adds what sluice's
// validating webhook already cost the same path before the policy: its
// configuration from deploy/ is registered (pointing nowhere, since its
// match conditions skip the grouper, the webhook is never called).
func BenchmarkUngatePolicyCost(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	env, admin := startGovernedAPIServer(ctx, b)
	defer env.Stop()
	grouper := serviceClient(ctx, b, env, "grouper")

	rates := map[string][]float64{}
	cpu := map[string][]float64{}
	for round := range policyRounds {
		for _, c := range ungateCases {
			var labels map[string]string
			if c.managed {
				labels = map[string]string{podkeys.ManagedLabel: podkeys.ManagedLabelValue}
			}
			ns := namespace(ctx, b, admin, fmt.Sprintf("ungate-%s-%d", c.name, round))
			names, _ := createPods(ctx, b, admin, ns, true, labels, burst)
			ungater := grouper
			if c.admin {
				ungater = admin
			}
			setValidatingWebhook(ctx, b, admin, c.webhook)
			meter := newCPUMeter(env, nil)
			d := ungatePods(ctx, b, ungater, ns, names)
			rates[c.name] = append(rates[c.name], burst/d.Seconds())
			cpu[c.name] = append(cpu[c.name], 1000*meter.used("kube-apiserver")/burst)
		}
	}

	base := median(rates["unmatched"])
	baseCPU := median(cpu["unmatched"])
	fmt.Printf("\n== ungate path through sluice's pod policy, %d pods, %d client workers, median of %d rounds ==\n", burst, workers, policyRounds)
	for _, c := range ungateCases {
		r, m := median(rates[c.name]), median(cpu[c.name])
		fmt.Printf("%s: %.0f ungate patches/s (%.0f%% of unmatched), kube-apiserver %.2f ms CPU per ungate (%+.2f ms); rounds %v\n",
			c.what, r, 100*r/base, m, m-baseCPU, rounded(rates[c.name]))
		b.ReportMetric(r, c.name+"-ungates/s")
		b.ReportMetric(m, c.name+"-apiserver-ms/ungate")
	}
}

// startGovernedAPIServer starts an API server alone with sluice's CRDs,
// access rules and admission policies in force, and returns it with an
// admin client without a client-side rate limit. The caller stops it.
func startGovernedAPIServer(ctx context.Context, b *testing.B) (*testenv.Env, kubernetes.Interface) {
	env, err := testenv.Start(ctx, apiServerOnly)
	if err != nil {
		b.Fatal(err)
	}
	admin, err := kubernetes.NewForConfig(unlimited(env.Config))
	if err != nil {
		env.Stop()
		b.Fatal(err)
	}
	for _, install := range []func(context.Context, *rest.Config) error{harness.InstallCRDs, harness.InstallAccess, harness.InstallPolicies} {
		if err := install(ctx, env.Config); err != nil {
			env.Stop()
			b.Fatal(err)
		}
	}
	return env, admin
}

// setValidatingWebhook registers sluice's ValidatingWebhookConfiguration
// from deploy/, with a client configuration that reaches nothing, or
// removes it, and waits until the API server acts on the change: a dry-run
// change of a queueing key, which the webhook's match conditions send to
// it, fails to call it while it is registered.
func setValidatingWebhook(ctx context.Context, b *testing.B, admin kubernetes.Interface, on bool) {
	configs := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	cfg := deployedValidatingWebhook(b)
	if on {
		if _, err := configs.Create(ctx, cfg, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			b.Fatal(err)
		}
	} else if err := configs.Delete(ctx, cfg.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		b.Fatal(err)
	}
	ns := namespace(ctx, b, admin, fmt.Sprintf("webhook-probe-%t-%d", on, time.Now().UnixNano()))
	probe := benchPod(ns, "probe", "")
	probe.Labels = map[string]string{podkeys.ManagedLabel: podkeys.ManagedLabelValue}
	if _, err := admin.CoreV1().Pods(ns).Create(ctx, probe, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	relabel := []byte(`{"metadata":{"labels":{"` + podkeys.QueueNameLabel + `":"probe"}}}`)
	err := harness.Poll(ctx, func() error {
		_, err := admin.CoreV1().Pods(ns).Patch(ctx, probe.Name, types.MergePatchType, relabel, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		if called := err != nil && strings.Contains(err.Error(), "failed calling webhook"); called != on {
			return fmt.Errorf("the API server has not acted on the webhook's registration (%t) yet: %v", on, err)
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}

// deployedValidatingWebhook is sluice's ValidatingWebhookConfiguration as
// deploy/ has it, but for its client configuration, which reaches nothing.
func deployedValidatingWebhook(b *testing.B) *admissionregistrationv1.ValidatingWebhookConfiguration {
	root, err := testenv.ModuleRoot()
	if err != nil {
		b.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "deploy", "webhook", "webhook-configurations.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var cfg admissionregistrationv1.ValidatingWebhookConfiguration
		if err := yaml.Unmarshal([]byte(doc), &cfg); err != nil {
			b.Fatal(err)
		}
		if cfg.Kind != "ValidatingWebhookConfiguration" {
			continue
		}
		// Only the UPDATE webhook is on the ungate path; the CREATE one
		// (unqueued.pods.sluice.dev) would refuse the managed pods the
		// next round creates.
		cfg.Webhooks = slices.DeleteFunc(cfg.Webhooks, func(w admissionregistrationv1.ValidatingWebhook) bool {
			return w.Name != "validate.pods.sluice.dev"
		})
		nowhere := "https://127.0.0.1:1/validate-pods"
		for i := range cfg.Webhooks {
			cfg.Webhooks[i].ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &nowhere}
		}
		return &cfg
	}
	b.Fatal("deploy/webhook/webhook-configurations.yaml has no ValidatingWebhookConfiguration")
	return nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

func rounded(xs []float64) []int {
	out := make([]int, len(xs))
	for i, x := range xs {
		out[i] = int(x + 0.5)
	}
	return out
}

// serviceClient is a client with the credentials of a sluice service's
// ServiceAccount and no client-side rate limit.
func serviceClient(ctx context.Context, b *testing.B, env *testenv.Env, service string) kubernetes.Interface {
	paths, err := harness.WriteKubeconfigs(ctx, env, filepath.Join(env.Dir, "bench-identities"))
	if err != nil {
		b.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", paths[service])
	if err != nil {
		b.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(unlimited(cfg))
	if err != nil {
		b.Fatal(err)
	}
	return cs
}
