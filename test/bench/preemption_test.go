package bench

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/test/harness"
	"github.com/sluice-dev/sluice/test/testenv"
)

// preemptionPods is how many low-priority pods fill the ClusterQueue of a
// preemption run, and how many high-priority pods then preempt them.
// SLUICE_BENCH_PREEMPTION_PODS overrides it (a multiple of the group
// size).
const preemptionPods = 1000

// The WorkloadPriorityClasses of the preemption runs.
const (
	lowPriorityClass  = "bench-low"
	highPriorityClass = "bench-high"
)

// preemptionCase is one preemption run: the shape of its pods.
type preemptionCase struct {
	shape     string
	groupSize int // 1 for single pods
}

// BenchmarkPreemptionSinglePods fills a ClusterQueue (withinClusterQueue
// LowerPriority) with low-priority single pods, all running, then creates
// as many high-priority pods of the same size: each preempts one.
func BenchmarkPreemptionSinglePods(b *testing.B) {
	runPreemption(b, preemptionCase{shape: "single pods", groupSize: 1})
}

// BenchmarkPreemptionPodGroups is BenchmarkPreemptionSinglePods with
// groups of ten created beforehand: each high-priority group preempts one
// low-priority group, whose pods are deleted and whose Workload then
// waits for them.
func BenchmarkPreemptionPodGroups(b *testing.B) {
	runPreemption(b, preemptionCase{shape: "pods in groups of 10", groupSize: 10})
}

// preemptionPodCount is the pods of each priority in a preemption run.
func preemptionPodCount(b *testing.B, groupSize int) int {
	n := preemptionPods
	if v := os.Getenv("SLUICE_BENCH_PREEMPTION_PODS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 || n%groupSize != 0 {
			b.Fatalf("SLUICE_BENCH_PREEMPTION_PODS=%q: want a positive multiple of %d", v, groupSize)
		}
	}
	return n
}

// pod is pod i of a priority ("low" or "high") in a run of c.
func (c preemptionCase) pod(ns, priority string, i int) *corev1.Pod {
	p := benchPod(ns, fmt.Sprintf("%s-%d", priority, i), "user-queue")
	p.Labels[podkeys.PriorityClassLabel] = lowPriorityClass
	if priority == "high" {
		p.Labels[podkeys.PriorityClassLabel] = highPriorityClass
	}
	if c.groupSize > 1 {
		p.Labels[podkeys.PodGroupNameLabel] = fmt.Sprintf("%s-group-%d", priority, i/c.groupSize)
		p.Annotations = map[string]string{podkeys.PodGroupTotalCountAnnotation: fmt.Sprint(c.groupSize)}
	}
	return p
}

// runPreemption measures one preemption run on a whole control plane
// (kube-scheduler binds the pods, kwok runs them and stops the preempted
// ones as a kubelet would): the raw pipeline and the raw pipeline through
// a gating webhook first, as every burst does, then sluice. A
// ClusterQueue whose quota is exactly n pods, with withinClusterQueue
// LowerPriority, is filled with n low-priority pods, all running; then n
// high-priority pods of the same size are created. Every low-priority
// workload must be preempted, and stop, before the high-priority ones all
// fit.
func runPreemption(b *testing.B, c preemptionCase) {
	n := preemptionPodCount(b, c.groupSize)
	bound := ungateBound(b, n)
	// Starting the control plane and sluice and the raw runs take a few
	// minutes at most; filling the queue and the preemption may each take
	// the whole bound.
	ctx, cancel := context.WithTimeout(context.Background(), 2*bound+15*time.Minute)
	defer cancel()
	env, err := testenv.Start(ctx, wholeControlPlane)
	if err != nil {
		b.Fatal(err)
	}
	defer env.Stop()
	cs, err := kubernetes.NewForConfig(unlimited(env.Config))
	if err != nil {
		b.Fatal(err)
	}
	raw := measureRaw(ctx, b, cs, namespace(ctx, b, cs, "raw"), true, burst, nil)
	hooked := measureRawThroughWebhook(ctx, b, cs, burst)

	opts := harness.Options{BinDir: os.Getenv("SLUICE_SERVICES_BIN")}
	if os.Getenv("SLUICE_BENCH_PROFILE_DIR") != "" {
		opts.Args = map[string][]string{"admitter": {"--pprof"}, "grouper": {"--pprof"}, "webhook": {"--pprof"}}
	}
	s, err := harness.Start(ctx, env, opts)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Stop()
	res := measurePreemption(ctx, b, env, cs, s, c, n, bound)

	b.ReportMetric(res.podsPerSecond, "pods/s")
	b.ReportMetric(raw.pipelinePerSecond, "raw-pods/s")
	b.ReportMetric(res.lastUngate.Seconds()*1000, "last-ungate-ms")
	b.ReportMetric(res.p50.Seconds()*1000, "p50-ms")
	b.ReportMetric(res.p99.Seconds()*1000, "p99-ms")
	b.ReportMetric(res.writesPerVictim, "writes/preempted-pod")
	b.ReportMetric(float64(res.victimPods), "preempted-pods")
	b.ReportMetric(res.admitterCPU, "admitter-cpu-ms/preempted-pod")

	fmt.Printf("\n== preemption of %d low-priority %s by as many high-priority ones, %d client workers, scheduled and run by kube-scheduler and kwok ==\n",
		n, c.shape, workers)
	fmt.Printf("raw API server, no sluice (%d pods): %s\n", burst, raw)
	fmt.Printf("raw through a webhook that only adds the gate: %s (%.0f%% of raw)\n",
		hooked, 100*hooked.pipelinePerSecond/raw.pipelinePerSecond)
	fmt.Printf("filling the queue: %d low-priority pods created, admitted and running in %s\n", n, res.fill.Round(time.Millisecond))
	fmt.Printf("sluice: %.0f high-priority pods/s from the first create to the last ungate (%.0f%% of the raw pipeline), %d/%d ungated in %s\n",
		res.podsPerSecond, 100*res.podsPerSecond/raw.pipelinePerSecond, res.ungated, n, res.lastUngate.Round(time.Millisecond))
	fmt.Printf("latency creation->ungated: p50 %s  p90 %s  p99 %s\n", res.p50, res.p90, res.p99)
	fmt.Printf("since the first high-priority create: %s\n", res.timeline)
	fmt.Printf("preempted: %d Workloads, %d pods (%d Workloads evicted for another reason)\n", res.victimWorkloads, res.victimPods, res.otherEvictions)
	fmt.Printf("Workload and pod writes per preempted pod (all clients, the preemptors' included): %.2f; settled: %s\n", res.writesPerVictim, res.settled)
	fmt.Printf("writes by resource, per preempted pod: %s\n", res.writesByResource)
	fmt.Printf("other writes, not counted, per preempted pod: %s\n", res.otherWrites)
	fmt.Printf("CPU seconds, from the first high-priority create until settled: %s\n", res.cpu)
}

type preemptionResult struct {
	ungateLatency
	fill                   time.Duration
	lastUngate             time.Duration // from the first high-priority create
	victimWorkloads        int
	victimPods             int
	otherEvictions         int
	writesPerVictim        float64
	writesByResource       string
	otherWrites            string  // the writes not counted, per preempted pod
	admitterCPU            float64 // ms per preempted pod
	timeline, settled, cpu string
}

func measurePreemption(ctx context.Context, b *testing.B, env *testenv.Env, cs kubernetes.Interface, s *harness.Sluice,
	c preemptionCase, n int, bound time.Duration) preemptionResult {
	ns := namespace(ctx, b, cs, "preemption")
	cl, err := client.New(env.Config, client.Options{})
	if err != nil {
		b.Fatal(err)
	}
	if err := sluicev1alpha1.AddToScheme(cl.Scheme()); err != nil {
		b.Fatal(err)
	}
	setupPreemptionQueues(ctx, b, cl, cs, ns, c, n)

	informers, err := cache.New(env.Config, cache.Options{Scheme: cl.Scheme(), DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		b.Fatal(err)
	}
	w := watchPreemption(ctx, b, informers)
	go func() { _ = informers.Start(ctx) }()
	if !informers.WaitForCacheSync(ctx) {
		b.Fatal("informers did not sync")
	}

	var res preemptionResult
	fillStart := time.Now()
	parallel(n, func(i int) error {
		_, err := cs.CoreV1().Pods(ns).Create(ctx, c.pod(ns, "low", i), metav1.CreateOptions{})
		return err
	}, b)
	if !waitFor(ctx, bound, fillStart, "low-priority pods running", func() (int, int) { return w.count("low-", w.running), n }) {
		b.Fatalf("only %d of %d low-priority pods run after %s", w.count("low-", w.running), n, bound)
	}
	res.fill = time.Since(fillStart)

	before, err := env.RequestCounts(ctx)
	if err != nil {
		b.Fatal(err)
	}
	cpu := newCPUMeter(env, s)
	if dir := runProfileDir(b); dir != "" {
		profileRun(ctx, b, env, cs, s, dir)
	}
	created := make([]time.Time, n)
	start := time.Now()
	parallel(n, func(i int) error {
		created[i] = time.Now()
		_, err := cs.CoreV1().Pods(ns).Create(ctx, c.pod(ns, "high", i), metav1.CreateOptions{})
		return err
	}, b)
	createdAll := time.Now()
	waitFor(ctx, bound, start, "high-priority pods ungated", func() (int, int) { return w.count("high-", w.ungated), n })
	ungated := w.times("high-", w.ungated)

	// The writes are counted until the exchange is over: every preempted
	// workload settled (a single pod's Workload deleted once its pod is
	// gone, a group's waiting for its pods without quota) and every
	// ungated preemptor running, so that all the writes it causes are in,
	// and no other.
	settled := waitFor(ctx, 2*time.Minute, time.Now(), "preempted Workloads settled and ungated high-priority pods running", func() (int, int) {
		victims, settled := w.victimsSettled(c.groupSize > 1)
		return settled + w.count("high-", w.running), victims + len(ungated)
	})
	after, err := env.RequestCounts(ctx)
	if err != nil {
		b.Fatal(err)
	}
	res.cpu = cpu.report()
	admitterCPU := cpu.used("admitter")

	res.ungateLatency = measureUngateLatency(created, ungated, "high-", start)
	if res.ungated < n {
		b.Errorf("only %d of %d high-priority pods were ungated within %s; %s", res.ungated, n, bound, w.stuck())
	}
	if res.ungated > 0 {
		res.lastUngate = res.last.Sub(start)
	}
	res.victimWorkloads, res.otherEvictions = w.evictions()
	res.victimPods = w.count("low-", w.deleted)
	res.timeline = w.timeline(start, createdAll, res.last)
	res.settled = "yes"
	if !settled {
		victims, done := w.victimsSettled(c.groupSize > 1)
		res.settled = fmt.Sprintf("no, after 2m: %d of %d preempted Workloads, %d of %d ungated high-priority pods running",
			done, victims, w.count("high-", w.running), len(ungated))
	}

	// What is counted: every write (create, update, patch, delete, by any
	// client) to pods, their subresources (binding, status) included, and
	// to sluice's Workloads, from just before the first high-priority
	// create until the exchange settled. That is the preemptors' own path
	// (their creates, Workloads, admissions and ungates, kube-scheduler's
	// bindings and kwok's status writes) and the victims' (the eviction,
	// the pod deletions and kwok's part in them, the finalizers removed,
	// the quota released, a single pod's Workload deleted). Events and
	// queue status are left out. Dividing by the preempted pods gives what
	// one pod preempted and replaced costs.
	writes, byRes, others := 0.0, map[string]float64{}, map[string]float64{}
	for _, rc := range testenv.SubtractCounts(after, before) {
		if !rc.IsWrite() {
			continue
		}
		name := rc.Verb + " " + rc.Resource + subres(rc.Subresource)
		if rc.Group == "" && rc.Resource == "pods" || rc.Group == sluicev1alpha1.GroupVersion.Group && rc.Resource == "workloads" {
			writes += rc.Count
			byRes[name] += rc.Count
		} else {
			others[name] += rc.Count
		}
	}
	if res.victimPods > 0 {
		res.writesPerVictim = writes / float64(res.victimPods)
		res.writesByResource = perPod(byRes, res.victimPods)
		res.otherWrites = perPod(others, res.victimPods)
		res.admitterCPU = admitterCPU * 1000 / float64(res.victimPods)
	}
	return res
}

// setupPreemptionQueues makes the two WorkloadPriorityClasses and a
// ClusterQueue with quota for exactly n bench pods whose pending workloads
// preempt lower-priority ones, and waits until sluice's webhook knows the
// classes.
func setupPreemptionQueues(ctx context.Context, b *testing.B, cl client.Client, cs kubernetes.Interface, ns string, c preemptionCase, n int) {
	quota := benchPodCPU.DeepCopy()
	quota.Mul(int64(n))
	objs := []client.Object{
		&sluicev1alpha1.WorkloadPriorityClass{ObjectMeta: metav1.ObjectMeta{Name: lowPriorityClass}, Value: 0},
		&sluicev1alpha1.WorkloadPriorityClass{ObjectMeta: metav1.ObjectMeta{Name: highPriorityClass}, Value: 1000},
		&sluicev1alpha1.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: "bench"}},
		&sluicev1alpha1.ClusterQueue{
			ObjectMeta: metav1.ObjectMeta{Name: "bench"},
			Spec: sluicev1alpha1.ClusterQueueSpec{
				ResourceGroups: []sluicev1alpha1.ResourceGroup{{
					CoveredResources: []corev1.ResourceName{corev1.ResourceCPU},
					Flavors: []sluicev1alpha1.FlavorQuotas{{Name: "bench", Resources: []sluicev1alpha1.ResourceQuota{
						{Name: corev1.ResourceCPU, NominalQuota: quota},
					}}},
				}},
				Preemption: &sluicev1alpha1.ClusterQueuePreemption{WithinClusterQueue: sluicev1alpha1.PreemptionLowerPriority},
			},
		},
		&sluicev1alpha1.LocalQueue{
			ObjectMeta: metav1.ObjectMeta{Name: "user-queue", Namespace: ns},
			Spec:       sluicev1alpha1.LocalQueueSpec{ClusterQueue: "bench"},
		},
	}
	for _, o := range objs {
		if err := cl.Create(ctx, o); err != nil {
			b.Fatalf("creating %T: %v", o, err)
		}
	}
	var probes []*corev1.Pod
	for _, priority := range []string{"low", "high"} {
		probe := c.pod(ns, priority, 0)
		probe.Name = "probe-" + priority
		probes = append(probes, probe)
	}
	waitWebhookTakes(ctx, b, cs, probes...)
}

// waitWebhookTakes waits until sluice's webhook takes each of the probe
// pods, with dry-run creates: it refuses a pod naming a
// WorkloadPriorityClass its cache has not seen yet.
func waitWebhookTakes(ctx context.Context, b *testing.B, cs kubernetes.Interface, probes ...*corev1.Pod) {
	wait, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, probe := range probes {
		err := harness.Poll(wait, func() error {
			_, err := cs.CoreV1().Pods(probe.Namespace).Create(wait, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		})
		if err != nil {
			b.Fatalf("sluice's webhook does not take pods of class %s: %v", probe.Labels[podkeys.PriorityClassLabel], err)
		}
	}
}

// preemptionWatch records, from informers, what a preemption run waits
// for and reports: when each pod was first seen ungated and running and
// when it was deleted, and each Workload's eviction and state.
type preemptionWatch struct {
	mu                         sync.Mutex
	ungated, running, deleted  map[string]time.Time // by pod name
	evicted                    map[string]time.Time // by Workload name: first seen Evicted, reason Preempted
	otherEvicted               map[string]bool      // by Workload name: evicted for another reason
	admitted                   map[string]time.Time // by Workload name: first seen Admitted
	workloads                  map[string]*sluicev1alpha1.Workload
	gone                       map[string]bool // Workloads deleted
	firstEvicted, lastEvicted  time.Time
	lastVictimGone, lastAdmits time.Time
}

func watchPreemption(ctx context.Context, b *testing.B, informers cache.Cache) *preemptionWatch {
	w := &preemptionWatch{
		ungated: map[string]time.Time{}, running: map[string]time.Time{}, deleted: map[string]time.Time{},
		evicted: map[string]time.Time{}, otherEvicted: map[string]bool{}, admitted: map[string]time.Time{},
		workloads: map[string]*sluicev1alpha1.Workload{}, gone: map[string]bool{},
	}
	observeAll(ctx, b, informers, &corev1.Pod{}, func(obj any, deleted bool) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		now := time.Now()
		w.mu.Lock()
		defer w.mu.Unlock()
		switch {
		case deleted:
			first(w.deleted, p.Name, now)
			if strings.HasPrefix(p.Name, "low-") {
				w.lastVictimGone = now
			}
		case p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil:
			first(w.running, p.Name, now)
			fallthrough
		case !hasGate(p):
			first(w.ungated, p.Name, now)
		}
	})
	observeAll(ctx, b, informers, &sluicev1alpha1.Workload{}, func(obj any, deleted bool) {
		wl, ok := obj.(*sluicev1alpha1.Workload)
		if !ok {
			return
		}
		now := time.Now()
		w.mu.Lock()
		defer w.mu.Unlock()
		if deleted {
			w.gone[wl.Name] = true
			return
		}
		w.workloads[wl.Name] = wl
		if meta.IsStatusConditionTrue(wl.Status.Conditions, sluicev1alpha1.WorkloadAdmitted) && first(w.admitted, wl.Name, now) {
			w.lastAdmits = now
		}
		if c := meta.FindStatusCondition(wl.Status.Conditions, sluicev1alpha1.WorkloadEvicted); c != nil && c.Status == metav1.ConditionTrue {
			if c.Reason != sluicev1alpha1.ReasonPreempted {
				w.otherEvicted[wl.Name] = true
			} else if first(w.evicted, wl.Name, now) {
				if w.firstEvicted.IsZero() {
					w.firstEvicted = now
				}
				w.lastEvicted = now
			}
		}
	})
	return w
}

// first records now as the time of name in m unless it has one; it
// reports whether it did.
func first(m map[string]time.Time, name string, now time.Time) bool {
	if _, ok := m[name]; ok {
		return false
	}
	m[name] = now
	return true
}

// count is how many names with prefix m holds, under w's lock.
func (w *preemptionWatch) count(prefix string, m map[string]time.Time) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for name := range m {
		if strings.HasPrefix(name, prefix) {
			n++
		}
	}
	return n
}

// times copies the times of the names with prefix in m.
func (w *preemptionWatch) times(prefix string, m map[string]time.Time) map[string]time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]time.Time{}
	for name, t := range m {
		if strings.HasPrefix(name, prefix) {
			out[name] = t
		}
	}
	return out
}

// victimsSettled counts the preempted Workloads, and those whose eviction
// is over: deleted, or, for a group, holding no quota while it waits for
// its pods.
func (w *preemptionWatch) victimsSettled(groups bool) (victims, settled int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for name := range w.evicted {
		victims++
		wl := w.workloads[name]
		switch {
		case w.gone[name]:
			settled++
		case groups && wl.Status.Admission == nil &&
			meta.IsStatusConditionTrue(wl.Status.Conditions, sluicev1alpha1.WorkloadWaitingForReplacementPods):
			settled++
		}
	}
	return victims, settled
}

// stuck says where a preemption that did not finish stopped: the
// high-priority Workloads not admitted, with what they wait for, and the
// low-priority ones still holding quota, with their eviction, a few of
// each.
func (w *preemptionWatch) stuck() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var waiting, holding []string
	for _, name := range slices.Sorted(maps.Keys(w.workloads)) {
		wl := w.workloads[name]
		if w.gone[name] || meta.IsStatusConditionTrue(wl.Status.Conditions, sluicev1alpha1.WorkloadFinished) {
			continue
		}
		state := func(cond string) string {
			if c := meta.FindStatusCondition(wl.Status.Conditions, cond); c != nil {
				return fmt.Sprintf("%s=%s (%s: %s)", cond, c.Status, c.Reason, c.Message)
			}
			return cond + " unset"
		}
		switch {
		case strings.Contains(name, "high-") && !meta.IsStatusConditionTrue(wl.Status.Conditions, sluicev1alpha1.WorkloadAdmitted):
			waiting = append(waiting, name+": "+state(sluicev1alpha1.WorkloadQuotaReserved))
		case strings.Contains(name, "low-") && wl.Status.Admission != nil:
			holding = append(holding, name+": "+state(sluicev1alpha1.WorkloadEvicted))
		}
	}
	few := func(list []string) string {
		if len(list) > 5 {
			return strings.Join(list[:5], "; ") + fmt.Sprintf("; and %d more", len(list)-5)
		}
		return strings.Join(list, "; ")
	}
	return fmt.Sprintf("%d high-priority Workloads wait: %s. %d low-priority Workloads hold quota: %s",
		len(waiting), few(waiting), len(holding), few(holding))
}

// evictions counts the Workloads preempted and those evicted for another
// reason (none are expected).
func (w *preemptionWatch) evictions() (preempted, other int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.evicted), len(w.otherEvicted)
}

// timeline says when, since start, the preemption passed its milestones.
func (w *preemptionWatch) timeline(start, createdAll, lastUngate time.Time) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	since := func(t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return t.Sub(start).Round(10 * time.Millisecond).String()
	}
	return fmt.Sprintf("the last pod was created after %s; the first victim was evicted after %s, the last after %s; "+
		"the last victim pod was gone after %s; the last Workload was admitted after %s and the last pod ungated after %s",
		since(createdAll), since(w.firstEvicted), since(w.lastEvicted), since(w.lastVictimGone), since(w.lastAdmits), since(lastUngate))
}

// waitFor polls progress until its first count reaches its second or
// bound has passed since start, printing every minute how far it got; it
// reports whether they met.
func waitFor(ctx context.Context, bound time.Duration, start time.Time, what string, progress func() (int, int)) bool {
	ctx, cancel := context.WithDeadline(ctx, start.Add(bound))
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	report := time.NewTicker(time.Minute)
	defer report.Stop()
	for {
		if got, want := progress(); got >= want {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-report.C:
			got, want := progress()
			fmt.Printf("... %d/%d %s after %s\n", got, want, what, time.Since(start).Round(time.Second))
		case <-tick.C:
		}
	}
}

// observeAll calls f with every added, updated or deleted object of obj's
// kind; deleted says which.
func observeAll(ctx context.Context, b *testing.B, informers cache.Cache, obj client.Object, f func(obj any, deleted bool)) {
	inf, err := informers.GetInformer(ctx, obj)
	if err != nil {
		b.Fatal(err)
	}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { f(o, false) },
		UpdateFunc: func(_, o any) { f(o, false) },
		DeleteFunc: func(o any) {
			if tomb, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
				o = tomb.Obj
			}
			f(o, true)
		},
	})
	if err != nil {
		b.Fatal(err)
	}
}
