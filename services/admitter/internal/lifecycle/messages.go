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

// messages holds, per workload, the waiting message to write next and
// when the last one was written. A message held back by the interval is
// written by a worker once the interval has passed.
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

// Tell records in wl's QuotaReserved condition why it waits: at once when
// the condition says something else than waiting, at most once per
// MessageInterval when only the message changed (the last message asked
// for is written when the interval has passed).
func (w *Writer) Tell(ctx context.Context, wl *v1alpha1.Workload, message string) error {
	key := workload.Key(wl)
	c := workload.Condition(wl, v1alpha1.WorkloadQuotaReserved)
	if c != nil && c.Status == metav1.ConditionFalse && c.Reason == v1alpha1.ReasonPending && c.Message == message {
		return nil
	}
	waitingAlready := c != nil && c.Status == metav1.ConditionFalse && c.Reason == v1alpha1.ReasonPending
	m := w.messages
	m.mu.Lock()
	last, ok := m.written[key]
	if waitingAlready && ok && time.Since(last) < MessageInterval {
		_, queued := m.latest[key]
		m.latest[key] = message
		m.mu.Unlock()
		if !queued {
			m.q.AddAfter(key, MessageInterval-time.Since(last))
		}
		return nil
	}
	delete(m.latest, key)
	m.mu.Unlock()
	err := w.markWaiting(ctx, key, wl.UID, message)
	if errors.Is(err, ErrStale) {
		// The store is behind; say it again once the newer version is in.
		m.mu.Lock()
		m.latest[key] = message
		m.mu.Unlock()
		m.q.AddAfter(key, staleRetry)
		return nil
	}
	return err
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

// runMessages writes the messages held back by the interval.
func (w *Writer) runMessages(ctx context.Context) {
	go func() {
		<-ctx.Done()
		w.messages.q.ShutDown()
	}()
	for {
		key, shutdown := w.messages.q.Get()
		if shutdown {
			return
		}
		w.messages.mu.Lock()
		msg, ok := w.messages.latest[key]
		delete(w.messages.latest, key)
		w.messages.mu.Unlock()
		if cur := w.cfg.Store.Get(key); ok && cur != nil {
			if err := w.Tell(ctx, cur, msg); err != nil && ctx.Err() == nil {
				ctrl.LoggerFrom(ctx).V(1).Info("write waiting message", "workload", key.String(), "error", err.Error())
			}
		}
		w.messages.q.Done(key)
	}
}
