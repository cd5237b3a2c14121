// Package keyqueue is the grouper's queues of workloads to look at again
// (a workload's stop check, the count of its started pods), served by
// workers that retry a failed look with backoff, and the backoff every
// queue of the grouper retries with.
package keyqueue

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/util/workqueue"

	"github.com/sluice-dev/sluice/services/grouper/internal/workload"
)

const (
	// retryMin and retryMax bound the backoff after a failure. The maximum
	// stays short: an admitted pod must not wait long for its retry.
	retryMin = 100 * time.Millisecond
	retryMax = 30 * time.Second
)

// Backoff is the rate limiter of every queue of the grouper: per item,
// exponential after each failure, between 100ms and 30s.
func Backoff[T comparable]() workqueue.TypedRateLimiter[T] {
	return workqueue.NewTypedItemExponentialFailureRateLimiter[T](retryMin, retryMax)
}

// Queue is a queue of workloads to look at.
type Queue struct {
	q workqueue.TypedRateLimitingInterface[workload.Key]
}

// New returns an empty Queue.
func New() *Queue {
	return &Queue{q: workqueue.NewTypedRateLimitingQueue(Backoff[workload.Key]())}
}

// Add has key looked at.
func (q *Queue) Add(key workload.Key) { q.q.Add(key) }

// AddAfter has key looked at after d.
func (q *Queue) AddAfter(key workload.Key, d time.Duration) { q.q.AddAfter(key, d) }

// ShutDownOn shuts the queue down when ctx ends.
func (q *Queue) ShutDownOn(ctx context.Context) {
	go func() {
		<-ctx.Done()
		q.q.ShutDown()
	}()
}

// Work looks at the queue's workloads one at a time until the queue shuts
// down. A look that fails is logged as failed and made again after a
// backoff.
func (q *Queue) Work(ctx context.Context, look func(context.Context, workload.Key) error, log logr.Logger, failed string) {
	for {
		key, shutdown := q.q.Get()
		if shutdown {
			return
		}
		if err := look(ctx, key); err != nil {
			log.V(1).Info(failed, "workload", key.String(), "error", err.Error())
			q.q.AddRateLimited(key)
		} else {
			q.q.Forget(key)
		}
		q.q.Done(key)
	}
}
