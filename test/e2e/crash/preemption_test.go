package crash

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
)

// createPriorityClass makes the WorkloadPriorityClass name worth value,
// removed when the case ends, and returns its name.
func createPriorityClass(ctx context.Context, t *testing.T, name string, value int32) string {
	t.Helper()
	class := &sluicev1alpha1.WorkloadPriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
	mustCreate(ctx, t, class)
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), class) })
	return name
}

// preemptLowerPriority lets ClusterQueue cq's pending workloads preempt
// its workloads of lower priority.
func preemptLowerPriority(ctx context.Context, t *testing.T, cq string) {
	t.Helper()
	patch := client.RawPatch(client.Merge.Type(), []byte(`{"spec":{"preemption":{"withinClusterQueue":"LowerPriority"}}}`))
	if err := k8s.Patch(ctx, &sluicev1alpha1.ClusterQueue{ObjectMeta: metav1.ObjectMeta{Name: cq}}, patch); err != nil {
		t.Fatalf("setting ClusterQueue %s's preemption: %v", cq, err)
	}
}

// TestCrashPreemption crashes the admitter right after the first eviction
// write of a preemption that needs two victims, so that one victim is
// evicted and the other is not. The next leader evicts what is left, not
// again what is evicted already: each victim is evicted once and its pod
// deleted once, the preemptor starts once, after both stopped, and the
// queue never holds more than its quota.
func TestCrashPreemption(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	defer cancel()

	// Scenario: a 2-cpu queue that preempts lower priorities runs two
	// 1-cpu low-priority pods until they are deleted; a 2-cpu urgent pod,
	// which runs for 2s, needs both gone.
	ns := createNamespace(ctx, t, "preemption")
	createQueues(ctx, t, ns, userQueue, ns, "2")
	preemptLowerPriority(ctx, t, ns)
	low := createPriorityClass(ctx, t, ns+"-low", 10)
	urgent := createPriorityClass(ctx, t, ns+"-urgent", 1000)
	hist := record(ctx, t, ns, ns)
	before := requestCounts(ctx, t)
	var victims []*corev1.Pod
	for _, name := range []string{"low-0", "low-1"} {
		p := newPod(ns, name, userQueue, "1", "")
		p.Labels[podkeys.PriorityClassLabel] = low
		mustCreate(ctx, t, p)
		victims = append(victims, p)
	}
	var victimWls []*sluicev1alpha1.Workload
	for _, p := range victims {
		waitPod(ctx, t, p, "Running", phaseIs(corev1.PodRunning))
		victimWls = append(victimWls, workloadOf(ctx, t, p, "Admitted", condIs(sluicev1alpha1.WorkloadAdmitted, metav1.ConditionTrue, "")))
	}

	// Crash point: armed before the urgent pod exists, so the first
	// eviction it causes is the first the admitter writes. One write at a
	// time, so that the kill lands between the two evictions: with the
	// usual concurrent writes the second may already be written.
	c := arm(ctx, t, "admitter/evict", "--write-concurrency", "1")
	preemptor := newPod(ns, "urgent", userQueue, "2", "2s")
	preemptor.Labels[podkeys.PriorityClassLabel] = urgent
	mustCreate(ctx, t, preemptor)
	if err := c.svc.WaitExited(ctx); err != nil {
		t.Fatalf("crash point admitter/evict was never reached: %v", err)
	}
	if n := countEvicted(ctx, t, victimWls); n != 1 {
		t.Fatalf("the crash left %d of the %d victims evicted, want 1: the case needs the kill between the two evictions", n, len(victimWls))
	}
	c.waitHit(ctx, t)

	// End state: both victims gone, the urgent pod ran in their place.
	for _, p := range victims {
		waitGone(ctx, t, p)
	}
	waitPod(ctx, t, preemptor, "Succeeded without sluice's finalizer", endedClean(corev1.PodSucceeded))
	preemptorWl := workloadOf(ctx, t, preemptor, "Finished", condIs(sluicev1alpha1.WorkloadFinished, metav1.ConditionTrue, sluicev1alpha1.ReasonSucceeded))
	settle(ctx, t, ns)
	writes := podWritesBetween(requestCounts(ctx, t), before)
	hist.stop()
	hist.check(t)

	// Each victim was evicted once, for the urgent pod, while it held its
	// quota, which it gave up only once its pod had stopped.
	var lastStop uint64
	for i, p := range victims {
		name := victimWls[i].Name
		if n := hist.transitions(name, sluicev1alpha1.WorkloadEvicted); n != 1 {
			t.Errorf("%s's workload turned Evicted=True %d times, want once", p.Name, n)
		}
		events := hist.workloadEvents(name)
		evicted, ok := first(events, func(e event[*sluicev1alpha1.Workload]) bool {
			return e.typ != watch.Deleted && isTrue(e.obj, sluicev1alpha1.WorkloadEvicted)
		})
		if !ok {
			t.Errorf("%s's workload was never evicted", p.Name)
			continue
		}
		if r := condReason(evicted.obj, sluicev1alpha1.WorkloadEvicted); r != sluicev1alpha1.ReasonPreempted {
			t.Errorf("%s's workload was evicted with reason %q, want %s", p.Name, r, sluicev1alpha1.ReasonPreempted)
		}
		if msg := condMessage(evicted.obj, sluicev1alpha1.WorkloadEvicted); !strings.Contains(msg, "preempted by "+ns+"/"+preemptorWl.Name+" ") {
			t.Errorf("%s's workload was evicted saying %q, want it to name the urgent pod's workload %s", p.Name, msg, preemptorWl.Name)
		}
		if !holdsQuota(evicted.obj) {
			t.Errorf("%s's workload lost its quota in the eviction itself, before its pod stopped", p.Name)
		}
		stopped, ok := first(hist.podEvents(p.Name), func(e event[*corev1.Pod]) bool {
			return e.typ == watch.Deleted || e.obj.Status.Phase == corev1.PodFailed
		})
		if !ok {
			t.Errorf("%s never stopped", p.Name)
			continue
		}
		lastStop = max(lastStop, stopped.rev)
		released, ok := first(events, func(e event[*sluicev1alpha1.Workload]) bool {
			return e.rev > evicted.rev && (e.typ == watch.Deleted || !holdsQuota(e.obj))
		})
		if !ok {
			t.Errorf("%s's workload never gave its quota up", p.Name)
		} else if released.rev < stopped.rev {
			t.Errorf("%s's workload gave its quota up at revision %d, before its pod stopped at revision %d", p.Name, released.rev, stopped.rev)
		}
	}

	// The urgent pod started once, after both victims had stopped, and
	// the queue never held more than its 2 cpu.
	if n := hist.transitions(preemptorWl.Name, sluicev1alpha1.WorkloadQuotaReserved); n != 1 {
		t.Errorf("the urgent pod's workload turned QuotaReserved=True %d times, want once", n)
	}
	ungated, ok := first(hist.podEvents(preemptor.Name), func(e event[*corev1.Pod]) bool {
		return e.typ != watch.Deleted && !gated(e.obj)
	})
	if !ok {
		t.Errorf("the urgent pod's ungating is not in the history")
	} else if ungated.rev < lastStop {
		t.Errorf("the urgent pod was ungated at revision %d, before the last victim stopped at revision %d", ungated.rev, lastStop)
	}
	if q := hist.maxCPUReserved(); q.Cmp(resource.MustParse("2")) > 0 {
		t.Errorf("ClusterQueue reported %s cpu reserved, want at most its 2 cpu quota", q.String())
	}

	// Every pod write once: an ungate and a finalizer removal for each of
	// the three pods; a DisruptionTarget and a delete for each victim.
	checkPodWritesOnce(t, hist, writes, []*corev1.Pod{victims[0], victims[1], preemptor}, 2, "the victims")
}

// countEvicted counts the Workloads of wls that are Evicted now.
func countEvicted(ctx context.Context, t *testing.T, wls []*sluicev1alpha1.Workload) int {
	t.Helper()
	n := 0
	for _, wl := range wls {
		var cur sluicev1alpha1.Workload
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(wl), &cur); err != nil {
			t.Fatalf("reading workload %s: %v", wl.Name, err)
		}
		if isTrue(&cur, sluicev1alpha1.WorkloadEvicted) {
			n++
		}
	}
	return n
}

func condMessage(w *sluicev1alpha1.Workload, condType string) string {
	if c := meta.FindStatusCondition(w.Status.Conditions, condType); c != nil {
		return c.Message
	}
	return ""
}
