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
	"github.com/sluice-dev/sluice/services/admitter/internal/shrink"
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
	// q is the queue of workloads with a message to write. Once it took
	// renewAfter keys it is replaced when no message is left to write: a
	// client-go queue keeps the room of the most keys it ever held, and
	// this one holds every waiting workload of a burst.
	q          workqueue.TypedDelayingInterface[types.NamespacedName]
	added      int
	renewAfter int
	// closed: the workers are stopping; q is not replaced any more.
	closed bool
}

// renewAfter is how many keys a message queue takes before it is
// replaced once it drains.
const renewAfter = 4096

func newMessages() *messages {
	return &messages{
		latest:     map[types.NamespacedName]string{},
		written:    map[types.NamespacedName]time.Time{},
		q:          workqueue.NewTypedDelayingQueue[types.NamespacedName](),
		renewAfter: renewAfter,
	}
}

// tell asks for message to be written for key; waitingAlready: the
// workload's condition already says it waits, so only the message
// changes and the interval applies.
func (m *messages) tell(key types.NamespacedName, message string, waitingAlready bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.latest[key] = message
	m.add(key, m.wait(key, waitingAlready))
}

// take returns the message to write for key now, given cur, the store's
// version of the workload. It returns false when there is none, when cur
// says it already, or when the interval holds it back (key is then
// queued again for when the interval ends).
func (m *messages) take(key types.NamespacedName, cur *v1alpha1.Workload) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	msg, ok := m.latest[key]
	if !ok || cur == nil {
		return "", false
	}
	said := says(cur, msg)
	if !said {
		if wait := m.wait(key, waitingFor(cur)); wait > 0 {
			m.add(key, wait)
			return "", false
		}
	}
	shrink.Delete(&m.latest, key)
	m.renewIfDrained()
	return msg, !said
}

// retry asks for msg to be written for key again after staleRetry,
// unless a newer message came meanwhile.
func (m *messages) retry(key types.NamespacedName, msg string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, newer := m.latest[key]; !newer {
		m.latest[key] = msg
	}
	m.add(key, staleRetry)
}

// wrote records that a message for key was written now.
func (m *messages) wrote(key types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.written[key] = time.Now()
}

func (m *messages) forget(key types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	shrink.Delete(&m.latest, key)
	shrink.Delete(&m.written, key)
	m.renewIfDrained()
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

// add queues key after wait. Call it under mu, so that no key goes into a
// queue being replaced.
func (m *messages) add(key types.NamespacedName, wait time.Duration) {
	m.added++
	m.q.AddAfter(key, wait)
}

// renewIfDrained replaces q when no message is left to write and q took
// renewAfter keys or more; the keys still in it have nothing to write.
// Workers waiting on the old queue see it shut down and move to the new
// one. Call it under mu.
func (m *messages) renewIfDrained() {
	if len(m.latest) > 0 || m.added < m.renewAfter || m.closed {
		return
	}
	old := m.q
	m.q, m.added = workqueue.NewTypedDelayingQueue[types.NamespacedName](), 0
	old.ShutDown()
}

// queue is the queue the workers take keys from now.
func (m *messages) queue() workqueue.TypedDelayingInterface[types.NamespacedName] {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.q
}

// serve runs n workers that hand each queued key to write, until ctx ends.
func (m *messages) serve(ctx context.Context, n int, write func(types.NamespacedName)) {
	go func() {
		<-ctx.Done()
		m.mu.Lock()
		defer m.mu.Unlock()
		m.closed = true
		m.q.ShutDown()
	}()
	var workers sync.WaitGroup
	for range n {
		workers.Go(func() {
			for {
				q := m.queue()
				key, shutdown := q.Get()
				if shutdown {
					if ctx.Err() != nil {
						return
					}
					continue // replaced by a fresh queue
				}
				write(key)
				q.Done(key)
			}
		})
	}
	workers.Wait()
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
	w.messages.tell(workload.Key(wl), message, waitingFor(wl))
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
	w.messages.wrote(key)
	return nil
}

// runMessages runs the message workers until ctx ends.
func (w *Writer) runMessages(ctx context.Context) {
	w.messages.serve(ctx, messageWorkers, func(key types.NamespacedName) {
		if err := w.writeMessage(ctx, key); err != nil && ctx.Err() == nil {
			ctrl.LoggerFrom(ctx).V(1).Info("write waiting message", "workload", key.String(), "error", err.Error())
		}
	})
}

// writeMessage writes the latest message asked for key, unless the
// workload says it already, or the interval holds it back for now.
func (w *Writer) writeMessage(ctx context.Context, key types.NamespacedName) error {
	cur := w.cfg.Store.Get(key)
	msg, ok := w.messages.take(key, cur)
	if !ok {
		return nil
	}
	err := w.markWaiting(ctx, key, cur.UID, msg)
	if errors.Is(err, ErrStale) {
		// The store is behind; say it again once the newer version is in.
		w.messages.retry(key, msg)
		return nil
	}
	return err
}
