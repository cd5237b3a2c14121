// Package bench measures sluice end to end on the local control plane: a
// burst of pods (single pods; groups of ten, 500 and 5,000; groups declared
// by a driver) created through the webhook until every one is ungated, and
// a full queue whose workloads are all preempted by as many of higher
// priority (preemption_test.go), beside two raw rates of the same API
// server in the same run: creating gated pods and patching them ungated
// with no sluice at all, and the same with the gate added by a webhook
// that does nothing else. The benchmark's
// client has no rate limit, so the raw rates are the API server's. The
// machine is shared and noisy, so the ratios are the figures to compare
// across runs.
//
// Run it with `make bench`. It reports; it asserts nothing about timings.
package bench

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/test/harness"
	"github.com/sluice-dev/sluice/test/testenv"
)

const (
	burst   = 2000 // pods per raw run, and per burst unless a benchmark says otherwise
	workers = 32   // concurrent client workers, for sluice's burst and the raw baseline
)

// TestMain sets controller-runtime's logger, which RunMain would set: the
// benchmark starts its control plane itself, with testenv.Start.
func TestMain(m *testing.M) {
	testenv.SetLogger(os.Stderr)
	os.Exit(m.Run())
}

// burstCase is one burst through sluice: its pods and how they are made.
type burstCase struct {
	shape string
	pods  int
	// groupSize is the pods one Workload admits (1 for single pods): the
	// raw API server's time to ungate that many is the least the last
	// group can take from its last create to its last ungate.
	groupSize int
	newPod    func(ns string, i int) *corev1.Pod
}

func BenchmarkBurstSinglePods(b *testing.B) {
	runBurst(b, apiServerOnly, burstCase{shape: "single pods", pods: burst, groupSize: 1, newPod: func(ns string, i int) *corev1.Pod {
		return benchPod(ns, fmt.Sprintf("pod-%d", i), "user-queue")
	}})
}

// BenchmarkBurstPodGroups bursts the same number of pods as groups of ten
// created beforehand (KEP-976 Story 2): each group is one Workload,
// submitted once all its pods exist and admitted whole.
func BenchmarkBurstPodGroups(b *testing.B) {
	runBurst(b, apiServerOnly, podGroups(burst, 10))
}

// BenchmarkBurstPodGroupsOf500 is BenchmarkBurstPodGroups with 4 groups
// of 500: a pod's cost must not grow with its group.
func BenchmarkBurstPodGroupsOf500(b *testing.B) {
	runBurst(b, apiServerOnly, podGroups(burst, 500))
}

// BenchmarkBurstPodGroupsOf5000 is one group of 5,000, admitted whole.
func BenchmarkBurstPodGroupsOf5000(b *testing.B) {
	runBurst(b, apiServerOnly, podGroups(5000, 5000))
}

// BenchmarkBurstPodGroupsScheduled is BenchmarkBurstPodGroups on a whole
// control plane: kube-scheduler binds each pod once it is ungated and kwok
// runs it, as they do in a cluster, in the raw runs as in sluice's. Their
// work competes for the same two cores, so every rate is lower and the
// share of raw is the figure comparable with other queueing systems
// measured the same way.
func BenchmarkBurstPodGroupsScheduled(b *testing.B) {
	c := podGroups(burst, 10)
	c.shape += ", scheduled and run by kube-scheduler and kwok"
	runBurst(b, wholeControlPlane, c)
}

// podGroups bursts pods in groups of size created beforehand.
func podGroups(pods, size int) burstCase {
	return burstCase{
		shape: fmt.Sprintf("pods in %d groups of %d", pods/size, size), pods: pods, groupSize: size,
		newPod: func(ns string, i int) *corev1.Pod { return groupPod(ns, i, size) },
	}
}

// groupPod is pod i of a groups burst: groups of size created beforehand,
// each naming its size.
func groupPod(ns string, i, size int) *corev1.Pod {
	p := benchPod(ns, fmt.Sprintf("pod-%d", i), "user-queue")
	p.Labels[podkeys.PodGroupNameLabel] = fmt.Sprintf("group-%d", i/size)
	p.Annotations = map[string]string{podkeys.PodGroupTotalCountAnnotation: fmt.Sprint(size)}
	return p
}

var (
	// apiServerOnly is etcd and kube-apiserver: nothing runs the pods, so
	// the runs measure the API server's path alone.
	apiServerOnly = testenv.Options{}
	// wholeControlPlane adds kube-scheduler, kube-controller-manager and
	// kwok nodes with room for every pod of both raw runs and the burst.
	wholeControlPlane = testenv.Options{
		Scheduler: true, ControllerManager: true, Kwok: true,
		Nodes: 20, Node: testenv.NodeShape{CPU: "64", Memory: "512Gi", Pods: 400},
	}
)

// BenchmarkBurstDeclaredGroups bursts the same number of pods as groups of
// ten declared by a driver (KEP-976 Story 3): every tenth pod declares its
// group (itself and nine workers shaped by a template), the others are
// workers naming their role. Pods are created in burst order, so most
// workers of a group arrive around its driver: before its admission they
// wait and are ungated with it; after, they join at once. Joining writes
// nothing to the Workload.
func BenchmarkBurstDeclaredGroups(b *testing.B) {
	runBurst(b, apiServerOnly, declaredGroups(burst, 10))
}

// BenchmarkBurstDeclaredDriver1000 is one driver declaring 1,000 workers:
// most of them arrive after the group's admission and join one by one.
func BenchmarkBurstDeclaredDriver1000(b *testing.B) {
	runBurst(b, apiServerOnly, declaredGroups(1001, 1001))
}

// declaredGroups bursts pods in groups of size declared by their first pod,
// the driver; the others are its workers.
func declaredGroups(pods, size int) burstCase {
	sets := fmt.Sprintf(`[{"name":"driver","count":1},{"name":"worker","count":%d,"template":{"spec":{"containers":`+
		`[{"name":"main","resources":{"requests":{"cpu":"100m"}}}]}}}]`, size-1)
	return burstCase{
		shape: fmt.Sprintf("pods in %d declared groups of %d", pods/size, size), pods: pods, groupSize: size,
		newPod: func(ns string, i int) *corev1.Pod {
			p := benchPod(ns, fmt.Sprintf("pod-%d", i), "user-queue")
			p.Labels[podkeys.PodGroupNameLabel] = fmt.Sprintf("group-%d", i/size)
			if i%size == 0 {
				p.Annotations = map[string]string{podkeys.PodGroupSetsAnnotation: sets}
			} else {
				p.Labels[podkeys.PodGroupRoleLabel] = "worker"
			}
			return p
		},
	}
}

// ungateBound is how long a burst of pods may take to be ungated before the
// benchmark gives up and reports what it saw: ten minutes per 2,000 pods,
// as generous at 5,000 as at 2,000. SLUICE_BENCH_UNGATE_BOUND (a Go
// duration) overrides it.
func ungateBound(b *testing.B, pods int) time.Duration {
	if v := os.Getenv("SLUICE_BENCH_UNGATE_BOUND"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatalf("SLUICE_BENCH_UNGATE_BOUND: %v", err)
		}
		return d
	}
	return max(10*time.Minute, time.Duration(pods)*10*time.Minute/burst)
}

// runBurst measures the raw pipeline, then bursts c's pods through sluice,
// in one control plane, and reports both.
func runBurst(b *testing.B, envOpts testenv.Options, c burstCase) {
	bound := ungateBound(b, c.pods)
	// Starting the control plane and sluice and the raw runs take a few
	// minutes at most; the burst may take its whole bound.
	ctx, cancel := context.WithTimeout(context.Background(), bound+15*time.Minute)
	defer cancel()
	env, err := testenv.Start(ctx, envOpts)
	if err != nil {
		b.Fatal(err)
	}
	defer env.Stop()

	// The benchmark's own client has no rate limit: the raw runs must be
	// bounded by the API server, not by a token bucket in the client.
	cs, err := kubernetes.NewForConfig(unlimited(env.Config))
	if err != nil {
		b.Fatal(err)
	}
	// The raw runs patch at least a whole group, so the time the API
	// server alone needs to ungate the largest group is measured, not
	// extrapolated from a smaller run.
	rawPods := max(burst, c.groupSize)
	profileDir := runProfileDir(b)
	var profileRawUngates func()
	if profileDir != "" {
		// The raw API server patches about a thousand pods a second here:
		// a window shorter than its ungates, to compare with sluice's.
		seconds := max(1, rawPods/1500)
		profileRawUngates = func() { profileAPIServer(ctx, b, cs, profileDir, "kube-apiserver-raw-ungates.pprof", seconds) }
	}
	rawCPU := newCPUMeter(env, nil)
	raw := measureRaw(ctx, b, cs, namespace(ctx, b, cs, "raw"), true, rawPods, profileRawUngates)
	rawCPUReport := rawCPU.report()
	hookCPU := newCPUMeter(env, nil)
	hooked := measureRawThroughWebhook(ctx, b, cs, rawPods)
	hookCPUReport := hookCPU.report()

	opts := harness.Options{BinDir: os.Getenv("SLUICE_SERVICES_BIN")}
	if profileDir != "" {
		opts.Args = map[string][]string{"admitter": {"--pprof"}, "grouper": {"--pprof"}, "webhook": {"--pprof"}}
	}
	s, err := harness.Start(ctx, env, opts)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Stop()
	cpu := newCPUMeter(env, s)
	memory := newMemoryMeter(s)
	res := measureSluice(ctx, b, env, cs, c, s, profileDir, bound)
	cpuUsed := cpu.usedByProcess()
	sluiceCPU := cpuReport(cpuUsed)
	memReport := memory.report()

	// The last group's pods cannot all be ungated faster than the raw API
	// server patches that many.
	rawUngate := time.Duration(float64(c.groupSize) / raw.patchesPerSecond * float64(time.Second))
	grouperCPU, webhookCPU := cpu.used("grouper")*1000/float64(c.pods), cpu.used("webhook")*1000/float64(c.pods)

	b.ReportMetric(res.podsPerSecond, "pods/s")
	b.ReportMetric(raw.pipelinePerSecond, "raw-pods/s")
	b.ReportMetric(res.writesPerPod, "writes/pod")
	b.ReportMetric(res.p50.Seconds()*1000, "p50-ms")
	b.ReportMetric(res.p99.Seconds()*1000, "p99-ms")
	b.ReportMetric(res.lastCreateToUngate.Seconds()*1000, "last-create-to-ungate-ms")
	b.ReportMetric(rawUngate.Seconds()*1000, "raw-ungate-ms")
	b.ReportMetric(grouperCPU, "grouper-cpu-ms/pod")
	b.ReportMetric(webhookCPU, "webhook-cpu-ms/pod")
	for _, name := range []string{"admitter", "checks", "grouper", "webhook"} {
		b.ReportMetric(mb(memReport.peak[name]), name+"-peak-MB")
	}
	b.ReportMetric(memReport.growthPerPod("grouper", c.pods)/1024, "grouper-peak-KB/pod")

	fmt.Printf("\n== burst of %d %s, %d client workers ==\n", c.pods, c.shape, workers)
	fmt.Printf("raw API server, no sluice (%d pods): %s\n", rawPods, raw)
	fmt.Printf("raw through a webhook that only adds the gate: %s (%.0f%% of raw)\n",
		hooked, 100*hooked.pipelinePerSecond/raw.pipelinePerSecond)
	fmt.Printf("sluice: %.0f pods/s from creation to ungated (%.0f%% of the raw pipeline), %d/%d ungated\n",
		res.podsPerSecond, 100*res.podsPerSecond/raw.pipelinePerSecond, res.ungated, c.pods)
	fmt.Printf("latency creation->ungated: p50 %s  p90 %s  p99 %s\n", res.p50, res.p90, res.p99)
	fmt.Printf("from the last create to the last ungate: %s; the raw API server ungates %d pods in %s\n",
		res.lastCreateToUngate.Round(time.Millisecond), c.groupSize, rawUngate.Round(time.Millisecond))
	fmt.Printf("median time per stage: %s\n", res.stages)
	fmt.Printf("API writes per pod (all clients, pod create included): %.2f\n", res.writesPerPod)
	fmt.Printf("writes by resource: %s\n", res.writesByResource)
	fmt.Printf("other requests by resource, per pod: %s\n", res.readsByResource)
	fmt.Printf("CPU seconds, raw pipeline: %s\n", rawCPUReport)
	fmt.Printf("CPU seconds, raw through the gating webhook (its server is the benchmark's): %s\n", hookCPUReport)
	fmt.Printf("CPU seconds, sluice from the burst's start to the last ungate: %s\n", sluiceCPU)
	fmt.Printf("CPU ms per pod: grouper %.2f, webhook %.2f\n", grouperCPU, webhookCPU)
	if res.profiles != nil {
		res.profiles.Wait()
		printCPUPerPod(b, cpuUsed, c.pods, filepath.Join(profileDir, "kube-apiserver.pprof"))
	}
	fmt.Printf("peak resident memory (VmHWM), MB: %s; the grouper's grew %.1f KB per pod\n",
		memReport, memReport.growthPerPod("grouper", c.pods)/1024)
}

type sluiceResult struct {
	ungateLatency
	writesPerPod float64
	// lastCreateToUngate runs from the answer to the burst's last create
	// to the last ungate seen.
	lastCreateToUngate time.Duration
	writesByResource   string
	readsByResource    string
	stages             string
	// profiles is done when the run's profiles are written; nil without.
	profiles *sync.WaitGroup
}

func measureSluice(ctx context.Context, b *testing.B, env *testenv.Env, cs kubernetes.Interface, bc burstCase,
	s *harness.Sluice, profileDir string, bound time.Duration) sluiceResult {
	n := bc.pods
	ns := namespace(ctx, b, cs, "burst")
	c, err := client.New(env.Config, client.Options{})
	if err != nil {
		b.Fatal(err)
	}
	if err := sluicev1alpha1.AddToScheme(c.Scheme()); err != nil {
		b.Fatal(err)
	}
	setupQueues(ctx, b, c, ns, n)

	informers, err := cache.New(env.Config, cache.Options{Scheme: c.Scheme(), DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		b.Fatal(err)
	}
	ungatedAt := watchUngated(ctx, b, informers, n)
	// A group's Workload has no owners: its pods are found by group name.
	groupPods := map[string][]string{}
	for i := range n {
		if p := bc.newPod(ns, i); p.Labels[podkeys.PodGroupNameLabel] != "" {
			g := p.Labels[podkeys.PodGroupNameLabel]
			groupPods[g] = append(groupPods[g], p.Name)
		}
	}
	stages := watchWorkloads(ctx, b, informers, groupPods)
	go func() { _ = informers.Start(ctx) }()
	if !informers.WaitForCacheSync(ctx) {
		b.Fatal("informers did not sync")
	}
	before, err := env.RequestCounts(ctx)
	if err != nil {
		b.Fatal(err)
	}
	var profiles *sync.WaitGroup
	if profileDir != "" {
		profiles = profileRun(ctx, b, env, cs, s, profileDir)
	}
	created := make([]time.Time, n)
	start := time.Now()
	parallel(n, func(i int) error {
		created[i] = time.Now()
		_, err := cs.CoreV1().Pods(ns).Create(ctx, bc.newPod(ns, i), metav1.CreateOptions{})
		return err
	}, b)
	createdAll := time.Now()

	seen := ungatedAt.wait(ctx, bound, start)
	after, err := env.RequestCounts(ctx)
	if err != nil {
		b.Fatal(err)
	}

	var res sluiceResult
	res.profiles = profiles
	res.ungateLatency = measureUngateLatency(created, seen, "pod-", start)
	if res.ungated < n {
		b.Errorf("only %d of %d pods were ungated within %s", res.ungated, n, bound)
	}
	if res.ungated > 0 {
		res.lastCreateToUngate = res.last.Sub(createdAll)
	}
	writes, byRes, reads := countRequests(after, before)
	res.readsByResource = perPod(reads, n)
	res.writesPerPod = writes / float64(n)
	res.stages = stages.report(created, seen)
	res.writesByResource = perPod(byRes, n)
	return res
}

// countRequests splits the API server's requests between two snapshots of
// its counters into the writes, in all and by verb and resource, and the
// other requests by verb and resource.
func countRequests(after, before []testenv.RequestCount) (writes float64, writesBy, others map[string]float64) {
	writesBy, others = map[string]float64{}, map[string]float64{}
	for _, rc := range testenv.SubtractCounts(after, before) {
		name := rc.Verb + " " + rc.Resource + subres(rc.Subresource)
		if rc.IsWrite() {
			writes += rc.Count
			writesBy[name] += rc.Count
		} else {
			others[name] += rc.Count
		}
	}
	return writes, writesBy, others
}

// unlimited returns a copy of cfg without a client-side rate limit.
func unlimited(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS = -1 // client-go makes no rate limiter for a QPS below zero
	return cfg
}

// perPod renders request counts by verb and resource, per pod of a burst.
func perPod(counts map[string]float64, pods int) string {
	var parts []string
	for k, v := range counts {
		parts = append(parts, fmt.Sprintf("%s=%.2f", k, v/float64(pods)))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

func subres(s string) string {
	if s == "" {
		return ""
	}
	return "/" + s
}

func pct(sorted []time.Duration, p int) time.Duration {
	i := (len(sorted)*p + 99) / 100
	if i > 0 {
		i--
	}
	return sorted[i].Round(time.Millisecond)
}

// setupQueues makes the ClusterQueue the burst's pods are admitted to, with
// quota for all of them at once (at least today's 100,000 CPU): a group is
// admitted whole, so a group of 5,000 needs room for 5,000 pods.
func setupQueues(ctx context.Context, b *testing.B, c client.Client, ns string, pods int) {
	quota := resource.MustParse("100000")
	need := benchPodCPU.DeepCopy()
	need.Mul(int64(pods))
	if need.Cmp(quota) > 0 {
		quota = need
	}
	objs := []client.Object{
		&sluicev1alpha1.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: "bench"}},
		&sluicev1alpha1.ClusterQueue{
			ObjectMeta: metav1.ObjectMeta{Name: "bench"},
			Spec: sluicev1alpha1.ClusterQueueSpec{ResourceGroups: []sluicev1alpha1.ResourceGroup{{
				CoveredResources: []corev1.ResourceName{corev1.ResourceCPU},
				Flavors: []sluicev1alpha1.FlavorQuotas{{Name: "bench", Resources: []sluicev1alpha1.ResourceQuota{
					{Name: corev1.ResourceCPU, NominalQuota: quota},
				}}},
			}}},
		},
		&sluicev1alpha1.LocalQueue{
			ObjectMeta: metav1.ObjectMeta{Name: "user-queue", Namespace: ns},
			Spec:       sluicev1alpha1.LocalQueueSpec{ClusterQueue: "bench"},
		},
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			b.Fatalf("creating %T: %v", o, err)
		}
	}
}

// ungatedTimes records when each pod was first seen without sluice's gate.
type ungatedTimes struct {
	mu   sync.Mutex
	seen map[string]time.Time
	want int
	all  chan struct{} // closed once want pods are seen
}

func (u *ungatedTimes) snapshot() map[string]time.Time {
	u.mu.Lock()
	defer u.mu.Unlock()
	return maps.Clone(u.seen)
}

// wait returns the pods seen ungated once all are, or when bound has passed
// since start, printing every minute how far the burst got: a burst that
// does not finish still says where it stopped.
func (u *ungatedTimes) wait(ctx context.Context, bound time.Duration, start time.Time) map[string]time.Time {
	ctx, cancel := context.WithDeadline(ctx, start.Add(bound))
	defer cancel()
	progress := time.NewTicker(time.Minute)
	defer progress.Stop()
	for {
		select {
		case <-u.all:
			return u.snapshot()
		case <-ctx.Done():
			return u.snapshot()
		case <-progress.C:
			fmt.Printf("... %d/%d pods ungated after %s\n", len(u.snapshot()), u.want, time.Since(start).Round(time.Second))
		}
	}
}

// watchUngated records the pods' ungating until want of them are seen.
func watchUngated(ctx context.Context, b *testing.B, informers cache.Cache, want int) *ungatedTimes {
	u := &ungatedTimes{seen: map[string]time.Time{}, want: want, all: make(chan struct{})}
	observe(ctx, b, informers, &corev1.Pod{}, func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok || hasGate(p) {
			return
		}
		now := time.Now()
		u.mu.Lock()
		defer u.mu.Unlock()
		if _, dup := u.seen[p.Name]; !dup {
			u.seen[p.Name] = now
			if len(u.seen) == u.want {
				close(u.all)
			}
		}
	})
	return u
}

func namespace(ctx context.Context, b *testing.B, cs kubernetes.Interface, name string) string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		b.Fatalf("creating namespace %s: %v", name, err)
	}
	return name
}

// benchPodCPU is every bench pod's CPU request.
var benchPodCPU = resource.MustParse("100m")

func benchPod(ns, name, queue string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "main", Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: benchPodCPU}},
			}},
		},
	}
	if queue != "" {
		p.Labels = map[string]string{podkeys.QueueNameLabel: queue}
	}
	return p
}

// parallel runs f for 0..n-1 on `workers` goroutines and fails b on errors.
func parallel(n int, f func(i int) error, b *testing.B) {
	var wg sync.WaitGroup
	next := make(chan int)
	var mu sync.Mutex
	var firstErr error
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		b.Fatalf("request failed: %v", firstErr)
	}
}

// workloadTimes records, per pod, when its Workload appeared and when it was
// first seen admitted, to tell which stage of the pipeline takes the time.
type workloadTimes struct {
	mu                sync.Mutex
	created, admitted map[string]time.Time // by pod name
}

func watchWorkloads(ctx context.Context, b *testing.B, informers cache.Cache, groupPods map[string][]string) *workloadTimes {
	wt := &workloadTimes{created: map[string]time.Time{}, admitted: map[string]time.Time{}}
	observe(ctx, b, informers, &sluicev1alpha1.Workload{}, func(obj any) {
		wl, ok := obj.(*sluicev1alpha1.Workload)
		if !ok {
			return
		}
		now := time.Now()
		admitted := meta.IsStatusConditionTrue(wl.Status.Conditions, sluicev1alpha1.WorkloadAdmitted)
		wt.mu.Lock()
		defer wt.mu.Unlock()
		var pods []string // a single pod's owner, or a group's pods
		for _, owner := range wl.OwnerReferences {
			pods = append(pods, owner.Name)
		}
		pods = append(pods, groupPods[wl.Labels[sluicev1alpha1.PodGroupLabel]]...)
		for _, pod := range pods {
			if _, dup := wt.created[pod]; !dup {
				wt.created[pod] = now
			}
			if _, dup := wt.admitted[pod]; !dup && admitted {
				wt.admitted[pod] = now
			}
		}
	})
	return wt
}

// observe calls f with every added or updated object of obj's kind. It uses
// an informer, not a bare watch: the API server closes watches of a custom
// resource whenever its CRD is updated, and informers resume.
func observe(ctx context.Context, b *testing.B, informers cache.Cache, obj client.Object, f func(any)) {
	inf, err := informers.GetInformer(ctx, obj)
	if err != nil {
		b.Fatal(err)
	}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { f(o) },
		UpdateFunc: func(_, o any) { f(o) },
	})
	if err != nil {
		b.Fatal(err)
	}
}

// report gives the median duration of each stage: pod created -> Workload
// created -> admitted -> pod ungated.
func (wt *workloadTimes) report(created []time.Time, ungated map[string]time.Time) string {
	wt.mu.Lock()
	defer wt.mu.Unlock()
	var toWorkload, toAdmitted, toUngated []time.Duration
	var lastCreated, lastWorkload, lastAdmitted, lastUngated time.Time
	for i, c := range created {
		name := fmt.Sprintf("pod-%d", i)
		wc, ok1 := wt.created[name]
		ad, ok2 := wt.admitted[name]
		ug, ok3 := ungated[name]
		if !ok1 || !ok2 || !ok3 {
			continue
		}
		toWorkload = append(toWorkload, wc.Sub(c))
		toAdmitted = append(toAdmitted, ad.Sub(wc))
		toUngated = append(toUngated, ug.Sub(ad))
		lastCreated, lastWorkload = latest(lastCreated, c), latest(lastWorkload, wc)
		lastAdmitted, lastUngated = latest(lastAdmitted, ad), latest(lastUngated, ug)
	}
	if len(toWorkload) == 0 {
		return "n/a"
	}
	for _, d := range [][]time.Duration{toWorkload, toAdmitted, toUngated} {
		slices.Sort(d)
	}
	first := slices.MinFunc(created, func(a, b time.Time) int { return a.Compare(b) })
	since := func(t time.Time) time.Duration { return t.Sub(first).Round(10 * time.Millisecond) }
	return fmt.Sprintf("(%d pods; %d Workloads seen, %d admitted) created->Workload %s, Workload->admitted %s, admitted->ungated %s; "+
		"the last pod was created after %s, the last Workload after %s, admitted after %s, ungated after %s",
		len(toWorkload), len(wt.created), len(wt.admitted), pct(toWorkload, 50), pct(toAdmitted, 50), pct(toUngated, 50),
		since(lastCreated), since(lastWorkload), since(lastAdmitted), since(lastUngated))
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
