package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

// statusWrites is how many Workloads each case of
// BenchmarkWorkloadStatusWriteCost writes the status of, once each.
const statusWrites = 2000

// statusRounds is how often each case of BenchmarkWorkloadStatusWriteCost
// runs; the machine's noise needs more rounds than BenchmarkUngatePolicyCost's.
const statusRounds = 5

// statusWriteCase is one way the admitter could write a Workload's status.
type statusWriteCase struct {
	name string
	what string
	// write writes wl's status, changed from orig.
	write func(ctx context.Context, c client.Client, orig, wl *sluicev1alpha1.Workload) error
	// noSpecRules: the Workload CRD's spec rules are left out while the
	// case runs.
	noSpecRules bool
}

var statusWriteCases = []statusWriteCase{
	{
		name: "patch", what: "merge patch guarded by resourceVersion",
		write: func(ctx context.Context, c client.Client, orig, wl *sluicev1alpha1.Workload) error {
			return c.Status().Patch(ctx, wl, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
		},
	},
	{
		name: "update", what: "update (PUT) of the status, without managed fields",
		write: func(ctx context.Context, c client.Client, _, wl *sluicev1alpha1.Workload) error {
			wl.ManagedFields = nil
			return c.Status().Update(ctx, wl)
		},
	},
	{
		name: "patch-no-spec-rules", what: "merge patch, with the CRD's spec rules (x-kubernetes-validations) left out",
		write: func(ctx context.Context, c client.Client, orig, wl *sluicev1alpha1.Workload) error {
			return c.Status().Patch(ctx, wl, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
		},
		noSpecRules: true,
	},
}

// BenchmarkWorkloadStatusWriteCost measures what one status write of a
// single pod's Workload costs kube-apiserver, the write the admitter makes
// most (a reservation, a waiting message, a pod's progress), written as
// each of statusWriteCases says, on an API server alone with sluice's
// CRDs, access rules and policies. An admin writes, so that the cases
// compare the ways of writing, not the admitter's permissions (which allow
// only the patch). Each round writes a new waiting message to statusWrites
// Workloads with 32 workers; the cases alternate statusRounds times, and
// the medians are reported (writes per second, kube-apiserver CPU per
// write).
func BenchmarkWorkloadStatusWriteCost(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	env, admin := startGovernedAPIServer(ctx, b)
	defer env.Stop()
	writer, err := client.New(unlimited(env.Config), client.Options{})
	if err != nil {
		b.Fatal(err)
	}
	if err := sluicev1alpha1.AddToScheme(writer.Scheme()); err != nil {
		b.Fatal(err)
	}
	ns := namespace(ctx, b, admin, "status-writes")
	wls := createSinglePodWorkloads(ctx, b, writer, ns, statusWrites)
	crds, err := apiextensionsclient.NewForConfig(env.Config)
	if err != nil {
		b.Fatal(err)
	}
	crd, err := crds.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, "workloads.sluice.dev", metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	setRules := func(on bool) { setWorkloadSpecRules(ctx, b, crds, writer, ns, spec, on) }

	rates := map[string][]float64{}
	cpu := map[string][]float64{}
	// round writes every workload's status once as c says; counted
	// unless n < 0.
	round := func(c statusWriteCase, n int) {
		meter := newCPUMeter(env, nil)
		start := time.Now()
		message := fmt.Sprintf("waiting: %s, round %d", c.name, n)
		parallel(len(wls), func(i int) error {
			orig := wls[i]
			wl := orig.DeepCopy()
			meta.SetStatusCondition(&wl.Status.Conditions, metav1.Condition{
				Type: sluicev1alpha1.WorkloadQuotaReserved, Status: metav1.ConditionFalse, Reason: "Pending", Message: message,
			})
			if err := c.write(ctx, writer, orig, wl); err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			wls[i] = wl
			return nil
		}, b)
		d := time.Since(start)
		if n < 0 {
			return
		}
		rates[c.name] = append(rates[c.name], float64(len(wls))/d.Seconds())
		cpu[c.name] = append(cpu[c.name], 1000*meter.used("kube-apiserver")/float64(len(wls)))
	}
	// A change of the CRD makes the API server build its storage and watch
	// cache afresh: after each, a round is written that is not counted.
	rules := true
	for n := range statusRounds {
		for _, c := range statusWriteCases {
			if on := !c.noSpecRules; on != rules {
				setRules(on)
				rules = on
				round(c, -1)
			}
			round(c, n)
		}
	}
	if !rules {
		setRules(true)
	}

	base := median(cpu["patch"])
	fmt.Printf("\n== status writes of single-pod Workloads, %d per case, %d client workers, median of %d rounds ==\n", statusWrites, workers, statusRounds)
	for _, c := range statusWriteCases {
		r, m := median(rates[c.name]), median(cpu[c.name])
		fmt.Printf("%s: %.0f writes/s, kube-apiserver %.2f ms CPU per write (%.0f%% of a merge patch's); rounds %v\n",
			c.what, r, m, 100*m/base, rounded(rates[c.name]))
		b.ReportMetric(r, c.name+"-writes/s")
		b.ReportMetric(m, c.name+"-apiserver-ms/write")
	}
}

// createSinglePodWorkloads creates n Workloads shaped like the grouper's
// for a single pod, as the admitter does, and returns them as created.
func createSinglePodWorkloads(ctx context.Context, b *testing.B, c client.Client, ns string, n int) []*sluicev1alpha1.Workload {
	wls := make([]*sluicev1alpha1.Workload, n)
	parallel(len(wls), func(i int) error {
		wl := &sluicev1alpha1.Workload{
			ObjectMeta: metav1.ObjectMeta{
				Namespace:   ns,
				Name:        fmt.Sprintf("pod-p%d-c461e", i),
				Annotations: map[string]string{"sluice.dev/traceparent": "00-efdf0d6ceda2e4437a0b47f5683239a1-3ad65f854d6dd193-00"},
				Finalizers:  []string{"sluice.dev/resource-in-use"},
			},
			Spec: sluicev1alpha1.WorkloadSpec{
				QueueName: "q",
				PodSets: []sluicev1alpha1.PodSet{{
					Name:  "main",
					Count: 1,
					Template: sluicev1alpha1.PodSetTemplate{
						RoleHash:    "3190f8c4",
						Labels:      map[string]string{"kueue.x-k8s.io/managed": "true", "kueue.x-k8s.io/queue-name": "q"},
						Annotations: map[string]string{"kueue.x-k8s.io/role-hash": "3190f8c4"},
						Requests: corev1.ResourceList{
							corev1.ResourceCPU:    resource.MustParse("100m"),
							corev1.ResourceMemory: resource.MustParse("64Mi"),
						},
						Tolerations: []corev1.Toleration{
							{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
							{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
						},
					},
				}},
			},
		}
		if err := c.Create(ctx, wl); err != nil {
			return fmt.Errorf("creating workload %d: %w", i, err)
		}
		wls[i] = wl
		return nil
	}, b)
	return wls
}

// setWorkloadSpecRules gives the Workload CRD's spec schema its rules
// (spec, as deploy/crd has it) or leaves them out, and waits until the API
// server acts on the change: a dry-run change of a pod set's count is
// refused while the rules are in force.
func setWorkloadSpecRules(ctx context.Context, b *testing.B, crds apiextensionsclient.Interface, c client.Client, ns string, spec apiextensionsv1.JSONSchemaProps, on bool) {
	crd, err := crds.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, "workloads.sluice.dev", metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	want := *spec.DeepCopy()
	if !on {
		stripRules(&want)
	}
	crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = want
	if _, err := crds.ApiextensionsV1().CustomResourceDefinitions().Update(ctx, crd, metav1.UpdateOptions{}); err != nil {
		b.Fatal(err)
	}
	probe := &sluicev1alpha1.Workload{}
	deadline := time.Now().Add(time.Minute)
	for {
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "pod-p0-c461e"}, probe); err != nil {
			b.Fatal(err)
		}
		probe.Spec.PodSets[0].Count++
		refused := c.Update(ctx, probe, client.DryRunAll) != nil
		if refused == on {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("the Workload CRD's spec rules are not %s after a minute", map[bool]string{true: "in force", false: "gone"}[on])
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// stripRules removes the CEL rules of s and of every schema under it.
func stripRules(s *apiextensionsv1.JSONSchemaProps) {
	s.XValidations = nil
	for name, p := range s.Properties {
		stripRules(&p)
		s.Properties[name] = p
	}
	if s.Items != nil && s.Items.Schema != nil {
		stripRules(s.Items.Schema)
	}
}
