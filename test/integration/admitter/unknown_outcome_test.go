package admitter

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	sluicev1 "github.com/sluice-dev/sluice/gen/sluice/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/services/admitter/app"
)

// A reservation write that reached etcd but whose answer was lost (here a
// timeout) must keep its quota: the informer is held back from the
// admitter, so the next cycle runs before the admitter could learn of the
// write from it, and a rival with a higher priority asks for the same
// quota in between.
func TestReservationThatLandedDespiteATimeoutIsBookedOnce(t *testing.T) {
	ctx := testContext(t)
	st := newSetup(ctx, t, queueOptions{cpu: "1"})
	hist := followQuota(t, st.ns, st.cq)
	gate := &eventGate{ns: st.ns, name: "first"}
	landed, proceed := make(chan error, 1), make(chan struct{})
	fault := &reserveFault{ns: st.ns, name: "first", hook: func(ctx context.Context, n int, write func() error) error {
		if n > 1 {
			return write()
		}
		err := write()
		landed <- err
		if err != nil {
			return err
		}
		select {
		case <-proceed:
		case <-ctx.Done():
			return ctx.Err()
		}
		return apierrors.NewTimeoutError("the answer to the reservation was lost", 0)
	}}
	reg := prometheus.NewRegistry()
	swapAdmitter(t, func(c *app.Config) { c.WrapClient, c.WrapCache, c.Registry = fault.wrap, gate.wrap, reg })

	submit(ctx, t, st.ns, "first", "1")
	if err := receive(ctx, t, landed, "the reservation write of first"); err != nil {
		t.Fatalf("the reservation write of first failed for real: %v", err)
	}
	// The rival comes while the write's answer is in flight.
	submit(ctx, t, st.ns, "second", "1", withPriority(10))
	close(proceed)

	second := waitTried(ctx, t, st.ns, "second")
	if second.Status.Admission != nil {
		t.Fatalf("second was given the quota first's landed reservation holds: %+v", second.Status.Admission)
	}
	waitCounter(ctx, t, reg, "landed", 1)
	// The admitter's own view (the scheduler's, in the ClusterQueue's
	// status) counts first as reserving, though the informer has told it
	// nothing yet.
	waitQueueCounts(ctx, t, st.cq, 1, 1)
	waitFor(ctx, t, "the informer's delivery of first's reservation held back", gate.heldReservation)
	gate.open()

	first := getWorkload(ctx, t, st.ns, "first")
	ids := fault.reservationIDs()
	if len(ids) != 1 {
		t.Fatalf("reservation writes of first: %v, want the one that landed only", ids)
	}
	if first.Status.Admission == nil || first.Status.Admission.ReservationID != ids[0] || !isTrue(first, v1alpha1.WorkloadAdmitted) {
		t.Fatalf("first: admission %+v conditions %+v, want admitted with reservation %s", first.Status.Admission, first.Status.Conditions, ids[0])
	}
	finishAndAdmitNext(ctx, t, st.ns, "first", "second", hist)
	hist.check(t, map[string]int{"first": 1, "second": 1})
}

// A reservation write that did not land but was answered ambiguously (a
// deadline) keeps its quota until the same write, made again, lands; a
// rival with a higher priority is not given the quota meanwhile.
func TestReservationLostToAnAmbiguousErrorIsWrittenAgainWhileItsQuotaStaysHeld(t *testing.T) {
	ctx := testContext(t)
	st := newSetup(ctx, t, queueOptions{cpu: "1"})
	hist := followQuota(t, st.ns, st.cq)
	attempted, proceed := make(chan struct{}, 1), make(chan struct{})
	retrying, proceedRetry := make(chan struct{}, 1), make(chan struct{})
	wait := func(ctx context.Context, ch chan struct{}) error {
		select {
		case <-ch:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	fault := &reserveFault{ns: st.ns, name: "first", hook: func(ctx context.Context, n int, write func() error) error {
		switch n {
		case 1:
			attempted <- struct{}{}
			if err := wait(ctx, proceed); err != nil {
				return err
			}
			// Never sent: the client gave up first.
			return fmt.Errorf("patch workload status: %w", context.DeadlineExceeded)
		case 2:
			retrying <- struct{}{}
			if err := wait(ctx, proceedRetry); err != nil {
				return err
			}
		}
		return write()
	}}
	reg := prometheus.NewRegistry()
	swapAdmitter(t, func(c *app.Config) { c.WrapClient, c.Registry = fault.wrap, reg })

	submit(ctx, t, st.ns, "first", "1")
	receive(ctx, t, attempted, "the reservation write of first")
	submit(ctx, t, st.ns, "second", "1", withPriority(10))
	close(proceed)

	if second := waitTried(ctx, t, st.ns, "second"); second.Status.Admission != nil {
		t.Fatalf("second was given the quota first's unsettled reservation holds: %+v", second.Status.Admission)
	}
	receive(ctx, t, retrying, "the reservation of first written again")
	ids := fault.reservationIDs()
	if len(ids) != 2 || ids[0] != ids[1] {
		t.Fatalf("reservation writes of first: %v, want the same reservation twice", ids)
	}
	// While the write is in flight again, nothing holds the quota in the
	// API, yet the admitter counts first as reserving it.
	if first := getWorkload(ctx, t, st.ns, "first"); first.Status.Admission != nil {
		t.Fatalf("first holds %+v though no write landed", first.Status.Admission)
	}
	waitQueueCounts(ctx, t, st.cq, 1, 1)
	if second := getWorkload(ctx, t, st.ns, "second"); second.Status.Admission != nil {
		t.Fatalf("second was given the quota while first's write was in flight again: %+v", second.Status.Admission)
	}
	close(proceedRetry)

	first := waitWorkload(ctx, t, st.ns, "first", "admitted", func(wl *v1alpha1.Workload) bool { return isTrue(wl, v1alpha1.WorkloadAdmitted) })
	if first.Status.Admission.ReservationID != ids[0] {
		t.Fatalf("first holds reservation %s, want %s", first.Status.Admission.ReservationID, ids[0])
	}
	waitCounter(ctx, t, reg, "retried", 1)
	finishAndAdmitNext(ctx, t, st.ns, "first", "second", hist)
	hist.check(t, map[string]int{"first": 1, "second": 1})
}

// swapAdmitter replaces the shared admitter with one configured by opts
// for the rest of the test.
func swapAdmitter(t *testing.T, opts ...func(*app.Config)) {
	t.Helper()
	restartAdmitter(t, opts...)
	t.Cleanup(func() { restartAdmitter(t) })
}

func withPriority(p int32) func(*sluicev1.Workload) {
	return func(w *sluicev1.Workload) { w.Priority = p }
}

// waitTried waits until a cycle decided on the workload: reserved, or
// waiting for quota.
func waitTried(ctx context.Context, t *testing.T, ns, name string) *v1alpha1.Workload {
	t.Helper()
	return waitWorkload(ctx, t, ns, name, "reserved or told it waits for quota", func(wl *v1alpha1.Workload) bool {
		c := condition(wl, v1alpha1.WorkloadQuotaReserved)
		return c != nil && (c.Status == metav1.ConditionTrue || c.Reason == v1alpha1.ReasonPending && strings.Contains(c.Message, "insufficient quota"))
	})
}

// waitQueueCounts waits until the ClusterQueue's status, which the
// admitter writes from its scheduler, counts reserving and pending
// workloads.
func waitQueueCounts(ctx context.Context, t *testing.T, cq string, reserving, pending int32) {
	t.Helper()
	waitFor(ctx, t, fmt.Sprintf("ClusterQueue %s counting %d reserving and %d pending", cq, reserving, pending), func() (bool, string) {
		var got v1alpha1.ClusterQueue
		if err := s.k8s.Get(ctx, clientKey(cq), &got); err != nil {
			return false, err.Error()
		}
		return got.Status.ReservingWorkloads == reserving && got.Status.PendingWorkloads == pending, stringify(got.Status)
	})
}

// finishAndAdmitNext finishes done and waits for next to be admitted in
// the quota it gave back, as every watcher of the history sees it.
func finishAndAdmitNext(ctx context.Context, t *testing.T, ns, done, next string, hist *quotaHistory) {
	t.Helper()
	if _, err := s.client.ReportProgress(ctx, &admitterv1.ReportProgressRequest{
		Workload: &sluicev1.WorkloadRef{Namespace: ns, Name: done},
		Finish:   &admitterv1.Finish{Succeeded: true},
	}); err != nil {
		t.Fatalf("ReportProgress %s: %v", done, err)
	}
	waitWorkload(ctx, t, ns, next, "admitted", func(wl *v1alpha1.Workload) bool { return isTrue(wl, v1alpha1.WorkloadAdmitted) })
	waitFor(ctx, t, "the history to show "+next+" holding quota", func() (bool, string) {
		return hist.holds(next), "not yet"
	})
}

// receive waits for what, sent on ch.
func receive[T any](ctx context.Context, t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	var v T
	select {
	case v = <-ch:
	case <-time.After(pollTimeout):
		t.Fatalf("timed out waiting for %s", what)
	case <-ctx.Done():
		t.Fatalf("waiting for %s: %v", what, ctx.Err())
	}
	return v
}

// waitCounter waits until the admitter counted n reservation writes of
// unknown outcome that settled with outcome.
func waitCounter(ctx context.Context, t *testing.T, g prometheus.Gatherer, outcome string, n float64) {
	t.Helper()
	const name = "sluice_admitter_reservation_writes_unknown_total"
	waitFor(ctx, t, fmt.Sprintf("%s{outcome=%q} = %v", name, outcome, n), func() (bool, string) {
		families, err := g.Gather()
		if err != nil {
			return false, err.Error()
		}
		for _, f := range families {
			if f.GetName() != name {
				continue
			}
			var seen []string
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "outcome" {
						seen = append(seen, fmt.Sprintf("%s=%v", l.GetValue(), m.GetCounter().GetValue()))
						if l.GetValue() == outcome && m.GetCounter().GetValue() == n {
							return true, ""
						}
					}
				}
			}
			return false, strings.Join(seen, " ")
		}
		return false, "no such metric"
	})
}

// reserveFault intercepts the admitter's reservation writes (status
// patches that write a reservation id) of one workload: hook decides what
// the n-th of them (from 1) does; write makes it for real.
type reserveFault struct {
	ns, name string
	hook     func(ctx context.Context, n int, write func() error) error

	mu  sync.Mutex
	ids []string
}

func (f *reserveFault) wrap(c client.Client) client.Client {
	return interceptor.NewClient(noWatch{c}, interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			write := func() error { return c.SubResource(sub).Patch(ctx, obj, patch, opts...) }
			wl, ok := obj.(*v1alpha1.Workload)
			if !ok || sub != "status" || wl.Namespace != f.ns || wl.Name != f.name || wl.Status.Admission == nil {
				return write()
			}
			if data, err := patch.Data(obj); err != nil || !bytes.Contains(data, []byte(`"reservationID"`)) {
				return write()
			}
			f.mu.Lock()
			f.ids = append(f.ids, wl.Status.Admission.ReservationID)
			n := len(f.ids)
			f.mu.Unlock()
			return f.hook(ctx, n, write)
		},
	})
}

// reservationIDs are the reservation ids of the writes intercepted so far.
func (f *reserveFault) reservationIDs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.ids...)
}

// noWatch lets the interceptor wrap the admitter's client, which never
// watches.
type noWatch struct{ client.Client }

func (noWatch) Watch(context.Context, client.ObjectList, ...client.ListOption) (watch.Interface, error) {
	return nil, errors.New("the admitter's client does not watch")
}

// eventGate holds back the admitter's informer events of one workload
// until it is opened, then delivers them in order.
type eventGate struct {
	ns, name string

	mu     sync.Mutex
	opened bool
	held   []func()
	// reservation: a held event carries a version with a reservation.
	reservation bool
}

func (g *eventGate) wrap(c cache.Cache) cache.Cache { return gatedCache{Cache: c, gate: g} }

func (g *eventGate) pass(obj any, deliver func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	wl, ok := obj.(*v1alpha1.Workload)
	if g.opened || !ok || wl.Namespace != g.ns || wl.Name != g.name {
		deliver()
		return
	}
	g.held = append(g.held, deliver)
	g.reservation = g.reservation || wl.Status.Admission != nil
}

func (g *eventGate) heldReservation() (bool, string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.reservation, fmt.Sprintf("%d events held", len(g.held))
}

func (g *eventGate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, deliver := range g.held {
		deliver()
	}
	g.held, g.opened = nil, true
}

type gatedCache struct {
	cache.Cache
	gate *eventGate
}

func (c gatedCache) GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error) {
	inf, err := c.Cache.GetInformer(ctx, obj, opts...)
	if _, ok := obj.(*v1alpha1.Workload); !ok || err != nil {
		return inf, err
	}
	return gatedInformer{Informer: inf, gate: c.gate}, nil
}

type gatedInformer struct {
	cache.Informer
	gate *eventGate
}

func (i gatedInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.Informer.AddEventHandler(gatedHandler{gate: i.gate, h: h})
}

type gatedHandler struct {
	gate *eventGate
	h    toolscache.ResourceEventHandler
}

func (g gatedHandler) OnAdd(obj any, initial bool) {
	g.gate.pass(obj, func() { g.h.OnAdd(obj, initial) })
}
func (g gatedHandler) OnUpdate(old, obj any) { g.gate.pass(obj, func() { g.h.OnUpdate(old, obj) }) }
func (g gatedHandler) OnDelete(obj any)      { g.gate.pass(obj, func() { g.h.OnDelete(obj) }) }

// quotaHistory follows, through watches of its own, every version of the
// Workloads of a namespace and of a ClusterQueue, and records each
// reservation taken and every moment two workloads held quota at once.
type quotaHistory struct {
	mu sync.Mutex
	// holding is the reservation id each workload holds ("" for none).
	holding map[string]string
	// taken lists the reservations each workload took, in order.
	taken    map[string][]string
	overlaps []string
	// maxReserving and maxCPU are the most the ClusterQueue's status
	// ever counted.
	maxReserving int32
	maxCPU       resource.Quantity
	err          error
}

func followQuota(t *testing.T, ns, cq string) *quotaHistory {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	wc, err := client.NewWithWatch(s.env.Config, client.Options{Scheme: s.k8s.Scheme()})
	if err != nil {
		t.Fatalf("watching client: %v", err)
	}
	h := &quotaHistory{holding: map[string]string{}, taken: map[string][]string{}}
	wls, err := wc.Watch(ctx, &v1alpha1.WorkloadList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatalf("watch workloads: %v", err)
	}
	cqs, err := wc.Watch(ctx, &v1alpha1.ClusterQueueList{}, client.MatchingFields{"metadata.name": cq})
	if err != nil {
		wls.Stop()
		t.Fatalf("watch ClusterQueue %s: %v", cq, err)
	}
	go h.follow(ctx, wls, h.workload)
	go h.follow(ctx, cqs, h.clusterQueue)
	return h
}

func (h *quotaHistory) follow(ctx context.Context, w watch.Interface, record func(watch.Event)) {
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.ResultChan():
			switch {
			case !ok && ctx.Err() == nil:
				h.fail(errors.New("a watch ended early: the history is incomplete"))
				return
			case !ok:
				return
			case ev.Type == watch.Error:
				h.fail(fmt.Errorf("watch error: %v", apierrors.FromObject(ev.Object)))
				return
			case ev.Type != watch.Bookmark:
				record(ev)
			}
		}
	}
}

func (h *quotaHistory) fail(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err == nil {
		h.err = err
	}
}

func (h *quotaHistory) workload(ev watch.Event) {
	wl, ok := ev.Object.(*v1alpha1.Workload)
	if !ok {
		return
	}
	id := ""
	if a := wl.Status.Admission; ev.Type != watch.Deleted && a != nil && !meta.IsStatusConditionTrue(wl.Status.Conditions, v1alpha1.WorkloadFinished) {
		id = a.ReservationID
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if id != "" && id != h.holding[wl.Name] {
		h.taken[wl.Name] = append(h.taken[wl.Name], id)
	}
	h.holding[wl.Name] = id
	var holders []string
	for name, held := range h.holding {
		if held != "" {
			holders = append(holders, name)
		}
	}
	if len(holders) > 1 {
		h.overlaps = append(h.overlaps, fmt.Sprintf("%v at resourceVersion %s", holders, wl.ResourceVersion))
	}
}

func (h *quotaHistory) clusterQueue(ev watch.Event) {
	cq, ok := ev.Object.(*v1alpha1.ClusterQueue)
	if !ok {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.maxReserving = max(h.maxReserving, cq.Status.ReservingWorkloads)
	var cpu resource.Quantity
	for _, f := range cq.Status.FlavorsReservation {
		for _, r := range f.Resources {
			if r.Name == corev1.ResourceCPU {
				cpu.Add(r.Total)
			}
		}
	}
	if cpu.Cmp(h.maxCPU) > 0 {
		h.maxCPU = cpu
	}
}

func (h *quotaHistory) holds(name string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.holding[name] != ""
}

// check fails t unless no two workloads ever held quota at once, the
// ClusterQueue never counted more than one reserving workload or more
// than its one cpu, and each workload took as many reservations as want
// says.
func (h *quotaHistory) check(t *testing.T, want map[string]int) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil {
		t.Fatal(h.err)
	}
	if len(h.overlaps) > 0 {
		t.Fatalf("workloads held the same quota at once: %v", h.overlaps)
	}
	if h.maxReserving > 1 || h.maxCPU.Cmp(resource.MustParse("1")) > 0 {
		t.Fatalf("the ClusterQueue's status counted up to %d reserving workloads and %s cpu, with quota for one",
			h.maxReserving, h.maxCPU.String())
	}
	for name, n := range want {
		if got := h.taken[name]; len(got) != n {
			t.Fatalf("%s took reservations %v, want %d", name, got, n)
		}
	}
}
