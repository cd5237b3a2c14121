// Package bench measures sluice end to end on the local control plane: a
// burst of pods (single pods, and the same number in groups of ten)
// created through the webhook until every one is ungated, beside two raw
// rates of the same API server in the same run: creating gated pods and
// patching them ungated with no sluice at all, and the same with the gate
// added by a webhook that does nothing else. The benchmark's client has no
// rate limit, so the raw rates are the API server's. The machine is shared
// and noisy, so the ratios are the figures to compare across runs.
//
// Run it with `make bench`. It reports; it asserts nothing about timings.
package bench

import (
	"context"
	"fmt"
	"maps"
	"net/http"
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
	burst     = 2000 // pods per burst
	workers   = 32   // concurrent client workers, for sluice's burst and the raw baseline
	groupSize = 10   // pods per group in the groups burst
)

// TestMain sets controller-runtime's logger, which RunMain would set: the
// benchmark starts its control plane itself, with testenv.Start.
func TestMain(m *testing.M) {
	testenv.SetLogger(os.Stderr)
	os.Exit(m.Run())
}

func BenchmarkBurstSinglePods(b *testing.B) {
	runBurst(b, "single pods", apiServerOnly, func(ns string, i int) *corev1.Pod {
		return benchPod(ns, fmt.Sprintf("pod-%d", i), "user-queue")
	})
}

// BenchmarkBurstPodGroups bursts the same number of pods as groups of
// groupSize created beforehand (KEP-976 Story 2): each group is one
// Workload, submitted once all its pods exist and admitted whole.
func BenchmarkBurstPodGroups(b *testing.B) {
	runBurst(b, fmt.Sprintf("pods in %d groups of %d", burst/groupSize, groupSize), apiServerOnly, groupPod)
}

// BenchmarkBurstPodGroupsScheduled is BenchmarkBurstPodGroups on a whole
// control plane: kube-scheduler binds each pod once it is ungated and kwok
// runs it, as they do in a cluster, in the raw runs as in sluice's. Their
// work competes for the same two cores, so every rate is lower and the
// share of raw is the figure comparable with other queueing systems
// measured the same way.
func BenchmarkBurstPodGroupsScheduled(b *testing.B) {
	runBurst(b, fmt.Sprintf("pods in %d groups of %d, scheduled and run by kube-scheduler and kwok", burst/groupSize, groupSize),
		wholeControlPlane, groupPod)
}

// groupPod is pod i of the groups bursts: groups of groupSize created
// beforehand, each naming its size.
func groupPod(ns string, i int) *corev1.Pod {
	p := benchPod(ns, fmt.Sprintf("pod-%d", i), "user-queue")
	p.Labels[podkeys.PodGroupNameLabel] = fmt.Sprintf("group-%d", i/groupSize)
	p.Annotations = map[string]string{podkeys.PodGroupTotalCountAnnotation: fmt.Sprint(groupSize)}
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

// BenchmarkBurstDeclaredGroups bursts the same number of pods as groups
// declared by a driver (KEP-976 Story 3): every groupSize-th pod declares
// its group (itself and groupSize-1 workers shaped by a template), the
// others are workers naming their role. Pods are created in burst order,
// so most workers of a group arrive around its driver: before its
// admission they wait and are ungated with it; after, they join at once.
// Joining writes nothing to the Workload.
func BenchmarkBurstDeclaredGroups(b *testing.B) {
	sets := fmt.Sprintf(`[{"name":"driver","count":1},{"name":"worker","count":%d,"template":{"spec":{"containers":`+
		`[{"name":"main","resources":{"requests":{"cpu":"100m"}}}]}}}]`, groupSize-1)
	runBurst(b, fmt.Sprintf("pods in %d declared groups of %d", burst/groupSize, groupSize), apiServerOnly, func(ns string, i int) *corev1.Pod {
		p := benchPod(ns, fmt.Sprintf("pod-%d", i), "user-queue")
		p.Labels[podkeys.PodGroupNameLabel] = fmt.Sprintf("group-%d", i/groupSize)
		if i%groupSize == 0 {
			p.Annotations = map[string]string{podkeys.PodGroupSetsAnnotation: sets}
		} else {
			p.Labels[podkeys.PodGroupRoleLabel] = "worker"
		}
		return p
	})
}

// runBurst measures the raw pipeline, then bursts pods made by newPod
// through sluice, in one control plane, and reports both.
func runBurst(b *testing.B, shape string, envOpts testenv.Options, newPod func(ns string, i int) *corev1.Pod) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
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
	rawCPU := newCPUMeter(env, nil)
	raw := measureRaw(ctx, b, cs, namespace(ctx, b, cs, "raw"), true)
	rawCPUReport := rawCPU.report()
	hookCPU := newCPUMeter(env, nil)
	hooked := measureRawThroughWebhook(ctx, b, cs)
	hookCPUReport := hookCPU.report()

	opts := harness.Options{BinDir: os.Getenv("SLUICE_SERVICES_BIN")}
	profileDir := os.Getenv("SLUICE_BENCH_PROFILE_DIR")
	if profileDir != "" {
		opts.Args = map[string][]string{"admitter": {"--pprof"}, "grouper": {"--pprof"}, "webhook": {"--pprof"}}
	}
	s, err := harness.Start(ctx, env, opts)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Stop()
	cpu := newCPUMeter(env, s)
	res := measureSluice(ctx, b, env, cs, newPod, s, profileDir)
	cpuReport := cpu.report()

	b.ReportMetric(res.podsPerSecond, "pods/s")
	b.ReportMetric(raw.pipelinePerSecond, "raw-pods/s")
	b.ReportMetric(res.writesPerPod, "writes/pod")
	b.ReportMetric(res.p50.Seconds()*1000, "p50-ms")
	b.ReportMetric(res.p99.Seconds()*1000, "p99-ms")

	fmt.Printf("\n== burst of %d %s, %d client workers ==\n", burst, shape, workers)
	fmt.Printf("raw API server, no sluice: %s\n", raw)
	fmt.Printf("raw through a webhook that only adds the gate: %s (%.0f%% of raw)\n",
		hooked, 100*hooked.pipelinePerSecond/raw.pipelinePerSecond)
	fmt.Printf("sluice: %.0f pods/s from creation to ungated (%.0f%% of the raw pipeline), %d/%d ungated\n",
		res.podsPerSecond, 100*res.podsPerSecond/raw.pipelinePerSecond, res.ungated, burst)
	fmt.Printf("latency creation->ungated: p50 %s  p90 %s  p99 %s\n", res.p50, res.p90, res.p99)
	fmt.Printf("median time per stage: %s\n", res.stages)
	fmt.Printf("API writes per pod (all clients, pod create included): %.2f\n", res.writesPerPod)
	fmt.Printf("writes by resource: %s\n", res.writesByResource)
	fmt.Printf("other requests by resource, per pod: %s\n", res.readsByResource)
	fmt.Printf("CPU seconds, raw pipeline: %s\n", rawCPUReport)
	fmt.Printf("CPU seconds, raw through the gating webhook (its server is the benchmark's): %s\n", hookCPUReport)
	fmt.Printf("CPU seconds, sluice from the burst's start to the last ungate: %s\n", cpuReport)
}

type sluiceResult struct {
	podsPerSecond, writesPerPod float64
	p50, p90, p99               time.Duration
	ungated                     int
	writesByResource            string
	readsByResource             string
	stages                      string
}

func measureSluice(ctx context.Context, b *testing.B, env *testenv.Env, cs kubernetes.Interface, newPod func(ns string, i int) *corev1.Pod,
	s *harness.Sluice, profileDir string) sluiceResult {
	ns := namespace(ctx, b, cs, "burst")
	c, err := client.New(env.Config, client.Options{})
	if err != nil {
		b.Fatal(err)
	}
	if err := sluicev1alpha1.AddToScheme(c.Scheme()); err != nil {
		b.Fatal(err)
	}
	setupQueues(ctx, b, c, ns)

	informers, err := cache.New(env.Config, cache.Options{Scheme: c.Scheme(), DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		b.Fatal(err)
	}
	ungatedAt := watchUngated(ctx, b, informers)
	// A group's Workload has no owners: its pods are found by group name.
	groupPods := map[string][]string{}
	for i := range burst {
		if p := newPod(ns, i); p.Labels[podkeys.PodGroupNameLabel] != "" {
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
	if profileDir != "" {
		go profileAPIServer(ctx, b, cs, profileDir)
		for _, svc := range []*harness.Service{s.Admitter, s.Grouper, s.Webhook} {
			go profileService(ctx, b, svc, profileDir)
		}
	}
	created := make([]time.Time, burst)
	start := time.Now()
	parallel(burst, func(i int) error {
		created[i] = time.Now()
		_, err := cs.CoreV1().Pods(ns).Create(ctx, newPod(ns, i), metav1.CreateOptions{})
		return err
	}, b)

	// Wait until every pod is ungated, or give up after a generous bound.
	deadline := time.Now().Add(10 * time.Minute)
	var seen map[string]time.Time
	for {
		seen = ungatedAt.snapshot()
		if len(seen) >= burst || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(50 * time.Millisecond) // polling an in-memory map, not standing in for a condition
	}
	after, err := env.RequestCounts(ctx)
	if err != nil {
		b.Fatal(err)
	}

	var last time.Time
	lat := make([]time.Duration, 0, burst)
	for i := range burst {
		t, ok := seen[fmt.Sprintf("pod-%d", i)]
		if !ok {
			continue
		}
		lat = append(lat, t.Sub(created[i]))
		if t.After(last) {
			last = t
		}
	}
	if len(lat) < burst {
		b.Errorf("only %d of %d pods were ungated within the bound", len(lat), burst)
	}
	stagesReport := stages.report(created, seen)
	slices.Sort(lat)
	var res sluiceResult
	res.ungated = len(lat)
	if len(lat) > 0 {
		res.podsPerSecond = float64(len(lat)) / last.Sub(start).Seconds()
		res.p50, res.p90, res.p99 = pct(lat, 50), pct(lat, 90), pct(lat, 99)
	}
	writes, byRes, reads := 0.0, map[string]float64{}, map[string]float64{}
	for _, rc := range testenv.SubtractCounts(after, before) {
		if rc.IsWrite() {
			writes += rc.Count
			byRes[rc.Verb+" "+rc.Resource+subres(rc.Subresource)] += rc.Count
		} else {
			reads[rc.Verb+" "+rc.Resource+subres(rc.Subresource)] += rc.Count
		}
	}
	res.readsByResource = perPod(reads)
	res.writesPerPod = writes / burst
	res.stages = stagesReport
	res.writesByResource = perPod(byRes)
	return res
}

// unlimited returns a copy of cfg without a client-side rate limit.
func unlimited(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS = -1 // client-go makes no rate limiter for a QPS below zero
	return cfg
}

// perPod renders request counts by verb and resource, per pod of the burst.
func perPod(counts map[string]float64) string {
	var parts []string
	for k, v := range counts {
		parts = append(parts, fmt.Sprintf("%s=%.2f", k, v/burst))
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

func setupQueues(ctx context.Context, b *testing.B, c client.Client, ns string) {
	objs := []client.Object{
		&sluicev1alpha1.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: "bench"}},
		&sluicev1alpha1.ClusterQueue{
			ObjectMeta: metav1.ObjectMeta{Name: "bench"},
			Spec: sluicev1alpha1.ClusterQueueSpec{ResourceGroups: []sluicev1alpha1.ResourceGroup{{
				CoveredResources: []corev1.ResourceName{corev1.ResourceCPU},
				Flavors: []sluicev1alpha1.FlavorQuotas{{Name: "bench", Resources: []sluicev1alpha1.ResourceQuota{
					{Name: corev1.ResourceCPU, NominalQuota: resource.MustParse("100000")},
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
}

func (u *ungatedTimes) snapshot() map[string]time.Time {
	u.mu.Lock()
	defer u.mu.Unlock()
	return maps.Clone(u.seen)
}

func watchUngated(ctx context.Context, b *testing.B, informers cache.Cache) *ungatedTimes {
	u := &ungatedTimes{seen: map[string]time.Time{}}
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

func benchPod(ns, name, queue string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "main", Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}},
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

// profileAPIServer writes a 10-second CPU profile of kube-apiserver, taken
// during the burst, to dir/kube-apiserver.pprof. Set SLUICE_BENCH_PROFILE_DIR
// to get one, and the same of the admitter, grouper and webhook (started
// with --pprof); `go tool pprof` reads them.
func profileAPIServer(ctx context.Context, b *testing.B, cs kubernetes.Interface, dir string) {
	data, err := cs.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", "10").DoRaw(ctx)
	if err != nil {
		b.Logf("profiling kube-apiserver: %v", err)
		return
	}
	path := filepath.Join(dir, "kube-apiserver.pprof")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		b.Logf("writing %s: %v", path, err)
		return
	}
	fmt.Printf("kube-apiserver CPU profile: %s\n", path)
}

func profileService(ctx context.Context, b *testing.B, svc *harness.Service, dir string) {
	data, code, err := svc.Get(ctx, "/debug/pprof/profile?seconds=10")
	if err != nil || code != http.StatusOK {
		b.Logf("profiling %s: %d %v", svc.Name, code, err)
		return
	}
	path := filepath.Join(dir, svc.Name+".pprof")
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		b.Logf("writing %s: %v", path, err)
		return
	}
	fmt.Printf("%s CPU profile: %s\n", svc.Name, path)
}
