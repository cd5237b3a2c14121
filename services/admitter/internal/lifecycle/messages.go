package lifecycle

import (
	"context"
	"errors"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/services/admitter/internal/workload"
)

// MessageInterval is the least time between two writes of a waiting
// workload's message when only the message changes (the amount missing
// moves with every admission and finish).
const MessageInterval = 10 * time.Second

// messageWorkers is how many waiting messages are written at once. The
// messages are what a user reads while a workload waits; reservations and
// evictions are what moves workloads, and they must not queue behind a
// burst of messages at the API server, so messages get a few writers of
// their own, apart from the scheduling cycle's.
const messageWorkers = 4

// messages holds, per workload, the waiting message to write next and
// when the last one was written. The workers write them in the order they
// were asked for; a message asked for before the last one was written
// replaces it.
type messages struct {
	mu      sync.Mutex
	latest  map[types.NamespacedName]string
	written map[types.NamespacedName]time.Time
	q       workqueue.TypedDelayingInterface[types.NamespacedName]
}

func newMessages() *messages {
	return &messages{
		latest:  map[types.NamespacedName]string{},
		written: map[types.NamespacedName]time.Time{},
		q:       workqueue.NewTypedDelayingQueue[types.NamespacedName](),
	}
}

func (m *messages) forget(key types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.latest, key)
	delete(m.written, key)
}

// wait is how long a message for key must wait for the interval since the
// last one written, when the workload already says it waits; 0 when it
// may be written now. Call it under mu.
func (m *messages) wait(key types.NamespacedName, waitingAlready bool) time.Duration {
	last, ok := m.written[key]
	if !waitingAlready || !ok {
		return 0
	}
	return max(0, MessageInterval-time.Since(last))
}

// Tell asks for wl's QuotaReserved condition to say why it waits: at once
// when the condition says something else than waiting, at most once per
// MessageInterval when only the message changed. It does not write: the
// message workers do (see runMessages), so that a scheduling cycle never
// waits for messages; a cycle that parks thousands of new workloads would
// otherwise take as long as thousands of writes.
func (w *Writer) Tell(wl *v1alpha1.Workload, message string) {
	if says(wl, message) {
		return
	}
	key := workload.Key(wl)
	m := w.messages
	m.mu.Lock()
	m.latest[key] = message
	wait := m.wait(key, waitingFor(wl))
	m.mu.Unlock()
	m.q.AddAfter(key, wait)
}

// says reports whether wl's QuotaReserved condition says it waits, with
// message.
func says(wl *v1alpha1.Workload, message string) bool {
	return waitingFor(wl) && workload.Condition(wl, v1alpha1.WorkloadQuotaReserved).Message == message
}

// waitingFor reports whether wl's QuotaReserved condition says it waits
// for quota.
func waitingFor(wl *v1alpha1.Workload) bool {
	c := workload.Condition(wl, v1alpha1.WorkloadQuotaReserved)
	return c != nil && c.Status == metav1.ConditionFalse && c.Reason == v1alpha1.ReasonPending
}

// staleRetry is the wait before a message lost to a newer version is
// written again.
const staleRetry = time.Second

// markWaiting writes message into the QuotaReserved condition of the
// store's version of the workload, if it still waits for quota.
func (w *Writer) markWaiting(ctx context.Context, key types.NamespacedName, uid types.UID, message string) error {
	unlock := w.cfg.Locks.Lock(key)
	defer unlock()
	orig := w.cfg.Store.Get(key)
	if orig == nil || orig.UID != uid || !workload.IsPending(orig) {
		return nil
	}
	wl := orig.DeepCopy()
	workload.SetCondition(&wl.Status.Conditions, v1alpha1.WorkloadQuotaReserved, metav1.ConditionFalse, v1alpha1.ReasonPending, message, wl.Generation)
	if err := w.PatchStatus(ctx, orig, wl, "pending-message"); err != nil {
		return err
	}
	w.messages.mu.Lock()
	w.messages.written[key] = time.Now()
	w.messages.mu.Unlock()
	return nil
}

// runMessages runs the message workers until ctx ends.
func (w *Writer) runMessages(ctx context.Context) {
	go func() {
		<-ctx.Done()
		w.messages.q.ShutDown()
	}()
	var workers sync.WaitGroup
	for range messageWorkers {
		workers.Go(func() {
			for {
				key, shutdown := w.messages.q.Get()
				if shutdown {
					return
				}
				if err := w.writeMessage(ctx, key); err != nil && ctx.Err() == nil {
					ctrl.LoggerFrom(ctx).V(1).Info("write waiting message", "workload", key.String(), "error", err.Error())
				}
				w.messages.q.Done(key)
			}
		})
	}
	workers.Wait()
}

// writeMessage writes the latest message asked for key, unless the
// workload says it already, or the interval holds it back for now.
func (w *Writer) writeMessage(ctx context.Context, key types.NamespacedName) error {
	m := w.messages
	cur := w.cfg.Store.Get(key)
	m.mu.Lock()
	msg, ok := m.latest[key]
	switch {
	case !ok || cur == nil:
		m.mu.Unlock()
		return nil
	case says(cur, msg):
		delete(m.latest, key)
		m.mu.Unlock()
		return nil
	}
	if wait := m.wait(key, waitingFor(cur)); wait > 0 {
		m.mu.Unlock()
		m.q.AddAfter(key, wait)
		return nil
	}
	delete(m.latest, key)
	m.mu.Unlock()
	err := w.markWaiting(ctx, key, cur.UID, msg)
	if errors.Is(err, ErrStale) {
		// The store is behind; say it again once the newer version is
		// in, unless a newer message came meanwhile.
		m.mu.Lock()
		if _, newer := m.latest[key]; !newer {
			m.latest[key] = msg
		}
		m.mu.Unlock()
		m.q.AddAfter(key, staleRetry)
		return nil
	}
	return err
}
