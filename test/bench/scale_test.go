package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/test/harness"
	"github.com/sluice-dev/sluice/test/testenv"
)

// The scale benchmarks run the shapes of Kueue's scheduler performance
// tests through the whole of sluice, each workload a real single pod: the
// client creates it through the API server and sluice's webhook, the
// grouper makes its Workload, the admitter admits it, the grouper ungates
// it, kube-scheduler binds it, kwok runs it for its class's run time
// (kwok.sluice.dev/run-for, hack/kwok/stages.yaml) and it succeeds, which
// finishes its Workload and frees its quota. Kueue's runner creates
// Workload objects with no pods, so its figures are what the queueing
// alone costs there; beside them these measure the same shapes with every
// pod's own life in the API server too. BenchmarkScaleDeepQueue is
// sluice's own: a held queue filled with 10,000 pending workloads, then
// opened.
//
// They take long (on two cores about 15 minutes for the baseline, 20 for
// the large shape at largeDefaultScale, 7 for the deep queue): `make
// bench-scale` runs them, `make bench` does not. SLUICE_BENCH_SCALE scales
// them down (see scaleFactor); `make test` runs them at 1% (`make
// scale-check`), for their correctness checks. docs/benchmarks.md says
// how to read what they print.

// The quota of every ClusterQueue of the cohort shapes, in cpu.
const (
	scaleNominalCPU   = 20
	scaleBorrowingCPU = 100
)

// scaleFlavor is the one ResourceFlavor of the scale runs, scaleLocalQueue
// the LocalQueue of each namespace.
const (
	scaleFlavor     = "scale"
	scaleLocalQueue = "queue"
)

// largeDefaultScale is the size BenchmarkScaleLarge runs at when
// SLUICE_BENCH_SCALE is unset: its share of Kueue's 1,000 ClusterQueues
// (each with Kueue's 50 workloads). On the 2-core reference machine this,
// 20,000 pods, takes about 20 minutes; the full shape, 50,000 pods, would
// take about an hour at the rate measured (see docs/benchmarks.md).
const largeDefaultScale = 0.4

// scaleClass is one class of workloads of a shape, per ClusterQueue.
type scaleClass struct {
	name     string
	perQueue int           // workloads of the class in each ClusterQueue
	interval time.Duration // one is created every interval, per queue
	runFor   time.Duration // how long its pod runs
	priority int32
	cpu      int64
	// kueueMean is Kueue's mean time to admission of the class at full
	// size (the mean its rangespec records).
	kueueMean time.Duration
}

// priorityClass is the WorkloadPriorityClass the class's pods name.
func (c scaleClass) priorityClass() string { return "scale-" + c.name }

// scaleShape is a topology of Kueue's scheduler performance tests: cohorts
// of ClusterQueues, each with one namespace and LocalQueue, and the
// classes of workloads every queue gets.
type scaleShape struct {
	name            string
	cohorts         int
	queuesPerCohort int
	classes         []scaleClass
	// Kueue's figures at full size: the workloads and the wall time
	// (minimalkueue's process time, the mean its rangespec records).
	kueueWorkloads int
	kueueWall      time.Duration
	// fullQueues is the queues per cohort at full size.
	fullQueues int
	scale      float64
}

var baselineShape = scaleShape{
	name: "baseline", cohorts: 5, queuesPerCohort: 6, fullQueues: 6,
	classes: []scaleClass{
		{name: "small", perQueue: 350, interval: 100 * time.Millisecond, runFor: 200 * time.Millisecond, priority: 50, cpu: 1, kueueMean: 215468 * time.Millisecond},
		{name: "medium", perQueue: 100, interval: 500 * time.Millisecond, runFor: 500 * time.Millisecond, priority: 100, cpu: 5, kueueMean: 76768 * time.Millisecond},
		{name: "large", perQueue: 50, interval: 1200 * time.Millisecond, runFor: 1000 * time.Millisecond, priority: 200, cpu: 20, kueueMean: 16501 * time.Millisecond},
	},
	kueueWorkloads: 15000, kueueWall: 351116 * time.Millisecond,
}

var largeShape = scaleShape{
	name: "large", cohorts: 10, queuesPerCohort: 100, fullQueues: 100,
	classes: []scaleClass{
		{name: "small", perQueue: 35, interval: 60 * time.Millisecond, runFor: 150 * time.Millisecond, priority: 50, cpu: 1, kueueMean: 700379 * time.Millisecond},
		{name: "medium", perQueue: 11, interval: 300 * time.Millisecond, runFor: 350 * time.Millisecond, priority: 100, cpu: 5, kueueMean: 256413 * time.Millisecond},
		{name: "large", perQueue: 4, interval: 700 * time.Millisecond, runFor: 700 * time.Millisecond, priority: 200, cpu: 20, kueueMean: 105604 * time.Millisecond},
	},
	kueueWorkloads: 50000, kueueWall: 1179411 * time.Millisecond,
}

// deepQueueClass is the one class of BenchmarkScaleDeepQueue: the
// baseline's small workloads.
var deepQueueClass = baselineShape.classes[0]

// deepQueueWorkloads is BenchmarkScaleDeepQueue's pending workloads at full
// size.
const deepQueueWorkloads = 10000

// perQueueScaled is the shape with each class's workloads per queue
// scaled by f (at least one each).
func (s scaleShape) perQueueScaled(f float64) scaleShape {
	s.classes = slices.Clone(s.classes)
	for i := range s.classes {
		s.classes[i].perQueue = scaled(s.classes[i].perQueue, f)
	}
	s.scale = f
	return s
}

// queuesScaled is the shape with its queues per cohort scaled by f (at
// least one), each queue keeping its workloads.
func (s scaleShape) queuesScaled(f float64) scaleShape {
	s.queuesPerCohort = scaled(s.queuesPerCohort, f)
	s.scale = f
	return s
}

func scaled(n int, f float64) int { return max(1, int(math.Round(float64(n)*f))) }

func (s scaleShape) queues() int { return s.cohorts * s.queuesPerCohort }

func (s scaleShape) workloads() int {
	n := 0
	for _, c := range s.classes {
		n += c.perQueue
	}
	return n * s.queues()
}

// scaleFactor is SLUICE_BENCH_SCALE, the share of full size to run at
// (e.g. 0.1), or def when it is unset. The baseline scales each queue's
// workloads; the large shape, whose queues hold few, its queues; the deep
// queue its workloads.
func scaleFactor(b *testing.B, def float64) float64 {
	v := os.Getenv("SLUICE_BENCH_SCALE")
	if v == "" {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f <= 0 || math.IsInf(f, 0) {
		b.Fatalf("SLUICE_BENCH_SCALE=%q: want a positive number, e.g. 0.1", v)
	}
	return f
}

// BenchmarkScaleBaseline is Kueue's baseline shape: 5 cohorts of 6
// ClusterQueues, 500 workloads per queue in three classes, 15,000 pods.
func BenchmarkScaleBaseline(b *testing.B) {
	runScaleShape(b, baselineShape.perQueueScaled(scaleFactor(b, 1)))
}

// BenchmarkScaleLarge is Kueue's large-scale shape: 10 cohorts of 100
// ClusterQueues, 50 workloads per queue, 50,000 pods at full size; by
// default it runs largeDefaultScale of the queues.
func BenchmarkScaleLarge(b *testing.B) {
	runScaleShape(b, largeShape.queuesScaled(scaleFactor(b, largeDefaultScale)))
}

// BenchmarkScaleDeepQueue fills one held ClusterQueue (stopPolicy Hold)
// with 10,000 pending single-pod workloads, with quota for all of them,
// then opens it: how fast a deep queue drains into admissions.
func BenchmarkScaleDeepQueue(b *testing.B) {
	f := scaleFactor(b, 1)
	runDeepQueue(b, scaled(deepQueueWorkloads, f), f)
}

// scaleRun is one scale benchmark's control plane and sluice.
type scaleRun struct {
	env *testenv.Env
	cs  kubernetes.Interface // without a client-side rate limit
	cl  client.Client
	s   *harness.Sluice
}

// scaleEnvOptions is the control plane of a scale run: a whole one, with
// kwok nodes that hold twice the cpu (and pods) the quota lets run at
// once, maxCPU, so that kube-scheduler always finds room.
func scaleEnvOptions(maxCPU int64) testenv.Options {
	const nodes = 10
	perNode := max(200, 2*maxCPU/nodes)
	return testenv.Options{
		Scheduler: true, ControllerManager: true, Kwok: true, Nodes: nodes,
		Node: testenv.NodeShape{CPU: strconv.FormatInt(perNode, 10), Memory: "4Ti", Pods: int(perNode)},
	}
}

// startScaleRun starts the control plane of scaleEnvOptions(maxCPU), and
// sluice.
func startScaleRun(ctx context.Context, b *testing.B, maxCPU int64) *scaleRun {
	defer logSince(time.Now(), "the control plane and sluice started")
	env, err := testenv.Start(ctx, scaleEnvOptions(maxCPU))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = env.Stop() })
	r := &scaleRun{env: env}
	if r.cs, err = kubernetes.NewForConfig(unlimited(env.Config)); err != nil {
		b.Fatal(err)
	}
	if r.cl, err = client.New(unlimited(env.Config), client.Options{}); err != nil {
		b.Fatal(err)
	}
	if err := sluicev1alpha1.AddToScheme(r.cl.Scheme()); err != nil {
		b.Fatal(err)
	}
	// The admitter serves its profiles in every run: collectedHeap has it
	// collect its garbage through them.
	opts := harness.Options{BinDir: os.Getenv("SLUICE_SERVICES_BIN"), Args: map[string][]string{"admitter": {"--pprof"}}}
	if os.Getenv("SLUICE_BENCH_PROFILE_DIR") != "" {
		opts.Args["grouper"], opts.Args["webhook"] = []string{"--pprof"}, []string{"--pprof"}
	}
	if r.s, err = harness.Start(ctx, env, opts); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = r.s.Stop() })
	return r
}

// scaleQueue is one ClusterQueue of a run, with its namespace and
// LocalQueue (the namespace and the ClusterQueue share its name).
type scaleQueue struct {
	name   string
	cohort int // index in the run's cohorts; -1 for none
}

// scalePod is one pod of a run: its namespace is its queue's name.
type scalePod struct {
	name    string
	queue   int // index in the run's queues
	class   int // index in the run's classes
	created time.Time
}

// create makes the run's flavor and WorkloadPriorityClasses, and for
// each queue its namespace and LocalQueue, with clusterQueue(q) as its
// ClusterQueue and, for each cohort named, an empty Cohort (its status
// then reports what its queues hold); then waits until the admitter
// reports every ClusterQueue active (or, held, inactive) and sluice's
// webhook takes pods of every class.
func (r *scaleRun) create(ctx context.Context, b *testing.B, classes []scaleClass, queues []scaleQueue, cohorts []string,
	clusterQueue func(q scaleQueue) *sluicev1alpha1.ClusterQueue) {
	defer logSince(time.Now(), fmt.Sprintf("%d queues made and taken by the admitter", len(queues)))
	objs := []client.Object{&sluicev1alpha1.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: scaleFlavor}}}
	for _, c := range classes {
		objs = append(objs, &sluicev1alpha1.WorkloadPriorityClass{ObjectMeta: metav1.ObjectMeta{Name: c.priorityClass()}, Value: c.priority})
	}
	for _, name := range cohorts {
		objs = append(objs, &sluicev1alpha1.Cohort{ObjectMeta: metav1.ObjectMeta{Name: name}})
	}
	for _, o := range objs {
		if err := r.cl.Create(ctx, o); err != nil {
			b.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
	parallel(len(queues), func(i int) error {
		q := queues[i]
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: q.name}}
		lq := &sluicev1alpha1.LocalQueue{
			ObjectMeta: metav1.ObjectMeta{Name: scaleLocalQueue, Namespace: q.name},
			Spec:       sluicev1alpha1.LocalQueueSpec{ClusterQueue: q.name},
		}
		return errors.Join(r.cl.Create(ctx, ns), r.cl.Create(ctx, clusterQueue(q)), r.cl.Create(ctx, lq))
	}, b)

	wait, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	err := harness.Poll(wait, func() error {
		var cqs sluicev1alpha1.ClusterQueueList
		if err := r.cl.List(wait, &cqs); err != nil {
			return err
		}
		taken := 0
		for _, cq := range cqs.Items {
			// A held queue is reported inactive.
			held := cq.Spec.StopPolicy != nil && *cq.Spec.StopPolicy != sluicev1alpha1.None
			if c := meta.FindStatusCondition(cq.Status.Conditions, sluicev1alpha1.ClusterQueueActive); c != nil &&
				(c.Status == metav1.ConditionTrue || held) {
				taken++
			}
		}
		if taken < len(queues) {
			return fmt.Errorf("the admitter reports %d of %d ClusterQueues", taken, len(queues))
		}
		return nil
	})
	if err != nil {
		b.Fatalf("waiting for the admitter to take the queues: %v", err)
	}
	var probes []*corev1.Pod
	for i := range classes {
		probes = append(probes, scalePodObject(queues[0].name, "probe-"+classes[i].name, classes[i]))
	}
	waitWebhookTakes(ctx, b, r.cs, probes...)
}

// logSince prints how long what took since start.
func logSince(start time.Time, what string) {
	fmt.Printf("%s in %s\n", what, time.Since(start).Round(100*time.Millisecond))
}

// cohortClusterQueue is a ClusterQueue of Kueue's shapes: nominal 20 cpu,
// borrowingLimit 100, reclaimWithinCohort Any, withinClusterQueue
// LowerPriority, BestEffortFIFO.
func cohortClusterQueue(name, cohort string) *sluicev1alpha1.ClusterQueue {
	borrowing := resource.MustParse(strconv.Itoa(scaleBorrowingCPU))
	return &sluicev1alpha1.ClusterQueue{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: sluicev1alpha1.ClusterQueueSpec{
			CohortName:       cohort,
			QueueingStrategy: sluicev1alpha1.BestEffortFIFO,
			ResourceGroups: []sluicev1alpha1.ResourceGroup{{
				CoveredResources: []corev1.ResourceName{corev1.ResourceCPU},
				Flavors: []sluicev1alpha1.FlavorQuotas{{Name: scaleFlavor, Resources: []sluicev1alpha1.ResourceQuota{{
					Name: corev1.ResourceCPU, NominalQuota: resource.MustParse(strconv.Itoa(scaleNominalCPU)), BorrowingLimit: &borrowing,
				}}}},
			}},
			Preemption: &sluicev1alpha1.ClusterQueuePreemption{
				ReclaimWithinCohort: sluicev1alpha1.PreemptionAny,
				WithinClusterQueue:  sluicev1alpha1.PreemptionLowerPriority,
			},
		},
	}
}

// scalePodObject is a pod of class c: its cpu, its WorkloadPriorityClass
// and its run time.
func scalePodObject(ns, name string, c scaleClass) *corev1.Pod {
	p := benchPod(ns, name, scaleLocalQueue)
	p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: *resource.NewQuantity(c.cpu, resource.DecimalSI)}
	p.Labels[podkeys.PriorityClassLabel] = c.priorityClass()
	p.Annotations = map[string]string{"kwok.sluice.dev/run-for": c.runFor.String()}
	return p
}

// createScalePod creates p, trying again a few times when the API server
// is overloaded or times out; a pod an earlier try created counts.
func createScalePod(ctx context.Context, cs kubernetes.Interface, p *corev1.Pod) error {
	for try := 1; ; try++ {
		_, err := cs.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
		switch {
		case err == nil:
			return nil
		case try > 1 && apierrors.IsAlreadyExists(err):
			return nil
		case try < 5 && (apierrors.IsTooManyRequests(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) ||
			apierrors.IsInternalError(err) || apierrors.IsServiceUnavailable(err)):
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(try) * 200 * time.Millisecond): // back off
			}
		default:
			return fmt.Errorf("creating pod %s/%s: %w", p.Namespace, p.Name, err)
		}
	}
}

// runScaleShape runs one of Kueue's shapes, sh: its queues, and its pods
// created as Kueue's runner creates its workloads (per queue and class,
// one every interval, all concurrently), until every workload is admitted
// and every pod has finished; then reports.
func runScaleShape(b *testing.B, sh scaleShape) {
	n := sh.workloads()
	bound := ungateBound(b, n)
	ctx, cancel := context.WithTimeout(context.Background(), 2*bound+15*time.Minute)
	defer cancel()
	queueLimit := int64(scaleNominalCPU + scaleBorrowingCPU)
	cohortLimit := int64(sh.queuesPerCohort * scaleNominalCPU)
	r := startScaleRun(ctx, b, int64(sh.cohorts)*cohortLimit)

	cohorts, queues, pods, gens := sh.plan()
	r.create(ctx, b, sh.classes, queues, cohorts, func(q scaleQueue) *sluicev1alpha1.ClusterQueue {
		return cohortClusterQueue(q.name, cohorts[q.cohort])
	})

	limits := scaleLimits{queue: queueLimit * 1000, cohort: cohortLimit * 1000}
	m := r.measure(ctx, b, sh.classes, queues, cohorts, pods, limits, bound, func(start time.Time) time.Time {
		createPaced(ctx, b, r.cs, sh.classes, queues, pods, gens, start, scalePodObject)
		return time.Now()
	})

	kueueRate := float64(sh.kueueWorkloads) / sh.kueueWall.Seconds()
	fmt.Printf("\n== scale: Kueue's %s shape, %d cohorts of %d ClusterQueues (%d of %d per cohort: scale %.2f), %d single-pod workloads ==\n",
		sh.name, sh.cohorts, sh.queuesPerCohort, sh.queuesPerCohort, sh.fullQueues, sh.scale, n)
	if sh.workloads() != sh.kueueWorkloads {
		fmt.Printf("a scaled run: %d of Kueue's %d workloads; compare the rate and the times to admission with care, Kueue's are at full size\n",
			n, sh.kueueWorkloads)
	}
	fmt.Printf("created: the last of %d pods after %s (%.0f creates/s; Kueue's schedule would take %s)\n",
		n, m.createdAll.Round(10*time.Millisecond), float64(n)/m.createdAll.Seconds(), scheduleLength(sh.classes).Round(10*time.Millisecond))
	fmt.Printf("wall, first create to last admission: %s, %.1f admissions/s; Kueue %s, %.1f admissions/s: sluice's rate %.2f× Kueue's",
		m.wall.Round(10*time.Millisecond), m.rate, sh.kueueWall.Round(time.Second), kueueRate, m.rate/kueueRate)
	if n == sh.kueueWorkloads {
		fmt.Printf(", wall %.2f× Kueue's", m.wall.Seconds()/sh.kueueWall.Seconds())
	}
	fmt.Println()
	fmt.Printf("quota: reserved cpu averaged %.1f%% of the queues' nominal quota from the first create to the last admission (Kueue's usage %%: %s)\n",
		m.usage, map[string]string{"baseline": "55.9", "large": "38.6"}[sh.name])
	m.print(sh.classes)

	b.ReportMetric(m.rate/kueueRate, "kueue-rate-ratio")
	result := []string{fmt.Sprintf("shape=%s scale=%.3g kueue-wall-s=%.1f kueue-adm/s=%.2f rate-ratio=%.3f",
		sh.name, sh.scale, sh.kueueWall.Seconds(), kueueRate, m.rate/kueueRate)}
	for _, c := range sh.classes {
		result = append(result, fmt.Sprintf("%s-kueue-mean-ms=%d", c.name, c.kueueMean.Milliseconds()))
	}
	m.report(b, sh.classes, result)
}

// plan names a shape's cohorts and its queues (each with a namespace of
// its name), and lists its pods; gens are the pods of each queue and
// class, in the order they are created.
func (s scaleShape) plan() (cohorts []string, queues []scaleQueue, pods []scalePod, gens [][]int) {
	cohorts = make([]string, s.cohorts)
	for c := range cohorts {
		cohorts[c] = fmt.Sprintf("cohort-%02d", c)
	}
	for c := range s.cohorts {
		for q := range s.queuesPerCohort {
			queues = append(queues, scaleQueue{name: fmt.Sprintf("c%02d-q%03d", c, q), cohort: c})
		}
	}
	for q := range queues {
		for c, class := range s.classes {
			var gen []int
			for i := range class.perQueue {
				gen = append(gen, len(pods))
				pods = append(pods, scalePod{name: fmt.Sprintf("%s-%d", class.name, i), queue: q, class: c})
			}
			gens = append(gens, gen)
		}
	}
	return cohorts, queues, pods, gens
}

// scheduleLength is how long Kueue's schedule of a shape's creates takes:
// its longest class.
func scheduleLength(classes []scaleClass) time.Duration {
	var d time.Duration
	for _, c := range classes {
		d = max(d, time.Duration(c.perQueue-1)*c.interval)
	}
	return d
}

// createPaced creates the pods as Kueue's runner creates workloads: each
// generator (a queue's class) creates its pods one every class interval
// from start, all generators at once, with at most `workers` creates in
// flight; a generator that falls behind creates as fast as it can.
// newPod builds each pod from its queue's namespace, its name and class.
func createPaced(ctx context.Context, b *testing.B, cs kubernetes.Interface, classes []scaleClass, queues []scaleQueue,
	pods []scalePod, gens [][]int, start time.Time, newPod func(ns, name string, c scaleClass) *corev1.Pod) {
	inFlight := make(chan struct{}, workers)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for _, gen := range gens {
		wg.Go(func() {
			for k, i := range gen {
				p := &pods[i]
				class := classes[p.class]
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Until(start.Add(time.Duration(k) * class.interval))): // the schedule, not a wait for a condition
				}
				inFlight <- struct{}{}
				p.created = time.Now()
				err := createScalePod(ctx, cs, newPod(queues[p.queue].name, p.name, class))
				<-inFlight
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
}

// runDeepQueue fills one ClusterQueue, held (stopPolicy Hold) and with
// quota for every workload, with n pending single-pod workloads of the
// baseline's small class, then opens it (stopPolicy None) and measures
// how fast the deep queue drains into admissions.
func runDeepQueue(b *testing.B, n int, f float64) {
	bound := ungateBound(b, n)
	ctx, cancel := context.WithTimeout(context.Background(), 2*bound+15*time.Minute)
	defer cancel()
	class := deepQueueClass
	quota := int64(n) * class.cpu
	r := startScaleRun(ctx, b, quota)
	queues := []scaleQueue{{name: "deep", cohort: -1}}
	hold := sluicev1alpha1.Hold
	r.create(ctx, b, []scaleClass{class}, queues, nil, func(q scaleQueue) *sluicev1alpha1.ClusterQueue {
		return &sluicev1alpha1.ClusterQueue{
			ObjectMeta: metav1.ObjectMeta{Name: q.name},
			Spec: sluicev1alpha1.ClusterQueueSpec{
				QueueingStrategy: sluicev1alpha1.BestEffortFIFO,
				StopPolicy:       &hold,
				ResourceGroups: []sluicev1alpha1.ResourceGroup{{
					CoveredResources: []corev1.ResourceName{corev1.ResourceCPU},
					Flavors: []sluicev1alpha1.FlavorQuotas{{Name: scaleFlavor, Resources: []sluicev1alpha1.ResourceQuota{{
						Name: corev1.ResourceCPU, NominalQuota: *resource.NewQuantity(quota, resource.DecimalSI),
					}}}},
				}},
			},
		}
	})
	pods := make([]scalePod, n)
	for i := range pods {
		pods[i] = scalePod{name: fmt.Sprintf("%s-%d", class.name, i)}
	}

	var fill, opened time.Duration
	m := r.measure(ctx, b, []scaleClass{class}, queues, nil, pods, scaleLimits{queue: quota * 1000}, bound, func(start time.Time) time.Time {
		parallel(n, func(i int) error {
			pods[i].created = time.Now()
			return createScalePod(ctx, r.cs, scalePodObject(queues[0].name, pods[i].name, class))
		}, b)
		createdAll := time.Now()
		// Open the queue once the admitter holds every workload pending.
		pending := func() (int, int) {
			v, err := r.admitterGauge(ctx, "sluice_admitter_pending_workloads")
			if err != nil {
				return 0, n
			}
			return int(v), n
		}
		if !waitFor(ctx, bound, start, "workloads pending in the held queue", pending) {
			got, _ := pending()
			b.Fatalf("only %d of %d workloads pending after %s", got, n, bound)
		}
		fill = time.Since(start)
		patch := client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"stopPolicy":"None"}}`))
		cq := &sluicev1alpha1.ClusterQueue{ObjectMeta: metav1.ObjectMeta{Name: queues[0].name}}
		if err := r.cl.Patch(ctx, cq, patch); err != nil {
			b.Fatalf("opening the queue: %v", err)
		}
		opened = time.Since(start)
		return createdAll
	})
	open := m.start.Add(opened)
	fromOpen := m.lastAdmitted.Sub(open)
	rate := float64(m.admitted) / fromOpen.Seconds()
	var sinceOpen []time.Duration
	for _, t := range m.watch.admittedTimes() {
		if !t.IsZero() {
			sinceOpen = append(sinceOpen, t.Sub(open))
		}
	}
	slices.Sort(sinceOpen)

	fmt.Printf("\n== scale: one held ClusterQueue filled with %d pending single-pod workloads (%s: %d cpu, priority %d, %s run; scale %.2f), then opened ==\n",
		n, class.name, class.cpu, class.priority, class.runFor, f)
	fmt.Printf("filled: %d pods created after %s (%.0f creates/s), all %d pending in the admitter after %s; opened after %s\n",
		n, m.createdAll.Round(10*time.Millisecond), float64(n)/m.createdAll.Seconds(), n, fill.Round(10*time.Millisecond), opened.Round(10*time.Millisecond))
	fmt.Printf("drain: from opening to the last admission %s, %.1f admissions/s\n", fromOpen.Round(10*time.Millisecond), rate)
	if len(sinceOpen) > 0 {
		fmt.Printf("time from opening to admission: p50 %s  p99 %s  mean %s\n", pct(sinceOpen, 50), pct(sinceOpen, 99), mean(sinceOpen))
	}
	m.print([]scaleClass{class})

	b.ReportMetric(fromOpen.Seconds(), "open-to-last-admission-s")
	b.ReportMetric(rate, "drain-adm/s")
	result := []string{fmt.Sprintf("shape=deep-queue scale=%.3g fill-s=%.1f open-to-last-admission-s=%.2f drain-adm/s=%.1f",
		f, fill.Seconds(), fromOpen.Seconds(), rate)}
	if len(sinceOpen) > 0 {
		result = append(result, fmt.Sprintf("open-to-admission-p50-ms=%d open-to-admission-p99-ms=%d open-to-admission-mean-ms=%d",
			pct(sinceOpen, 50).Milliseconds(), pct(sinceOpen, 99).Milliseconds(), mean(sinceOpen).Milliseconds()))
	}
	m.report(b, []scaleClass{class}, result)
}

// collectedHeap is the admitter's heap in use right after a collection:
// the spans its live objects occupy, where the resident size also counts
// memory the runtime has not returned yet. Asking for a heap profile collects it first; with
// SLUICE_BENCH_PROFILE_DIR set, the profile is kept as
// admitter-heap-<when>.pprof.
func (r *scaleRun) collectedHeap(ctx context.Context, b *testing.B, when string) float64 {
	profile, code, err := r.s.Admitter.Get(ctx, "/debug/pprof/heap?gc=1")
	if err != nil || code != http.StatusOK {
		b.Logf("collecting the admitter's garbage: %d %v", code, err)
		return 0
	}
	if dir := os.Getenv("SLUICE_BENCH_PROFILE_DIR"); dir != "" {
		path := filepath.Join(dir, "admitter-heap-"+when+".pprof")
		if err := os.WriteFile(path, []byte(profile), 0o644); err != nil {
			b.Logf("writing %s: %v", path, err)
		}
	}
	heap, err := r.admitterGauge(ctx, "go_memstats_heap_inuse_bytes")
	if err != nil {
		b.Logf("reading the admitter's heap: %v", err)
	}
	return heap
}

// scaleMeasurement is what one scale run measured.
type scaleMeasurement struct {
	n     int
	watch *scaleWatch
	// start is the first create; createdAll, wall and drained are
	// durations from it: the last create's answer, the last admission and
	// the last pod's end.
	start                     time.Time
	createdAll, wall, drained time.Duration
	lastAdmitted              time.Time
	admitted                  int
	rate                      float64 // admissions per second of wall
	usage                     float64 // percent of nominal quota reserved, on average
	cycles                    []cycleBand
	timeline                  []string
	writes                    scaleWrites
	cpu                       string
	memory                    memoryReport
	idle, drainedRSS          settled
	idleHeap, drainedHeap     float64
	// emptied is how long deleting the pods and their Workloads took
	// after the run (see scaleRun.empty), and the admitter's memory then.
	emptied     time.Duration
	emptiedRSS  settled
	emptiedHeap float64
	grouper     grouperTimes
	errors      []string
}

// scaleLimits are the most cpu (in millicpu) a ClusterQueue and a cohort
// may hold: nominal plus borrowingLimit, and the cohort's pooled quota.
type scaleLimits struct{ queue, cohort int64 }

// measure watches the run's pods, Workloads, ClusterQueues and Cohorts,
// scrapes the admitter every second, counts writes and meters CPU and
// memory while create makes the pods (it is called with the time of the
// first create), until every workload is admitted and every pod has
// ended; then it checks what the run must hold.
func (r *scaleRun) measure(ctx context.Context, b *testing.B, classes []scaleClass, queues []scaleQueue, cohorts []string,
	pods []scalePod, limits scaleLimits, bound time.Duration, create func(start time.Time) (createdAll time.Time)) *scaleMeasurement {
	n := len(pods)
	m := &scaleMeasurement{n: n}
	w := newScaleWatch(classes, queues, cohorts, pods, limits)
	m.watch = w
	informers, err := cache.New(r.env.Config, cache.Options{Scheme: r.cl.Scheme(), DefaultTransform: cache.TransformStripManagedFields()})
	if err != nil {
		b.Fatal(err)
	}
	w.observe(ctx, b, informers)
	go func() { _ = informers.Start(ctx) }()
	if !informers.WaitForCacheSync(ctx) {
		b.Fatal("informers did not sync")
	}

	m.idle = settledRSS(ctx, r.s.Admitter, 15*time.Second)
	m.idleHeap = r.collectedHeap(ctx, b, "idle")
	scrapeCtx, stopScrape := context.WithCancel(ctx)
	scraper := newAdmitterScraper(r.s.Admitter, w.waitingCount)
	scraped := make(chan struct{})
	go func() { defer close(scraped); scraper.run(scrapeCtx) }()
	memory := newMemoryMeter(r.s)
	apiBefore, err := r.env.RequestCounts(ctx)
	if err != nil {
		b.Fatal(err)
	}
	servicesBefore, opsBefore := serviceWrites(ctx, r.s), admitterWrites(ctx, r.s)
	grouperBefore := readGrouperTimes(ctx, r.s)
	cpu := newCPUMeter(r.env, r.s)

	if dir := os.Getenv("SLUICE_BENCH_PROFILE_DIR"); dir != "" {
		profileRun(ctx, b, r.env, r.cs, r.s, dir)
	}
	m.start = time.Now()
	w.startUsage(m.start)
	m.createdAll = create(m.start).Sub(m.start)
	if os.Getenv("SLUICE_BENCH_PROFILE_DIR") != "" {
		r.collectedHeap(ctx, b, "created") // near the peak: every workload exists, most still pending
	}
	admitted := waitFor(ctx, bound, m.start, "workloads admitted", func() (int, int) { return w.admittedCount(), n })
	m.lastAdmitted = w.lastAdmission()
	m.usage = w.stopUsage(m.lastAdmitted)
	drained := admitted && waitFor(ctx, 10*time.Minute, time.Now(), "pods ended and queues empty", func() (int, int) {
		ended := w.endedCount()
		if ended == n && !scraper.idle() {
			ended-- // the admitter still reports workloads pending or holding quota
		}
		return ended, n
	})
	m.drained = time.Since(m.start)
	m.cpu = cpu.report()
	stopScrape()
	<-scraped
	apiAfter, err := r.env.RequestCounts(ctx)
	if err != nil {
		b.Fatal(err)
	}
	m.writes = scaleWrites{services: subtractWrites(serviceWrites(ctx, r.s), servicesBefore),
		workloadOp: subtractWrites(admitterWrites(ctx, r.s), opsBefore)}
	m.writes.all, m.writes.byResource, m.writes.others = countRequests(apiAfter, apiBefore)
	m.grouper = readGrouperTimes(ctx, r.s).since(grouperBefore)
	m.memory = memory.report()
	if drained {
		m.drainedRSS = settledRSS(ctx, r.s.Admitter, time.Minute)
		m.drainedHeap = r.collectedHeap(ctx, b, "drained")
	}
	m.cycles = slices.Concat(scraper.bands("cycle"), scraper.bands("cycle-written"))
	m.timeline = scraper.timeline(m.start, 25)

	m.admitted = w.admittedCount()
	if m.admitted > 0 {
		m.wall = m.lastAdmitted.Sub(m.start)
		m.rate = float64(m.admitted) / m.wall.Seconds()
	}
	if !admitted {
		m.errors = append(m.errors, fmt.Sprintf("only %d of %d workloads were admitted within %s", m.admitted, n, bound))
	} else if !drained {
		m.errors = append(m.errors, fmt.Sprintf("the run did not drain within 10m of the last admission: %d of %d pods ended, admitter %s",
			w.endedCount(), n, scraper.last()))
	}
	m.errors = append(m.errors, w.check()...)
	for _, e := range m.errors {
		b.Error(e)
	}
	// Below a thousand workloads the admitter's memory stays within noise
	// of its idle size, and the wait for its decision ring to age would
	// only lengthen `make scale-check`.
	if drained && n >= 1000 {
		m.emptied, m.emptiedRSS, m.emptiedHeap = r.empty(ctx, b, queues)
	}
	return m
}

// empty deletes the run's pods, as pod garbage collection would in time,
// waits until the garbage collector has taken their Workloads too and the
// admitter's decision ring has let the run's decisions age out, and reads
// the admitter's memory then: with the objects gone, its informers hold
// none of them, and what it still holds is its own per-workload state. It
// returns how long that took (0 when it did not happen).
func (r *scaleRun) empty(ctx context.Context, b *testing.B, queues []scaleQueue) (time.Duration, settled, float64) {
	start := time.Now()
	for _, q := range queues {
		if err := r.cs.CoreV1().Pods(q.name).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			b.Logf("deleting the pods of namespace %s: %v", q.name, err)
			return 0, settled{}, 0
		}
	}
	err := wait.PollUntilContextTimeout(ctx, time.Second, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		var left metav1.PartialObjectMetadataList
		left.SetGroupVersionKind(sluicev1alpha1.GroupVersion.WithKind("WorkloadList"))
		if err := r.cl.List(ctx, &left, client.Limit(1)); err != nil {
			return false, nil // the API server is busy: ask again
		}
		return len(left.Items) == 0, nil
	})
	if err != nil {
		b.Logf("the run's Workloads were not all deleted within 10m of their pods: %v", err)
		return 0, settled{}, 0
	}
	err = wait.PollUntilContextTimeout(ctx, time.Second, decisionRingAge+time.Minute, true, func(ctx context.Context) (bool, error) {
		held, err := r.admitterGauge(ctx, decisionRingMetric)
		return err == nil && held == 0, nil
	})
	if err != nil {
		b.Logf("the admitter's decision ring still held changes %s after the run's Workloads were gone: %v", decisionRingAge+time.Minute, err)
		return 0, settled{}, 0
	}
	took := time.Since(start)
	return took, settledRSS(ctx, r.s.Admitter, time.Minute), r.collectedHeap(ctx, b, "emptied")
}

// mean is the mean of ds, to the millisecond.
func mean(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return (sum / time.Duration(len(ds))).Round(time.Millisecond)
}

// classLatency is a class's time to admission: pod create to the
// Workload first seen Admitted.
type classLatency struct {
	preempted int
	latencySpread
}

func (m *scaleMeasurement) latency(class int) classLatency {
	w := m.watch
	w.mu.Lock()
	defer w.mu.Unlock()
	var l classLatency
	var ds []time.Duration
	for i, p := range w.pods {
		if p.class != class {
			continue
		}
		if w.preempted[i] {
			l.preempted++
		}
		if t := w.admitted[i]; !t.IsZero() {
			ds = append(ds, t.Sub(p.created))
		}
	}
	l.latencySpread = spread(ds)
	return l
}

// latencySpread is the spread of a set of durations, n of them.
type latencySpread struct {
	n              int
	p50, p99, mean time.Duration
}

func (l latencySpread) String() string {
	if l.n == 0 {
		return "none"
	}
	return fmt.Sprintf("p50 %s  p99 %s  mean %s", l.p50, l.p99, l.mean)
}

// spread sorts ds and returns its spread.
func spread(ds []time.Duration) latencySpread {
	slices.Sort(ds)
	l := latencySpread{n: len(ds)}
	if len(ds) > 0 {
		l.p50, l.p99, l.mean = pct(ds, 50), pct(ds, 99), mean(ds)
	}
	return l
}

// print writes what every scale run reports beyond its shape's figures.
func (m *scaleMeasurement) print(classes []scaleClass) {
	fmt.Printf("time to admission (the pod's create to its Workload first seen Admitted by the benchmark's informer):\n")
	for c, class := range classes {
		l := m.latency(c)
		kueue := ""
		if class.kueueMean > 0 {
			kueue = fmt.Sprintf(" (Kueue's mean %s)", class.kueueMean.Round(time.Millisecond))
		}
		fmt.Printf("  %-6s (%d cpu, priority %d, runs %s): %d admitted, %d of them preempted: p50 %s  p99 %s  mean %s%s\n",
			class.name, class.cpu, class.priority, class.runFor, l.n, l.preempted, l.p50, l.p99, l.mean, kueue)
	}
	readmitted, admissions := m.watch.readmitted()
	fmt.Printf("admitted again: %d workloads preempted before their pod was released, so queued again with it gated (%d admissions in all)\n",
		readmitted, admissions)
	fmt.Printf("the last pod ended after %s\n", m.drained.Round(10*time.Millisecond))
	fmt.Println(m.watch.holdBreakdown())
	fmt.Printf("the grouper over the run: %s\n", m.grouper)
	fmt.Printf("admitter scheduling cycles by backlog (Workloads neither admitted nor finished, as the benchmark's informer saw them at each " +
		"scrape of the admitter, every second; times from its histograms, by the second they ended, quantiles interpolated in their buckets; " +
		"cycle: deciding, cycle-written: a cycle that reserved or evicted until its writes were answered):\n")
	for _, c := range m.cycles {
		fmt.Printf("  %s\n", c)
	}
	fmt.Printf("the admitter over the run (since the first create; its pending and holding gauges are set once per round of queue status writes):\n")
	for _, line := range m.timeline {
		fmt.Printf("  %s\n", line)
	}
	fmt.Printf("API writes per workload: by sluice's services %.2f (%s); by every client %.2f: %s\n",
		m.writes.sluice()/float64(m.n), m.writes.servicesPerWorkload(m.n), m.writes.all/float64(m.n), perPod(atLeast(m.writes.byResource, 0.005*float64(m.n)), m.n))
	fmt.Printf("the admitter's Workload writes per workload, by operation: %s\n", perPod(m.writes.workloadOp, m.n))
	fmt.Printf("other requests per workload (reads and watches, by every client): %s\n", perPod(atLeast(m.writes.others, 0.005*float64(m.n)), m.n))
	fmt.Printf("CPU seconds from the first create until drained: %s\n", m.cpu)
	fmt.Printf("peak resident memory (VmHWM), MB: %s\n", m.memory)
	fmt.Printf("admitter resident memory: idle before the run %s (heap in use after a collection %.0f MB); drained after the run %s (heap in use after a collection %.0f MB)\n",
		m.idle, m.idleHeap/(1<<20), m.drainedRSS, m.drainedHeap/(1<<20))
	if m.emptied > 0 {
		fmt.Printf("admitter resident memory once the run's pods were deleted and their Workloads collected (%s): %s (heap in use after a collection %.0f MB)\n",
			m.emptied.Round(time.Second), m.emptiedRSS, m.emptiedHeap/(1<<20))
	}
	fmt.Printf("quota: the most cpu a ClusterQueue's status reported reserved %s, a cohort's %s; the most its running pods held, a ClusterQueue %s, a cohort %s\n",
		milli(m.watch.maxStatus(false)), milli(m.watch.maxStatus(true)), milli(m.watch.maxHeld(false)), milli(m.watch.maxHeld(true)))
	if len(m.errors) == 0 {
		fmt.Printf("correct: every workload admitted, and again only after a preemption before its pod was released; " +
			"every pod released once, under its workload's last admission; no ClusterQueue or cohort over its quota\n")
	} else {
		fmt.Printf("NOT CORRECT:\n  %s\n", strings.Join(m.errors, "\n  "))
	}
}

// report reports the run's metrics to the benchmark and prints them as one
// line, SCALE-RESULT followed by key=value fields, for scripts; head are
// the run's own fields.
func (m *scaleMeasurement) report(b *testing.B, classes []scaleClass, head []string) {
	readmitted, _ := m.watch.readmitted()
	fields := append([]string{fmt.Sprintf("workloads=%d admitted=%d readmitted=%d wall-s=%.2f adm/s=%.2f drained-s=%.2f usage-pct=%.1f",
		m.n, m.admitted, readmitted, m.wall.Seconds(), m.rate, m.drained.Seconds(), m.usage)}, head...)
	b.ReportMetric(m.wall.Seconds(), "wall-s")
	b.ReportMetric(m.rate, "adm/s")
	for c, class := range classes {
		l := m.latency(c)
		b.ReportMetric(float64(l.mean.Milliseconds()), class.name+"-mean-ms")
		b.ReportMetric(float64(l.p99.Milliseconds()), class.name+"-p99-ms")
		fields = append(fields, fmt.Sprintf("%[1]s-p50-ms=%[2]d %[1]s-p99-ms=%[3]d %[1]s-mean-ms=%[4]d %[1]s-preempted=%[5]d",
			class.name, l.p50.Milliseconds(), l.p99.Milliseconds(), l.mean.Milliseconds(), l.preempted))
	}
	fields = append(fields, m.watch.holdBreakdown().fields(), fmt.Sprintf("grouper-queued-ms=%d grouper-working-ms=%d grouper-admission-to-ungate-ms=%d",
		m.grouper.mean("queued").Milliseconds(), m.grouper.mean("working").Milliseconds(), m.grouper.mean("admission-to-ungate").Milliseconds()))
	for _, c := range m.cycles {
		fields = append(fields, c.fields())
	}
	b.ReportMetric(m.writes.sluice()/float64(m.n), "sluice-writes/workload")
	fields = append(fields, fmt.Sprintf("sluice-writes/workload=%.3f all-writes/workload=%.3f", m.writes.sluice()/float64(m.n), m.writes.all/float64(m.n)))
	for _, svc := range []string{"admitter", "grouper", "webhook", "checks"} {
		fields = append(fields, fmt.Sprintf("%s-writes/workload=%.3f %s-peak-MB=%.0f", svc, m.writes.services[svc]/float64(m.n), svc, mb(m.memory.peak[svc])))
		b.ReportMetric(mb(m.memory.peak[svc]), svc+"-peak-MB")
	}
	b.ReportMetric(mb(m.idle.rss), "admitter-idle-MB")
	b.ReportMetric(mb(m.drainedRSS.rss), "admitter-drained-MB")
	b.ReportMetric(mb(m.emptiedRSS.rss), "admitter-emptied-MB")
	fields = append(fields, fmt.Sprintf("admitter-idle-MB=%.0f admitter-drained-MB=%.0f admitter-emptied-MB=%.0f admitter-idle-heap-MB=%.0f admitter-drained-heap-MB=%.0f admitter-emptied-heap-MB=%.0f correct=%t",
		mb(m.idle.rss), mb(m.drainedRSS.rss), mb(m.emptiedRSS.rss), m.idleHeap/(1<<20), m.drainedHeap/(1<<20), m.emptiedHeap/(1<<20), len(m.errors) == 0))
	fmt.Printf("SCALE-RESULT %s\n", strings.Join(fields, " "))
}

// atLeast is counts without the entries under least: the API server's
// own housekeeping, say, beside a run's thousands of writes.
func atLeast(counts map[string]float64, least float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range counts {
		if v >= least {
			out[k] = v
		}
	}
	return out
}

// milli renders millicpu as cpu.
func milli(v int64) string { return strconv.FormatFloat(float64(v)/1000, 'f', -1, 64) }
