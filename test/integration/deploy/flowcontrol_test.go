package deploy

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	sluicev1 "github.com/sluice-dev/sluice/gen/sluice/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/kube"
	"github.com/sluice-dev/sluice/pkg/rpc"
	"github.com/sluice-dev/sluice/pkg/telemetry"
	"github.com/sluice-dev/sluice/test/harness"
)

// The flows of deploy/flowcontrol.yaml, by FlowSchema, with the priority
// level each must dispatch to.
var sluiceFlows = map[string]string{
	"sluice":        "sluice",
	"sluice-leases": "leader-election",
}

// exemptFlow is where admin (system:masters) requests go: this test's own
// and the API server's.
const exemptFlow = "exempt"

// TestFlowSchemasSplitLeases runs the admitter binary with leader election
// and its own ServiceAccount's credentials, as deploy/ sets it up, and
// reads kube-apiserver's Priority and Fairness metrics: its Lease renewals
// are dispatched under FlowSchema sluice-leases (priority level
// leader-election), its Workload writes under FlowSchema sluice, and
// nothing it does falls to another flow.
func TestFlowSchemasSplitLeases(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the admitter binary")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := harness.InstallCRDs(ctx, env.Config); err != nil {
		t.Fatal(err)
	}
	if err := harness.InstallAccess(ctx, env.Config); err != nil {
		t.Fatal(err)
	}
	waitFlowSchemasInForce(ctx, t)
	kubeconfigs, err := harness.WriteKubeconfigs(ctx, env, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	k8s := adminClient(t)
	ns := createQueues(ctx, t, k8s)

	before := dispatched(ctx, t)
	admitter := startAdmitter(ctx, t, kubeconfigs["admitter"])
	// It leads, so it took the Lease, and from now on renews it every 2s.
	leading := dispatched(ctx, t).count("sluice-leases")
	if leading == before.count("sluice-leases") {
		t.Errorf("the admitter took the Lease, but FlowSchema sluice-leases dispatched nothing")
	}
	pollDispatch(ctx, t, "the admitter's Lease renewals under FlowSchema sluice-leases", func(d dispatch) error {
		if n := d.count("sluice-leases") - leading; n < 2 {
			return fmt.Errorf("%v renewals so far", n)
		}
		return nil
	})

	writesBefore := workloadWrites(ctx, t)
	mid := dispatched(ctx, t)
	submitWorkload(ctx, t, admitter, ns)
	waitAdmitted(ctx, t, k8s, ns)
	after := dispatched(ctx, t)
	writes := workloadWrites(ctx, t) - writesBefore
	if writes < 2 { // the create and the admission
		t.Fatalf("the API server saw %v Workload writes, want the create and the admission at least", writes)
	}
	if n := after.count("sluice") - mid.count("sluice"); n < writes {
		t.Errorf("FlowSchema sluice dispatched %v requests while the admitter wrote %v Workloads: its writes went elsewhere", n, writes)
	}
	after.checkLevels(t)
	if stray := after.minus(before).outside(exemptFlow, "sluice", "sluice-leases"); len(stray) > 0 {
		t.Errorf("requests dispatched outside sluice's flows while only the admitter ran: %v", stray)
	}
}

// waitFlowSchemasInForce waits until the API server has taken in sluice's
// FlowSchemas and found their priority levels (Dangling false): until then
// it matches requests without them.
func waitFlowSchemasInForce(ctx context.Context, t *testing.T) {
	t.Helper()
	cs, err := env.Clientset()
	if err != nil {
		t.Fatal(err)
	}
	err = harness.Poll(ctx, func() error {
		for name := range sluiceFlows {
			fs, err := cs.FlowcontrolV1().FlowSchemas().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !hasCondition(fs.Status.Conditions, flowcontrolv1.FlowSchemaConditionDangling, flowcontrolv1.ConditionFalse) {
				return fmt.Errorf("FlowSchema %s conditions %+v", name, fs.Status.Conditions)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("sluice's FlowSchemas not in force: %v", err)
	}
}

func hasCondition(conds []flowcontrolv1.FlowSchemaCondition, typ flowcontrolv1.FlowSchemaConditionType, status flowcontrolv1.ConditionStatus) bool {
	for _, c := range conds {
		if c.Type == typ {
			return c.Status == status
		}
	}
	return false
}

func adminClient(t *testing.T) client.Client {
	t.Helper()
	scheme, err := kube.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatalf("creating client: %v", err)
	}
	return c
}

// createQueues creates a namespace with LocalQueue "lq" on a ClusterQueue
// with room for one CPU, and returns the namespace.
func createQueues(ctx context.Context, t *testing.T, c client.Client) string {
	t.Helper()
	const ns, cq, flavor = "flows", "flows", "flows"
	cpu := resource.MustParse("1")
	for _, obj := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&v1alpha1.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: flavor}},
		&v1alpha1.ClusterQueue{
			ObjectMeta: metav1.ObjectMeta{Name: cq},
			Spec: v1alpha1.ClusterQueueSpec{ResourceGroups: []v1alpha1.ResourceGroup{{
				CoveredResources: []corev1.ResourceName{corev1.ResourceCPU},
				Flavors: []v1alpha1.FlavorQuotas{{Name: flavor, Resources: []v1alpha1.ResourceQuota{
					{Name: corev1.ResourceCPU, NominalQuota: cpu},
				}}},
			}}},
		},
		&v1alpha1.LocalQueue{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lq"}, Spec: v1alpha1.LocalQueueSpec{ClusterQueue: cq}},
	} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
		}
	}
	return ns
}

// startAdmitter builds and starts the admitter with leader election on the
// Lease in sluice-system, authenticated by kubeconfig, and waits until it
// leads; it is stopped when the test ends.
func startAdmitter(ctx context.Context, t *testing.T, kubeconfig string) *harness.Service {
	t.Helper()
	dir := t.TempDir()
	bin, err := harness.BuildBinary(ctx, dir, "./services/admitter")
	if err != nil {
		t.Fatal(err)
	}
	grpcAddr, err := harness.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	httpAddr, err := harness.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	p := harness.NewService("admitter", bin, []string{"--kubeconfig", kubeconfig, "--leader-elect=true",
		"--namespace", harness.SystemNamespace, "--grpc-addr", grpcAddr, "--log-format", "text"},
		httpAddr, filepath.Join(dir, "admitter.log"))
	p.GRPCAddr = grpcAddr
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(30 * time.Second); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("admitter log:\n%s", p.Tail(200))
		}
	})
	if err := p.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return p
}

func submitWorkload(ctx context.Context, t *testing.T, admitter *harness.Service, ns string) {
	t.Helper()
	log, err := telemetry.NewLogger(&strings.Builder{}, "error", "text")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := rpc.Dial(admitter.GRPCAddr, log)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = admitterv1.NewAdmitterServiceClient(conn).SubmitWorkload(ctx, &admitterv1.SubmitWorkloadRequest{Workload: &sluicev1.Workload{
		Ref: &sluicev1.WorkloadRef{Namespace: ns, Name: "one"}, QueueName: "lq",
		PodSets: []*sluicev1.PodSet{{Name: "main", Count: 1, Requests: map[string]string{"cpu": "1"}}},
	}})
	if err != nil {
		t.Fatalf("SubmitWorkload: %v", err)
	}
}

func waitAdmitted(ctx context.Context, t *testing.T, c client.Client, ns string) {
	t.Helper()
	err := harness.Poll(ctx, func() error {
		var wl v1alpha1.Workload
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "one"}, &wl); err != nil {
			return err
		}
		for _, cond := range wl.Status.Conditions {
			if cond.Type == v1alpha1.WorkloadAdmitted && cond.Status == metav1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("not admitted: %+v", wl.Status.Conditions)
	})
	if err != nil {
		t.Fatalf("Workload %s/one: %v", ns, err)
	}
}

// workloadWrites counts the API server's successful and failed writes to
// Workloads and their status; only the admitter writes them here.
func workloadWrites(ctx context.Context, t *testing.T) float64 {
	t.Helper()
	counts, err := env.RequestCounts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, c := range counts {
		if c.Group == "sluice.dev" && c.Resource == "workloads" && c.IsWrite() {
			n += c.Count
		}
	}
	return n
}

// dispatch is apiserver_flowcontrol_dispatched_requests_total by
// FlowSchema, then priority level.
type dispatch map[string]map[string]float64

func (d dispatch) count(flow string) float64 {
	var n float64
	for _, v := range d[flow] {
		n += v
	}
	return n
}

// checkLevels fails for a sluice flow dispatched to another priority level
// than its own.
func (d dispatch) checkLevels(t *testing.T) {
	t.Helper()
	for flow, level := range sluiceFlows {
		for got := range d[flow] {
			if got != level {
				t.Errorf("FlowSchema %s dispatched to priority level %s, want %s", flow, got, level)
			}
		}
	}
}

func (d dispatch) minus(before dispatch) dispatch {
	out := dispatch{}
	for flow, levels := range d {
		for level, n := range levels {
			if n -= before[flow][level]; n != 0 {
				if out[flow] == nil {
					out[flow] = map[string]float64{}
				}
				out[flow][level] = n
			}
		}
	}
	return out
}

// outside returns the flows of d other than those named, sorted.
func (d dispatch) outside(flows ...string) []string {
	var out []string
	for _, flow := range slices.Sorted(maps.Keys(d)) {
		if !slices.Contains(flows, flow) {
			out = append(out, fmt.Sprintf("%s: %v", flow, d[flow]))
		}
	}
	return out
}

const dispatchedMetric = "apiserver_flowcontrol_dispatched_requests_total"

func dispatched(ctx context.Context, t *testing.T) dispatch {
	t.Helper()
	d, err := readDispatch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func readDispatch(ctx context.Context) (dispatch, error) {
	text, err := env.Metrics(ctx)
	if err != nil {
		return nil, err
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return nil, fmt.Errorf("parsing kube-apiserver metrics: %w", err)
	}
	d := dispatch{}
	for _, m := range families[dispatchedMetric].GetMetric() {
		var flow, level string
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "flow_schema":
				flow = l.GetValue()
			case "priority_level":
				level = l.GetValue()
			}
		}
		if d[flow] == nil {
			d[flow] = map[string]float64{}
		}
		d[flow][level] += m.GetCounter().GetValue()
	}
	if len(d) == 0 {
		return nil, fmt.Errorf("kube-apiserver serves no %s", dispatchedMetric)
	}
	return d, nil
}

// pollDispatch reads the metrics until cond accepts them.
func pollDispatch(ctx context.Context, t *testing.T, what string, cond func(dispatch) error) {
	t.Helper()
	pollCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := harness.Poll(pollCtx, func() error {
		d, err := readDispatch(pollCtx)
		if err != nil {
			return err
		}
		return cond(d)
	})
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
