package e2e

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/test/e2e/e2eutil"
	"github.com/sluice-dev/sluice/test/harness"
)

// The tests in this file run the admitter with --fair-sharing, which the
// suite otherwise leaves off: each restarts it with the flag and restores
// the suite's flags when it ends. Their cohorts pool 40 cpu in a Cohort
// whose ClusterQueues have no quota of their own, so all a queue holds is
// borrowed and its weighted share is simply cpu/40 per 1000, divided by
// its weight. Pods are created by the operator, not the namespace's user
// as in cohort_test.go: hundreds of kubectl runs would outlast the
// measurement.

const (
	// fairPoolCPU is the cpu each test's Cohort pools.
	fairPoolCPU = 40
	// fairShareStepA and fairShareStepB are what one 1-cpu pod adds to
	// the weighted share of a queue of weight 1 and of weight 3.
	fairShareStepA = 1000.0 / fairPoolCPU
	fairShareStepB = 1000.0 / fairPoolCPU / 3
	// fairShareTolerance is how far apart two queues' weighted shares may
	// be at the fair point: each queue one pod off the even split, plus
	// the status's rounding up.
	fairShareTolerance = fairShareStepA + fairShareStepB + 1
	// weightedShareGaugeName is the admitter's per-ClusterQueue share.
	weightedShareGaugeName = "sluice_admitter_cluster_queue_weighted_share"
)

// withFairSharingAdmitter restarts the shared admitter with --fair-sharing
// for the rest of the test, and with the suite's flags alone when it ends.
func withFairSharingAdmitter(ctx context.Context, t *testing.T) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := restartAdmitter(ctx, harness.Once{}); err != nil {
			t.Errorf("restoring the admitter's usual flags: %v", err)
		}
	})
	if err := restartAdmitter(ctx, harness.Once{Args: []string{"--fair-sharing"}}); err != nil {
		t.Fatal(err)
	}
}

// restartAdmitter kills the admitter, as restart_test.go does (a graceful
// stop waits for its streams), and starts it with once's additions. The
// harness runs it with --leader-elect=false, so it leads as soon as it has
// started, and /readyz answers only while it leads: WaitReady is the wait
// for the new leader.
func restartAdmitter(ctx context.Context, once harness.Once) error {
	if err := sluice.Admitter.Kill(); err != nil {
		return err
	}
	if err := sluice.Admitter.StartOnce(once); err != nil {
		return err
	}
	return sluice.Admitter.WaitReady(ctx)
}

// fairCohort is a test's Cohort, pooling fairPoolCPU in a flavor of its
// own, and its ClusterQueues, each with a LocalQueue of the same name in a
// namespace of its own.
type fairCohort struct {
	name, flavor string
	queues       []string
	namespaces   []string
}

// newFairCohort makes the flavor and the Cohort. When the test ends, the
// namespaces are deleted and waited for, so that no pod of the test holds
// the shared nodes or loads the services during the next test, and then
// the cluster-scoped objects go. (Registered after
// withFairSharingAdmitter, this runs before the admitter is restored.)
func newFairCohort(ctx context.Context, t *testing.T, name string) *fairCohort {
	t.Helper()
	co := &fairCohort{name: name, flavor: createFlavor(ctx, t, name+"-flavor")}
	mustCreate(ctx, t, &sluicev1alpha1.Cohort{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       sluicev1alpha1.CohortSpec{ResourceGroups: cpuGroups(co.flavor, fmt.Sprint(fairPoolCPU), cpuLimits{})},
	})
	t.Cleanup(func() { co.delete(t) })
	return co
}

func (co *fairCohort) delete(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, ns := range co.namespaces {
		obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
		if err := k8s.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
			t.Errorf("deleting namespace %s: %v", ns, err)
		}
	}
	for _, ns := range co.namespaces {
		if err := e2eutil.WaitGone(ctx, k8s, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, 2*time.Minute); err != nil {
			t.Errorf("the test's pods may outlive it: %v", err)
		}
	}
	var objs []client.Object
	for _, cq := range co.queues {
		objs = append(objs, &sluicev1alpha1.ClusterQueue{ObjectMeta: metav1.ObjectMeta{Name: cq}})
	}
	objs = append(objs,
		&sluicev1alpha1.Cohort{ObjectMeta: metav1.ObjectMeta{Name: co.name}},
		&sluicev1alpha1.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: co.flavor}})
	for _, obj := range objs {
		if err := k8s.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
			t.Errorf("deleting %T %s: %v", obj, obj.GetName(), err)
		}
	}
}

// addQueue makes the ClusterQueue name-suffix in the Cohort, of no quota
// of its own, with weight, preemption and stopPolicy (nil for the
// defaults), and a namespace with its LocalQueue. It returns the queue's
// name and the namespace.
func (co *fairCohort) addQueue(ctx context.Context, t *testing.T, suffix, weight string, preemption *sluicev1alpha1.ClusterQueuePreemption, stop *sluicev1alpha1.StopPolicy) (cq, ns string) {
	t.Helper()
	cq = co.name + "-" + suffix
	ns = createNamespace(ctx, t, cq)
	co.namespaces = append(co.namespaces, ns)
	co.queues = append(co.queues, cq)
	createClusterQueue(ctx, t, ns, cq, sluicev1alpha1.ClusterQueueSpec{
		CohortName:     co.name,
		ResourceGroups: cpuGroups(co.flavor, "0", cpuLimits{}),
		FairSharing:    &sluicev1alpha1.FairSharing{Weight: ptr.To(resource.MustParse(weight))},
		Preemption:     preemption,
		StopPolicy:     stop,
	})
	return cq, ns
}

// waitShares waits until every queue's status carries a weighted share:
// the restarted admitter runs with fair sharing and knows the queues.
func (co *fairCohort) waitShares(ctx context.Context, t *testing.T) {
	t.Helper()
	for _, cq := range co.queues {
		waitClusterQueue(ctx, t, cq, "status.fairSharing (is the admitter running with --fair-sharing?)", func(q *sluicev1alpha1.ClusterQueue) bool {
			return q.Status.FairSharing != nil
		})
	}
}

// queueState is what a ClusterQueue's status says of it.
type queueState struct {
	cpu     int64 // reserved, whole cpu
	pending int32
	share   *int64 // status.fairSharing.weightedShare; nil when unset
}

func (s queueState) String() string {
	share := "unset"
	if s.share != nil {
		share = fmt.Sprint(*s.share)
	}
	return fmt.Sprintf("%d cpu, %d pending, share %s", s.cpu, s.pending, share)
}

func readQueue(ctx context.Context, name string) (queueState, error) {
	var cq sluicev1alpha1.ClusterQueue
	if err := k8s.Get(ctx, client.ObjectKey{Name: name}, &cq); err != nil {
		return queueState{}, err
	}
	q := cpuReserved(&cq)
	s := queueState{cpu: q.Value(), pending: cq.Status.PendingWorkloads}
	if fs := cq.Status.FairSharing; fs != nil {
		s.share = ptr.To(fs.WeightedShare)
	}
	return s, nil
}

// readQueues reads each queue's status, in order.
func readQueues(ctx context.Context, names ...string) ([]queueState, error) {
	out := make([]queueState, len(names))
	for i, n := range names {
		var err error
		if out[i], err = readQueue(ctx, n); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// errPremiseGone ends holdSamples at once: what the samples measure no
// longer means anything (a backlog ran out).
var errPremiseGone = errors.New("premise of the measurement gone")

// holdSamples reads sample every second, about the interval at which the
// admitter writes queue status, until n samples in a row hold or limit
// passes. A sample that cannot be read (err other than errPremiseGone)
// breaks the run. It returns when the run of samples began; on failure
// the error holds the last sample read.
func holdSamples(ctx context.Context, limit time.Duration, n int, sample func(context.Context) (ok bool, seen string, err error)) (time.Time, error) {
	var (
		run   int
		began time.Time
		last  = "none read"
	)
	err := wait.PollUntilContextTimeout(ctx, time.Second, limit, true, func(ctx context.Context) (bool, error) {
		ok, seen, err := sample(ctx)
		if seen != "" {
			last = seen
		}
		switch {
		case errors.Is(err, errPremiseGone):
			return false, err
		case err != nil || !ok:
			run = 0
			return false, nil
		}
		if run == 0 {
			began = time.Now()
		}
		run++
		return run >= n, nil
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("%w; last sample: %s", err, last)
	}
	return began, nil
}

// createPods creates pods, a few at a time, and reads each back.
func createPods(ctx context.Context, t *testing.T, pods []*corev1.Pod) {
	t.Helper()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, p := range pods {
		g.Go(func() error {
			if err := k8s.Create(gctx, p); err != nil {
				return fmt.Errorf("creating pod %s/%s: %w", p.Namespace, p.Name, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}

// fairPods are n pods of 1 cpu in ns for LocalQueue queue, named
// prefix-i. runFor gives pod i its run time; nil makes them run until
// deleted.
func fairPods(ns, queue, prefix string, n int, runFor func(i int) string) []*corev1.Pod {
	pods := make([]*corev1.Pod, n)
	for i := range pods {
		name := fmt.Sprintf("%s-%d", prefix, i)
		if runFor == nil {
			pods[i] = queuedPod(ns, name, queue, "1")
			continue
		}
		pods[i] = newPod(ns, name, "1", runFor(i))
		pods[i].Labels[podkeys.QueueNameLabel] = queue
	}
	return pods
}

// cohortPeak watches a Cohort and keeps the most cpu its status ever said
// its subtree held: one object written at once, unlike the queues'
// statuses, which are written apart and may disagree for a moment.
type cohortPeak struct {
	flavor   string
	mu       sync.Mutex
	peak     resource.Quantity
	versions int
	cancel   context.CancelFunc
	done     sync.WaitGroup
}

func watchCohortPeak(ctx context.Context, t *testing.T, co *fairCohort) *cohortPeak {
	t.Helper()
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: k8s.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	w, err := wc.Watch(ctx, &sluicev1alpha1.CohortList{}, client.MatchingFields{"metadata.name": co.name})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	p := &cohortPeak{flavor: co.flavor, cancel: cancel}
	p.done.Add(1)
	go func() {
		defer p.done.Done()
		defer w.Stop()
		for ev := range w.ResultChan() {
			c, ok := ev.Object.(*sluicev1alpha1.Cohort)
			if !ok {
				continue
			}
			p.mu.Lock()
			p.versions++
			if u := cpuUsage(c.Status.FlavorsReservation, p.flavor); u != nil && u.Total.Cmp(p.peak) > 0 {
				p.peak = u.Total.DeepCopy()
			}
			p.mu.Unlock()
		}
	}()
	t.Cleanup(p.stop)
	return p
}

func (p *cohortPeak) stop() {
	p.cancel()
	p.done.Wait()
}

// assertWithinPool fails the test if the Cohort's status ever said its
// queues held more than the pool.
func (p *cohortPeak) assertWithinPool(t *testing.T) {
	t.Helper()
	p.stop()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.versions == 0 {
		t.Errorf("the watch of the Cohort saw no version of it")
	}
	if p.peak.Cmp(*resource.NewQuantity(fairPoolCPU, resource.DecimalSI)) > 0 {
		t.Errorf("the Cohort's queues held %s cpu at one point, beyond its %d", p.peak.String(), fairPoolCPU)
	}
}

// weightedShareGauge reads the admitter's weighted-share gauge of the
// ClusterQueue cq; ok is false while it has no series.
func weightedShareGauge(ctx context.Context, cq string) (v float64, ok bool, err error) {
	return sluice.Admitter.Gauge(ctx, weightedShareGaugeName, map[string]string{"cluster_queue": cq})
}

// TestFairSharingConvergesToWeights: ClusterQueues A (weight 1) and B
// (weight 3) share a Cohort's 40 cpu and both want all of it. A fills the
// pool alone with short pods and keeps a backlog; then B's backlog comes
// in. As pods end, the freed cpu must go to the queue of lower weighted
// share, so the pool settles at 10:30 within a minute and stays there,
// with both queues' weighted shares (status and gauge) about equal.
func TestFairSharingConvergesToWeights(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	withFairSharingAdmitter(ctx, t)
	co := newFairCohort(ctx, t, "fs-conv")
	// Held while their backlogs are created, so that each backlog comes in
	// at one moment, when the queue is let go.
	a, nsA := co.addQueue(ctx, t, "a", "1", nil, ptr.To(sluicev1alpha1.Hold))
	b, nsB := co.addQueue(ctx, t, "b", "3", nil, ptr.To(sluicev1alpha1.Hold))
	co.waitShares(ctx, t)
	peak := watchCohortPeak(ctx, t, co)

	// Run times spread over 4-6 s, so that pods end one by one rather
	// than in waves of 40, and the pool is rarely caught half refilled.
	// At the fair split A runs 10 pods per ~5 s and B 30: the backlogs
	// last some 40 s at that pace, and the split is expected within one
	// run time and measured over 5 s. Pending pods take no node slot; at
	// most 40 run, of the two nodes' 220.
	const podsA, podsB = 120, 240
	runFor := func(i int) string { return fmt.Sprintf("%dms", 4000+(i%5)*500) }
	createPods(ctx, t, fairPods(nsA, a, "a", podsA, runFor))
	createPods(ctx, t, fairPods(nsB, b, "b", podsB, runFor))
	for cq, n := range map[string]int32{a: podsA, b: podsB} {
		waitClusterQueue(ctx, t, cq, fmt.Sprintf("%d workloads pending while held", n), func(q *sluicev1alpha1.ClusterQueue) bool {
			return q.Status.PendingWorkloads == n
		})
	}

	setClusterQueueStopPolicy(ctx, t, a, sluicev1alpha1.None)
	waitClusterQueue(ctx, t, a, "the whole pool, with a backlog", func(q *sluicev1alpha1.ClusterQueue) bool {
		return cpuIs(q.Status.FlavorsReservation, co.flavor, fmt.Sprint(fairPoolCPU), "", "") && q.Status.PendingWorkloads > 0
	})
	if s, err := readQueue(ctx, b); err != nil || s.cpu != 0 {
		t.Fatalf("held ClusterQueue B holds quota (%v, %v)", s, err)
	}
	setClusterQueueStopPolicy(ctx, t, b, sluicev1alpha1.None)
	arrived := time.Now()

	// The criterion is A's fraction of the cpu held in [22.5%, 27.5%]:
	// ±10% of the 25% the weights give, i.e. 9 to 11 of 40 cpu. A's
	// fraction rather than the A:B ratio because it stays defined and
	// bounded while B holds little, and a band of ±10% on it is about as
	// wide as one on the ratio (A:B in [0.29, 0.38]). Each sample must
	// also find the pool nearly full (a split of a mostly idle pool says
	// nothing of fairness), both shares within one pod per queue of each
	// other (equal weighted shares are the fair point), and both backlogs
	// still waiting (else a queue no longer wants everything).
	var last []queueState
	began, err := holdSamples(ctx, time.Minute, 5, func(ctx context.Context) (bool, string, error) {
		s, err := readQueues(ctx, a, b)
		if err != nil {
			return false, "", err
		}
		last = s
		seen := fmt.Sprintf("A %v; B %v", s[0], s[1])
		if s[0].pending == 0 || s[1].pending == 0 {
			return false, seen, fmt.Errorf("%w: a backlog ran out; give the queues more pods", errPremiseGone)
		}
		total := s[0].cpu + s[1].cpu
		if total < fairPoolCPU*9/10 || total > fairPoolCPU {
			return false, seen, nil
		}
		if frac := float64(s[0].cpu) / float64(total); frac < 0.225 || frac > 0.275 {
			return false, seen, nil
		}
		if s[0].share == nil || s[1].share == nil || math.Abs(float64(*s[0].share-*s[1].share)) > fairShareTolerance {
			return false, seen, nil
		}
		return true, seen, nil
	})
	if err != nil {
		t.Fatalf("within a minute of B's backlog coming in, the pool never held about 1:3 for 5 samples in a row: %v", err)
	}
	t.Logf("the pool reached the 1:3 split %s after B's backlog came in and held it (last: A %v; B %v)",
		began.Sub(arrived).Round(100*time.Millisecond), last[0], last[1])

	// The gauges show the shares unrounded; read apart from the statuses,
	// so waited for rather than compared with them.
	var gauges [2]float64
	err = wait.PollUntilContextTimeout(ctx, time.Second, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		for i, cq := range []string{a, b} {
			v, ok, err := weightedShareGauge(ctx, cq)
			if err != nil || !ok {
				return false, nil
			}
			gauges[i] = v
		}
		for _, v := range gauges {
			if math.IsInf(v, 0) || math.IsNaN(v) || v <= 0 {
				return false, nil
			}
		}
		return math.Abs(gauges[0]-gauges[1]) <= fairShareTolerance, nil
	})
	if err != nil {
		t.Errorf("the admitter's %s never showed two positive shares within %.1f of each other for %s and %s: last %v",
			weightedShareGaugeName, fairShareTolerance, a, b, gauges)
	} else {
		t.Logf("gauges: A %.1f, B %.1f", gauges[0], gauges[1])
	}
	peak.assertWithinPool(t)
}

// TestFairSharingNewcomerPreempts: in a Cohort of 40 cpu, A (weight 1)
// runs 10 long pods and B (weight 3) 30, both weighted shares 250 per
// 1000, each with a backlog; all three queues reclaim within the cohort
// from Any priority. Then C (weight 1) comes with a backlog of pods of the
// same priority. By share, C preempts until the shares are as even as
// single pods allow: A 8, B 24, C 8 cpu, each 200 (a ninth pod for C
// would put it at 225, above what either victim's queue would keep: A 175,
// B 191.7). Each victim is evicted (Preempted, InCohortFairSharing) and its
// pod deleted; the pool is never exceeded.
func TestFairSharingNewcomerPreempts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	withFairSharingAdmitter(ctx, t)
	co := newFairCohort(ctx, t, "fs-pre")
	reclaim := &sluicev1alpha1.ClusterQueuePreemption{ReclaimWithinCohort: sluicev1alpha1.PreemptionAny}
	a, nsA := co.addQueue(ctx, t, "a", "1", reclaim, nil)
	b, nsB := co.addQueue(ctx, t, "b", "3", reclaim, nil)
	c, nsC := co.addQueue(ctx, t, "c", "1", reclaim, nil)
	co.waitShares(ctx, t)
	// The victims' Workloads go with their pods: their eviction is read
	// from the recorded history.
	recA, recB := recordEvents(ctx, t, nsA, a), recordEvents(ctx, t, nsB, b)
	defer recA.stop()
	defer recB.stop()
	peak := watchCohortPeak(ctx, t, co)

	// 10:30 by construction: B's 30 alone first, which leaves 10 free;
	// then A's 10 and a backlog, which finds just those 10; then B's
	// backlog, which finds nothing. At 10:30 the shares are even (250
	// each), so neither backlog may preempt the other.
	const backlog = 5
	createPods(ctx, t, fairPods(nsB, b, "b", 30, nil))
	waitClusterQueue(ctx, t, b, "30 cpu", func(q *sluicev1alpha1.ClusterQueue) bool {
		return cpuIs(q.Status.FlavorsReservation, co.flavor, "30", "", "")
	})
	createPods(ctx, t, fairPods(nsA, a, "a", 10+backlog, nil))
	waitClusterQueue(ctx, t, a, "10 cpu and a backlog", func(q *sluicev1alpha1.ClusterQueue) bool {
		return cpuIs(q.Status.FlavorsReservation, co.flavor, "10", "", "") && q.Status.PendingWorkloads == backlog
	})
	createPods(ctx, t, fairPods(nsB, b, "b-backlog", backlog, nil))
	waitClusterQueue(ctx, t, b, "30 cpu and a backlog", func(q *sluicev1alpha1.ClusterQueue) bool {
		return cpuIs(q.Status.FlavorsReservation, co.flavor, "30", "", "") && q.Status.PendingWorkloads == backlog
	})
	start, err := readQueues(ctx, a, b)
	if err != nil {
		t.Fatal(err)
	}
	if start[0].cpu != 10 || start[1].cpu != 30 || start[0].share == nil || start[1].share == nil || *start[0].share != 250 || *start[1].share != 250 {
		t.Fatalf("before C: A %v, B %v; want 10 and 30 cpu, shares 250 and 250", start[0], start[1])
	}

	const podsC = 15
	createPods(ctx, t, fairPods(nsC, c, "c", podsC, nil))
	arrived := time.Now()
	// Until the admitter counts all of C's pods, a status without pending
	// workloads would read as a backlog run out.
	waitClusterQueue(ctx, t, c, fmt.Sprintf("all %d workloads, pending or holding quota", podsC), func(q *sluicev1alpha1.ClusterQueue) bool {
		return q.Status.PendingWorkloads+q.Status.ReservingWorkloads == podsC
	})
	within := func(v, want int64) bool { return v >= want-1 && v <= want+1 }
	var last []queueState
	began, err := holdSamples(ctx, time.Minute, 5, func(ctx context.Context) (bool, string, error) {
		s, err := readQueues(ctx, a, b, c)
		if err != nil {
			return false, "", err
		}
		last = s
		seen := fmt.Sprintf("A %v; B %v; C %v", s[0], s[1], s[2])
		if s[2].pending == 0 {
			return false, seen, fmt.Errorf("%w: C's backlog ran out", errPremiseGone)
		}
		return within(s[0].cpu, 8) && within(s[1].cpu, 24) && within(s[2].cpu, 8) && s[0].cpu+s[1].cpu+s[2].cpu <= fairPoolCPU, seen, nil
	})
	if err != nil {
		t.Fatalf("within a minute of C's pods coming in, A:B:C never settled at 8:24:8 (±1) for 5 samples in a row: %v\n%s",
			err, pendingSays(ctx, nsC))
	}
	t.Logf("A:B:C reached 8:24:8 %s after C's pods came in and held it (last: A %v; B %v; C %v)",
		began.Sub(arrived).Round(100*time.Millisecond), last[0], last[1], last[2])

	// Every workload evicted in A and B was preempted for fair sharing,
	// and no more were than C took the place of: nothing was free.
	var victims []*corev1.Pod
	for i, rec := range []*recorder{recA, recB} {
		evicted := evictedIn(rec)
		t.Logf("%d workloads of %s were evicted", len(evicted), []string{a, b}[i])
		for name, wl := range evicted {
			cond := meta.FindStatusCondition(wl.Status.Conditions, sluicev1alpha1.WorkloadEvicted)
			if cond.Reason != sluicev1alpha1.ReasonPreempted || !strings.Contains(cond.Message, "InCohortFairSharing") {
				t.Errorf("workload %s/%s evicted with reason %s and message %q; want reason %s and a message naming InCohortFairSharing",
					wl.Namespace, name, cond.Reason, cond.Message, sluicev1alpha1.ReasonPreempted)
			}
			for _, o := range wl.OwnerReferences {
				if o.Kind == "Pod" {
					victims = append(victims, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: wl.Namespace, Name: o.Name}})
				}
			}
		}
	}
	if final := last[2].cpu; int64(len(victims)) != final {
		t.Errorf("%d pods of A and B were preempted, but C holds %d cpu: each 1-cpu pod of C needed one victim", len(victims), final)
	}
	waitAllGone(ctx, t, "preempted", victims...)
	peak.assertWithinPool(t)
}

// evictedIn returns, by name, the first recorded version of each Workload
// that turned Evicted=True.
func evictedIn(rec *recorder) map[string]*sluicev1alpha1.Workload {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	out := map[string]*sluicev1alpha1.Workload{}
	for _, w := range rec.workloads {
		if _, seen := out[w.Name]; !seen && meta.IsStatusConditionTrue(w.Status.Conditions, sluicev1alpha1.WorkloadEvicted) {
			out[w.Name] = w
		}
	}
	return out
}

// pendingSays is what the first pending Workload of ns is told, for a
// failure message.
func pendingSays(ctx context.Context, ns string) string {
	var list sluicev1alpha1.WorkloadList
	if err := k8s.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return err.Error()
	}
	for i := range list.Items {
		if waitsForQuota(&list.Items[i]) {
			return fmt.Sprintf("pending %s/%s says: %s", ns, list.Items[i].Name, quotaReservedMessage(&list.Items[i]))
		}
	}
	return "no workload of " + ns + " waits for quota"
}
