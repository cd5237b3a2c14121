package crash

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

// event is one watch event. rev is the object's resourceVersion as a
// number: the control plane has a single etcd, whose revision orders every
// write of every resource, so revisions compare across watches (pod
// events against Workload events).
type event[T client.Object] struct {
	typ watch.EventType
	rev uint64
	obj T
}

// history keeps every watch event of the pods and Workloads of one
// namespace and of one ClusterQueue, to judge how the end state was
// reached, not only the end state.
type history struct {
	mu        sync.Mutex
	pods      []event[*corev1.Pod]
	workloads []event[*sluicev1alpha1.Workload]
	queues    []event[*sluicev1alpha1.ClusterQueue]
	errs      []error

	cancel  context.CancelFunc
	done    sync.WaitGroup
	stopped bool
}

// record starts watching; call it before the objects it should see are
// created. The watches end with the test.
func record(ctx context.Context, t *testing.T, ns, clusterQueue string) *history {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	h := &history{cancel: cancel}
	t.Cleanup(func() { h.stop() })
	pw, err := k8s.Watch(ctx, &corev1.PodList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatalf("watching pods: %v", err)
	}
	ww, err := k8s.Watch(ctx, &sluicev1alpha1.WorkloadList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatalf("watching workloads: %v", err)
	}
	qw, err := k8s.Watch(ctx, &sluicev1alpha1.ClusterQueueList{}, client.MatchingFields{"metadata.name": clusterQueue})
	if err != nil {
		t.Fatalf("watching ClusterQueue %s: %v", clusterQueue, err)
	}
	h.done.Add(3)
	go drain(h, pw, &h.pods)
	go drain(h, ww, &h.workloads)
	go drain(h, qw, &h.queues)
	return h
}

func drain[T client.Object](h *history, w watch.Interface, into *[]event[T]) {
	defer h.done.Done()
	defer w.Stop()
	for ev := range w.ResultChan() {
		h.mu.Lock()
		if h.stopped {
			// What follows stop is the watch's own end (an ERROR event
			// for the cancelled context), not history.
			h.mu.Unlock()
			continue
		}
		obj, ok := ev.Object.(T)
		if !ok {
			h.errs = append(h.errs, fmt.Errorf("watch event %s carries %T: %v", ev.Type, ev.Object, ev.Object))
			h.mu.Unlock()
			continue
		}
		rev, err := strconv.ParseUint(obj.GetResourceVersion(), 10, 64)
		if err != nil {
			h.errs = append(h.errs, fmt.Errorf("resourceVersion of %s: %w", obj.GetName(), err))
		}
		*into = append(*into, event[T]{typ: ev.Type, rev: rev, obj: obj})
		h.mu.Unlock()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.stopped {
		// A watch the API server closed early has a gap: the history
		// would be judged on missing events.
		h.errs = append(h.errs, fmt.Errorf("a watch ended before the case did"))
	}
}

// stop ends the watches; the history is complete up to this point.
func (h *history) stop() {
	h.mu.Lock()
	h.stopped = true
	h.mu.Unlock()
	h.cancel()
	h.done.Wait()
}

// check fails the test if the history has gaps.
func (h *history) check(t *testing.T) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, err := range h.errs {
		t.Errorf("history incomplete: %v", err)
	}
}

// podEvents returns the events of the pod called name, oldest first.
func (h *history) podEvents(name string) []event[*corev1.Pod] {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []event[*corev1.Pod]
	for _, e := range h.pods {
		if e.obj.Name == name {
			out = append(out, e)
		}
	}
	return out
}

// workloadEvents returns the events of the Workload called name.
func (h *history) workloadEvents(name string) []event[*sluicev1alpha1.Workload] {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []event[*sluicev1alpha1.Workload]
	for _, e := range h.workloads {
		if e.obj.Name == name {
			out = append(out, e)
		}
	}
	return out
}

// first returns the first event that satisfies ok.
func first[T client.Object](events []event[T], ok func(event[T]) bool) (event[T], bool) {
	for _, e := range events {
		if ok(e) {
			return e, true
		}
	}
	return event[T]{}, false
}

// transitions counts how often Workload name's condition became True.
func (h *history) transitions(name, condType string) int {
	n, was := 0, false
	for _, e := range h.workloadEvents(name) {
		now := e.typ != watch.Deleted && meta.IsStatusConditionTrue(e.obj.Status.Conditions, condType)
		if now && !was {
			n++
		}
		was = now
	}
	return n
}

// added counts the ADDED events of Workload name: more than one means it
// was created again.
func (h *history) added(name string) int {
	n := 0
	for _, e := range h.workloadEvents(name) {
		if e.typ == watch.Added {
			n++
		}
	}
	return n
}

// ungates counts how often pod name went from gated to ungated.
func (h *history) ungates(name string) int {
	n, was := 0, false
	for i, e := range h.podEvents(name) {
		if e.typ == watch.Deleted {
			continue
		}
		g := gated(e.obj)
		if i > 0 && was && !g {
			n++
		}
		was = g
	}
	return n
}

// maxCPUReserved is the most cpu the ClusterQueue ever reported reserved.
func (h *history) maxCPUReserved() resource.Quantity {
	h.mu.Lock()
	defer h.mu.Unlock()
	var highest resource.Quantity
	for _, e := range h.queues {
		if c := cpuReserved(e.obj); c.Cmp(highest) > 0 {
			highest = c
		}
	}
	return highest
}

// kwokWrites counts the pod writes kwok made, as seen in the history: a
// status patch for every change of a pod's phase (only kwok, playing the
// kubelet, sets phases here), and a delete with grace period 0 for every
// pod whose deletionGracePeriodSeconds dropped to 0 after its deletion
// began (kwok's removal of an ended pod a client deleted gracefully).
func (h *history) kwokWrites() (statusPatches, deletes int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	last := map[string]*corev1.Pod{}
	for _, e := range h.pods {
		prev := last[e.obj.Name]
		last[e.obj.Name] = e.obj
		if prev == nil || e.typ == watch.Deleted {
			continue
		}
		if e.obj.Status.Phase != prev.Status.Phase {
			statusPatches++
		}
		if g, pg := e.obj.DeletionGracePeriodSeconds, prev.DeletionGracePeriodSeconds; g != nil && *g == 0 && pg != nil && *pg > 0 {
			deletes++
		}
	}
	return statusPatches, deletes
}

// podCondition returns pod's condition condType, or nil.
func podCondition(p *corev1.Pod, condType corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == condType {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// holdsQuota: the Workload still has its reservation and has not ended.
func holdsQuota(w *sluicev1alpha1.Workload) bool {
	return w.Status.Admission != nil && !isTrue(w, sluicev1alpha1.WorkloadFinished) &&
		isTrue(w, sluicev1alpha1.WorkloadQuotaReserved)
}

// podStory describes every pod event, for a failure message: who wrote
// (the managers of the fields) and what the pod looked like after.
func (h *history) podStory() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var b strings.Builder
	for _, e := range h.pods {
		p := e.obj
		var managers []string
		for _, m := range p.ManagedFields {
			managers = append(managers, fmt.Sprintf("%s/%s/%s@%s", m.Manager, m.Operation, m.Subresource, m.Time.Format("15:04:05")))
		}
		fmt.Fprintf(&b, "\n  %d %s %s: phase %s, gated %v, finalizers %v, deleting %v, managers %v",
			e.rev, e.typ, p.Name, p.Status.Phase, gated(p), p.Finalizers, p.DeletionTimestamp != nil, managers)
	}
	return b.String()
}
