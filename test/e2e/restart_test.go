package e2e

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/test/fakecheck"
	"github.com/sluice-dev/sluice/test/testenv"
)

// TestAdmitterRestartDuringChecks kills the admitter while a workload holds
// quota and waits for a check, restarts it, and lets the check answer. The
// workload must be admitted exactly once, the pod ungated by exactly one
// patch, and the ClusterQueue must never count it twice.
func TestAdmitterRestartDuringChecks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	prov := fakecheck.StartT(t)
	ns := createNamespace(ctx, t, "restart")
	check := &sluicev1alpha1.AdmissionCheck{
		ObjectMeta: metav1.ObjectMeta{Name: "restart-hold"},
		Spec:       sluicev1alpha1.AdmissionCheckSpec{Endpoint: prov.Target()},
	}
	mustCreate(ctx, t, check)
	createQueues(ctx, t, ns, "restart", "2", check.Name)

	rec := recordEvents(ctx, t, ns, "restart")
	before, err := env.RequestCounts(ctx)
	if err != nil {
		t.Fatal(err)
	}

	// The held pod runs long enough for a second pod to need the other
	// half of the quota while it runs.
	pod := newPod(ns, "held", "1", "15s")
	mustCreate(ctx, t, pod)
	wl := waitWorkloadOf(ctx, t, pod, "QuotaReserved", func(w *sluicev1alpha1.Workload) bool {
		return meta.IsStatusConditionTrue(w.Status.Conditions, sluicev1alpha1.WorkloadQuotaReserved)
	})
	if err := prov.WaitEvaluated(ctx, ns, wl.Name, 1); err != nil {
		t.Fatalf("the check was never asked: %v", err)
	}

	// Crash the admitter while the check holds the workload at Pending.
	if err := sluice.Admitter.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := sluice.Admitter.Start(); err != nil {
		t.Fatal(err)
	}
	if err := sluice.Admitter.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	// The new admitter picks the reservation up and asks the check again.
	evaluated := prov.EvaluateCount(ns, wl.Name)
	if err := prov.WaitEvaluated(ctx, ns, wl.Name, evaluated+1); err != nil {
		t.Fatalf("the restarted admitter never asked the check: %v", err)
	}
	if got := podGated(ctx, t, pod); !got {
		t.Fatalf("pod was ungated while its check was still Pending")
	}
	prov.SetAnswer(ns, wl.Name, &checksv1.EvaluateResponse{State: checksv1.State_STATE_READY, Reason: "Done", Message: "released by test"})

	waitPod(ctx, t, pod, "running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })

	// Had the restarted admitter counted the held workload twice, the queue
	// (2 cpu) would have no room for a second 1-cpu pod now.
	second := newPod(ns, "second", "1", "1s")
	mustCreate(ctx, t, second)
	wl2 := waitWorkloadOf(ctx, t, second, "QuotaReserved while the held pod runs", func(w *sluicev1alpha1.Workload) bool {
		return meta.IsStatusConditionTrue(w.Status.Conditions, sluicev1alpha1.WorkloadQuotaReserved)
	})
	if p := waitPod(ctx, t, pod, "still running", func(*corev1.Pod) bool { return true }); p.Status.Phase != corev1.PodRunning {
		t.Fatalf("held pod is %s, want Running while the second pod reserves quota", p.Status.Phase)
	}
	prov.SetAnswer(ns, wl2.Name, &checksv1.EvaluateResponse{State: checksv1.State_STATE_READY, Reason: "Done"})

	waitPod(ctx, t, pod, "Succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
	waitWorkloadOf(ctx, t, pod, "Finished", func(w *sluicev1alpha1.Workload) bool {
		return meta.IsStatusConditionTrue(w.Status.Conditions, sluicev1alpha1.WorkloadFinished)
	})
	for _, p := range []*corev1.Pod{pod, second} {
		waitPod(ctx, t, p, "finished with its finalizer removed", func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodSucceeded && !slices.Contains(p.Finalizers, podkeys.ManagedFinalizer)
		})
	}
	after, err := env.RequestCounts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rec.stop()

	if n := rec.transitions(wl.Name, sluicev1alpha1.WorkloadAdmitted); n != 1 {
		t.Errorf("workload went to Admitted=True %d times, want exactly 1", n)
	}
	if n := rec.transitions(wl.Name, sluicev1alpha1.WorkloadQuotaReserved); n != 1 {
		t.Errorf("workload went to QuotaReserved=True %d times, want exactly 1", n)
	}
	if q := rec.maxCPUReserved(); q.Cmp(resource.MustParse("2")) > 0 {
		t.Errorf("ClusterQueue reserved up to %s cpu, want at most the two pods' 2 cpu", q.String())
	}
	keys := map[string]bool{}
	for _, c := range prov.Calls() {
		if c.GetWorkload().GetName() == wl.Name {
			keys[c.GetEvaluationKey()] = true
		}
	}
	if len(keys) != 1 {
		t.Errorf("check saw evaluation keys %v, want one: the reservation survived the restart", keys)
	}
	// Each pod is patched by the grouper twice in all: once to ungate, once
	// to drop the finalizer. kwok writes status through pods/status.
	if n := podPatches(after, before); n != 4 {
		t.Errorf("the two pods were patched %v times, want 4 (one ungate and one finalizer removal each)", n)
	}
}

func podGated(ctx context.Context, t *testing.T, pod *corev1.Pod) bool {
	t.Helper()
	var cur corev1.Pod
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(pod), &cur); err != nil {
		t.Fatal(err)
	}
	return hasGate(&cur)
}

func podPatches(after, before []testenv.RequestCount) float64 {
	var n float64
	for _, rc := range testenv.SubtractCounts(after, before) {
		if rc.Resource == "pods" && rc.Subresource == "" && (rc.Verb == "PATCH" || rc.Verb == "PUT" || rc.Verb == "APPLY") {
			n += rc.Count
		}
	}
	return n
}

// recorder keeps every watch event of the Workloads in one namespace and of
// one ClusterQueue, to judge the history rather than the end state.
type recorder struct {
	mu        sync.Mutex
	workloads []*sluicev1alpha1.Workload
	queues    []*sluicev1alpha1.ClusterQueue
	cancel    context.CancelFunc
	done      sync.WaitGroup
}

func recordEvents(ctx context.Context, t *testing.T, ns, clusterQueue string) *recorder {
	t.Helper()
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: k8s.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	r := &recorder{cancel: cancel}
	wlw, err := wc.Watch(ctx, &sluicev1alpha1.WorkloadList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	cqw, err := wc.Watch(ctx, &sluicev1alpha1.ClusterQueueList{}, client.MatchingFields{"metadata.name": clusterQueue})
	if err != nil {
		t.Fatal(err)
	}
	r.done.Add(2)
	go r.drain(wlw, func(o any) {
		if w, ok := o.(*sluicev1alpha1.Workload); ok {
			r.workloads = append(r.workloads, w)
		}
	})
	go r.drain(cqw, func(o any) {
		if q, ok := o.(*sluicev1alpha1.ClusterQueue); ok {
			r.queues = append(r.queues, q)
		}
	})
	return r
}

func (r *recorder) drain(w watch.Interface, keep func(any)) {
	defer r.done.Done()
	defer w.Stop()
	for ev := range w.ResultChan() {
		r.mu.Lock()
		keep(ev.Object)
		r.mu.Unlock()
	}
}

func (r *recorder) stop() {
	r.cancel()
	r.done.Wait()
}

// transitions counts how often the named workload's condition became True.
func (r *recorder) transitions(name, condType string) int {
	return r.became(name, condType, func(c *metav1.Condition) bool { return c != nil && c.Status == metav1.ConditionTrue })
}

// became counts how often the named workload's condition of condType came
// to satisfy is (c is nil while the condition is not there), from
// versions where it did not.
func (r *recorder) became(name, condType string, is func(c *metav1.Condition) bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n, was := 0, false
	for _, w := range r.workloads {
		if w.Name != name {
			continue
		}
		now := is(meta.FindStatusCondition(w.Status.Conditions, condType))
		if now && !was {
			n++
		}
		was = now
	}
	return n
}

func (r *recorder) maxCPUReserved() resource.Quantity {
	r.mu.Lock()
	defer r.mu.Unlock()
	var highest resource.Quantity
	for _, q := range r.queues {
		if c := cpuReserved(q); c.Cmp(highest) > 0 {
			highest = c
		}
	}
	return highest
}
