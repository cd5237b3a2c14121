package bench

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/procfs"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/test/harness"
	"github.com/sluice-dev/sluice/test/testenv"
)

// The raw scale benchmarks are the ceiling the scale benchmarks are held
// against: the same pods of the same shape, created on the same schedule
// on the same control plane, bound by kube-scheduler and run by kwok for
// their class's run time, with no sluice at all (no queueing, no quota,
// and no queue label, so nothing of sluice would touch them). What the
// machine's control plane can do for those pods is the most sluice could;
// sluice's figures divided by these are what its queueing costs. They take
// the time of the pods' schedule and run, a few minutes at full size.

// BenchmarkScaleBaselineRaw is BenchmarkScaleBaseline's pods with no
// sluice: 15,000 at full size.
func BenchmarkScaleBaselineRaw(b *testing.B) {
	runRawScaleShape(b, baselineShape.perQueueScaled(scaleFactor(b, 1)))
}

// BenchmarkScaleLargeRaw is BenchmarkScaleLarge's pods with no sluice, at
// the same default scale.
func BenchmarkScaleLargeRaw(b *testing.B) {
	runRawScaleShape(b, largeShape.queuesScaled(scaleFactor(b, largeDefaultScale)))
}

// nominalCPU is the quota of all of a shape's ClusterQueues, the cpu
// runScaleShape sizes its nodes by: the raw run gets the same nodes.
func (s scaleShape) nominalCPU() int64 { return int64(s.queues() * scaleNominalCPU) }

// rawPodObject is a pod of class c as sluice's scale runs create it, but
// without the queue label.
func rawPodObject(ns, name string, c scaleClass) *corev1.Pod {
	p := scalePodObject(ns, name, c)
	delete(p.Labels, podkeys.QueueNameLabel)
	return p
}

// rawMeasurement is what one raw scale run measured. Durations run from
// the first create.
type rawMeasurement struct {
	n                      int
	watch                  *rawWatch
	start                  time.Time
	createdAll, wall, done time.Duration
	started, succeeded     int
	rate                   float64 // pods started per second of wall
	cpuReport              string
	cpuUsed                map[string]float64 // CPU seconds by process
	peak                   map[string]uint64  // VmHWM by control-plane process
	writes                 float64            // API writes by every client
	writesBy               map[string]float64
	errors                 []string
}

// runRawScaleShape creates sh's pods as runScaleShape does, on the same
// control plane without sluice, and measures until every pod has started
// and then succeeded.
func runRawScaleShape(b *testing.B, sh scaleShape) {
	n := sh.workloads()
	bound := ungateBound(b, n)
	ctx, cancel := context.WithTimeout(context.Background(), bound+20*time.Minute)
	defer cancel()
	env, cs := startRawScaleRun(ctx, b, sh.nominalCPU())
	_, queues, pods, gens := sh.plan()
	createNamespaces(ctx, b, cs, queues)
	waitNamespacesSettled(ctx, b, cs, queues)

	m := measureRawScale(ctx, b, env, pods, queues, bound, func(start time.Time) {
		createPaced(ctx, b, cs, sh.classes, queues, pods, gens, start, rawPodObject)
	})
	m.print(sh)
	m.report(b, sh)
}

// startRawScaleRun starts the control plane a scale run of maxCPU gets,
// and no sluice, and returns it with a client without a rate limit.
func startRawScaleRun(ctx context.Context, b *testing.B, maxCPU int64) (*testenv.Env, kubernetes.Interface) {
	defer logSince(time.Now(), "the control plane started")
	env, err := testenv.Start(ctx, scaleEnvOptions(maxCPU))
	if err != nil {
		b.Fatalf("starting the control plane: %v", err)
	}
	b.Cleanup(func() { _ = env.Stop() })
	cs, err := kubernetes.NewForConfig(unlimited(env.Config))
	if err != nil {
		b.Fatalf("making a client: %v", err)
	}
	return env, cs
}

// createNamespaces makes each queue's namespace, as the scale runs do.
func createNamespaces(ctx context.Context, b *testing.B, cs kubernetes.Interface, queues []scaleQueue) {
	parallel(len(queues), func(i int) error {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: queues[i].name}}
		if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating namespace %s: %w", ns.Name, err)
		}
		return nil
	}, b)
}

// waitNamespacesSettled waits until kube-controller-manager has given
// every queue's namespace its default ServiceAccount and root CA
// ConfigMap, as it has long before a sluice scale run's queues are taken,
// so that its writes fall before the measurement, not in it.
func waitNamespacesSettled(ctx context.Context, b *testing.B, cs kubernetes.Interface, queues []scaleQueue) {
	wait, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	inRun := make(map[string]bool, len(queues))
	for _, q := range queues {
		inRun[q.name] = true
	}
	err := harness.Poll(wait, func() error {
		sas, err := cs.CoreV1().ServiceAccounts("").List(wait, metav1.ListOptions{FieldSelector: "metadata.name=default"})
		if err != nil {
			return fmt.Errorf("listing ServiceAccounts: %w", err)
		}
		cms, err := cs.CoreV1().ConfigMaps("").List(wait, metav1.ListOptions{FieldSelector: "metadata.name=kube-root-ca.crt"})
		if err != nil {
			return fmt.Errorf("listing ConfigMaps: %w", err)
		}
		sa, cm := 0, 0
		for _, o := range sas.Items {
			if inRun[o.Namespace] {
				sa++
			}
		}
		for _, o := range cms.Items {
			if inRun[o.Namespace] {
				cm++
			}
		}
		if sa < len(queues) || cm < len(queues) {
			return fmt.Errorf("%d of %d namespaces have their default ServiceAccount, %d their root CA ConfigMap", sa, len(queues), cm)
		}
		return nil
	})
	if err != nil {
		b.Fatalf("waiting for the namespaces to settle: %v", err)
	}
}

// measureRawScale watches the pods and meters the control plane's CPU while
// create makes them (it is called with the time of the first create),
// until every pod has started and then every pod has ended; it fails b
// unless every pod started within bound and succeeded.
func measureRawScale(ctx context.Context, b *testing.B, env *testenv.Env, pods []scalePod, queues []scaleQueue, bound time.Duration,
	create func(start time.Time)) *rawMeasurement {
	n := len(pods)
	w := newRawWatch(pods, queues)
	m := &rawMeasurement{n: n, watch: w}
	informers, err := cache.New(env.Config, cache.Options{DefaultTransform: cache.TransformStripManagedFields()})
	if err != nil {
		b.Fatalf("making the pod informer: %v", err)
	}
	observeAll(ctx, b, informers, &corev1.Pod{}, w.pod)
	go func() { _ = informers.Start(ctx) }()
	if !informers.WaitForCacheSync(ctx) {
		b.Fatal("the pod informer did not sync")
	}
	before, err := env.RequestCounts(ctx)
	if err != nil {
		b.Fatalf("reading the API server's request counts: %v", err)
	}
	cpu := newCPUMeter(env, nil)

	m.start = time.Now()
	create(m.start)
	m.createdAll = time.Since(m.start)
	started := waitFor(ctx, bound, m.start, "pods started", func() (int, int) { return w.counts().started, n })
	// A pod that failed or was deleted never succeeds: wait for every pod
	// to end, however, and tell which did not succeed.
	ended := started && waitFor(ctx, 10*time.Minute, time.Now(), "pods ended", func() (int, int) { return w.counts().ended, n })
	m.cpuUsed = cpu.usedByProcess()
	m.cpuReport = cpuReport(m.cpuUsed)
	m.peak = peakMemory(env)
	after, err := env.RequestCounts(ctx)
	if err != nil {
		b.Fatalf("reading the API server's request counts: %v", err)
	}
	m.writes, m.writesBy, _ = countRequests(after, before)

	c := w.counts()
	m.started, m.succeeded = c.started, c.succeeded
	if c.started > 0 {
		m.wall = c.lastStarted.Sub(m.start)
		m.rate = float64(c.started) / m.wall.Seconds()
	}
	if c.succeeded > 0 {
		m.done = c.lastSucceeded.Sub(m.start)
	}
	switch {
	case !started:
		m.errors = append(m.errors, fmt.Sprintf("only %d of %d pods started within %s", c.started, n, bound))
	case !ended:
		m.errors = append(m.errors, fmt.Sprintf("only %d of %d pods ended within 10m of the last start", c.ended, n))
	case c.succeeded < n:
		m.errors = append(m.errors, fmt.Sprintf("only %d of %d pods succeeded", c.succeeded, n))
	}
	m.errors = append(m.errors, w.problems()...)
	for _, e := range m.errors {
		b.Error(e)
	}
	return m
}

// rawWatch follows a raw run's pods from an informer: when each was first
// seen started (PodScheduled True, or past Pending: the raw analogue of
// admitted and ungated), Running, and Succeeded.
type rawWatch struct {
	pods  []scalePod
	index map[string]int // by namespace/name; read-only once made

	mu                      sync.Mutex
	started, running        []time.Time
	ended                   []bool // terminal or deleted
	nStarted, nEnded, nDone int
	lastStarted, lastDone   time.Time
	// unsuccessful are the first few pods that failed, or were deleted
	// before they succeeded; nUnsuccessful counts them all.
	unsuccessful  []string
	nUnsuccessful int
}

func newRawWatch(pods []scalePod, queues []scaleQueue) *rawWatch {
	n := len(pods)
	w := &rawWatch{
		pods: pods, index: make(map[string]int, n),
		started: make([]time.Time, n), running: make([]time.Time, n), ended: make([]bool, n),
	}
	for i, p := range pods {
		w.index[queues[p.queue].name+"/"+p.name] = i
	}
	return w
}

// isStarted reports whether kube-scheduler has bound p or kwok runs or
// has run it.
func isStarted(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodPending && p.Status.Phase != "" {
		return true
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// pod records one informer event. A deleted pod's object is its last
// state seen; the pod garbage collector deletes terminated pods once
// there are more than its threshold (12,500 by default), so deletion after
// success is expected.
func (w *rawWatch) pod(obj any, deleted bool) {
	p, i, ok := runPod(w.index, obj)
	if !ok {
		return
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if isStarted(p) && w.started[i].IsZero() {
		w.started[i] = now
		w.nStarted++
		w.lastStarted = now
	}
	if p.Status.Phase == corev1.PodRunning && w.running[i].IsZero() {
		w.running[i] = now
	}
	if w.ended[i] {
		return
	}
	switch {
	case p.Status.Phase == corev1.PodSucceeded:
		w.nDone++
		w.lastDone = now
	case p.Status.Phase == corev1.PodFailed:
		w.unsuccessfulPod(p, "failed: "+p.Status.Reason+" "+p.Status.Message)
	case deleted:
		w.unsuccessfulPod(p, "deleted in phase "+string(p.Status.Phase))
	default:
		return
	}
	w.ended[i] = true
	w.nEnded++
}

// unsuccessfulPod notes a pod that ended without succeeding.
func (w *rawWatch) unsuccessfulPod(p *corev1.Pod, what string) {
	w.nUnsuccessful++
	if len(w.unsuccessful) < 5 {
		w.unsuccessful = append(w.unsuccessful, p.Namespace+"/"+p.Name+" "+what)
	}
}

// rawCounts are a raw run's progress so far.
type rawCounts struct {
	started, ended, succeeded  int
	lastStarted, lastSucceeded time.Time
}

func (w *rawWatch) counts() rawCounts {
	w.mu.Lock()
	defer w.mu.Unlock()
	return rawCounts{started: w.nStarted, ended: w.nEnded, succeeded: w.nDone, lastStarted: w.lastStarted, lastSucceeded: w.lastDone}
}

func (w *rawWatch) problems() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.nUnsuccessful == 0 {
		return nil
	}
	return []string{fmt.Sprintf("%d pods ended without succeeding: %s", w.nUnsuccessful, strings.Join(w.unsuccessful, "; "))}
}

// latency is the time from each pod's create to to(i), over the pods of
// class (any class when class < 0) seen there. Read after the creates.
func (w *rawWatch) latency(class int, to func(i int) time.Time) latencySpread {
	w.mu.Lock()
	defer w.mu.Unlock()
	var ds []time.Duration
	for i, p := range w.pods {
		if t := to(i); (class < 0 || p.class == class) && !t.IsZero() {
			ds = append(ds, t.Sub(p.created))
		}
	}
	return spread(ds)
}

// toStarted and toRunning are create→started and create→Running.
func (w *rawWatch) toStarted(class int) latencySpread {
	return w.latency(class, func(i int) time.Time { return w.started[i] })
}

func (w *rawWatch) toRunning(class int) latencySpread {
	return w.latency(class, func(i int) time.Time { return w.running[i] })
}

// peakMemory is each control-plane process's peak resident memory
// (VmHWM), in bytes. The control plane starts with the run, so its peak is
// the run's; a process that cannot be read is left out.
func peakMemory(env *testenv.Env) map[string]uint64 {
	out := map[string]uint64{}
	for name, pid := range env.Pids() {
		p, err := procfs.NewProc(pid)
		if err != nil {
			continue
		}
		if st, err := p.NewStatus(); err == nil {
			out[name] = st.VmHWM
		}
	}
	return out
}

// peakString renders peak memory in MB, the largest first.
func peakString(peak map[string]uint64) string {
	parts := make([]string, 0, len(peak))
	for _, name := range largestFirst(peak) {
		parts = append(parts, fmt.Sprintf("%s %.0f", name, mb(peak[name])))
	}
	return strings.Join(parts, ", ")
}

func (m *rawMeasurement) print(sh scaleShape) {
	w := m.watch
	fmt.Printf("\n== scale raw: the pods of Kueue's %s shape, %d cohorts of %d queues' worth (%d of %d per cohort: scale %.2f), %d pods, with no sluice ==\n",
		sh.name, sh.cohorts, sh.queuesPerCohort, sh.queuesPerCohort, sh.fullQueues, sh.scale, m.n)
	fmt.Printf("created: the last of %d pods after %s (%.0f creates/s; Kueue's schedule would take %s)\n",
		m.n, m.createdAll.Round(10*time.Millisecond), float64(m.n)/m.createdAll.Seconds(), scheduleLength(sh.classes).Round(10*time.Millisecond))
	fmt.Printf("wall, first create to last pod started (bound or running): %s, %.1f pods started/s (%d of %d)\n",
		m.wall.Round(10*time.Millisecond), m.rate, m.started, m.n)
	fmt.Printf("time to start (the pod's create to it first seen with PodScheduled True or past Pending by the benchmark's informer):\n")
	for c, class := range sh.classes {
		l := w.toStarted(c)
		fmt.Printf("  %-6s (%d cpu, runs %s): %d started: %s; to Running: %s\n",
			class.name, class.cpu, class.runFor, l.n, l, w.toRunning(c))
	}
	fmt.Printf("every pod succeeded after %s (%d of %d succeeded)\n", m.done.Round(10*time.Millisecond), m.succeeded, m.n)
	fmt.Printf("API writes per pod by every client %.2f: %s\n", m.writes/float64(m.n), perPod(atLeast(m.writesBy, 0.005*float64(m.n)), m.n))
	fmt.Printf("CPU seconds from the first create until every pod ended: %s\n", m.cpuReport)
	fmt.Printf("peak resident memory (VmHWM), MB: %s\n", peakString(m.peak))
	if len(m.errors) == 0 {
		fmt.Printf("correct: every pod started and succeeded\n")
	} else {
		fmt.Printf("NOT CORRECT:\n  %s\n", strings.Join(m.errors, "\n  "))
	}
}

// report reports the run's metrics to the benchmark and prints them as one
// line, SCALE-RAW-RESULT followed by key=value fields, for scripts; its
// names match SCALE-RESULT's where the figures correspond.
func (m *rawMeasurement) report(b *testing.B, sh scaleShape) {
	fields := []string{fmt.Sprintf("shape=%s scale=%.3g workloads=%d started=%d succeeded=%d wall-s=%.2f adm/s=%.2f succeeded-s=%.2f",
		sh.name, sh.scale, m.n, m.started, m.succeeded, m.wall.Seconds(), m.rate, m.done.Seconds())}
	b.ReportMetric(m.wall.Seconds(), "wall-s")
	b.ReportMetric(m.rate, "adm/s")
	for c, class := range sh.classes {
		l := m.watch.toStarted(c)
		b.ReportMetric(float64(l.mean.Milliseconds()), class.name+"-mean-ms")
		b.ReportMetric(float64(l.p99.Milliseconds()), class.name+"-p99-ms")
		fields = append(fields, fmt.Sprintf("%[1]s-p50-ms=%[2]d %[1]s-p99-ms=%[3]d %[1]s-mean-ms=%[4]d",
			class.name, l.p50.Milliseconds(), l.p99.Milliseconds(), l.mean.Milliseconds()))
	}
	fields = append(fields, fmt.Sprintf("all-writes/workload=%.3f", m.writes/float64(m.n)))
	var cpu float64
	for _, name := range slices.Sorted(maps.Keys(m.cpuUsed)) {
		cpu += m.cpuUsed[name]
		fields = append(fields, fmt.Sprintf("%s-cpu-s=%.1f", name, m.cpuUsed[name]))
	}
	fields = append(fields, fmt.Sprintf("cpu-s=%.1f", cpu))
	for _, name := range slices.Sorted(maps.Keys(m.peak)) {
		fields = append(fields, fmt.Sprintf("%s-peak-MB=%.0f", name, mb(m.peak[name])))
	}
	fields = append(fields, fmt.Sprintf("correct=%t", len(m.errors) == 0))
	fmt.Printf("SCALE-RAW-RESULT %s\n", strings.Join(fields, " "))
}
