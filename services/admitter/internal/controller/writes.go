package controller

import (
	"context"
	"sync"
)

// writeQueue runs the writes scheduling cycles hand out (reservations and
// evictions) on a fixed number of workers, in the order they were handed
// out. A cycle only queues its writes, so the next cycle can plan while
// the last ones are still being written, against the quota the scheduler
// assumes for them: the API server is kept busy between cycles, and a
// cycle's time is its own work, not its writes'.
type writeQueue struct {
	jobs chan func(context.Context)

	mu sync.Mutex
	// pending counts the writes queued or running.
	pending int
	// ended is closed, and replaced, each time a write ends.
	ended chan struct{}
	// observe, when set, is told the pending count whenever it changes.
	observe func(int)
}

// newWriteQueue returns a queue that holds up to depth writes not yet
// taken by a worker; add blocks beyond that.
func newWriteQueue(depth int, observe func(pending int)) *writeQueue {
	return &writeQueue{jobs: make(chan func(context.Context), depth), ended: make(chan struct{}), observe: observe}
}

// run runs the queued writes on workers goroutines until ctx ends; it
// returns once every running write has returned. Writes still queued then
// are dropped: they were the plans of a leader that stopped leading, and
// the next leader plans afresh from the Workloads.
func (q *writeQueue) run(ctx context.Context, workers int) {
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case job := <-q.jobs:
					if ctx.Err() == nil {
						job(ctx)
					}
					q.done()
				}
			}
		})
	}
	wg.Wait()
}

// add queues job; it reports false, having queued nothing, when ctx ended
// first.
func (q *writeQueue) add(ctx context.Context, job func(context.Context)) bool {
	q.change(+1)
	select {
	case q.jobs <- job:
		return true
	case <-ctx.Done():
		q.done()
		return false
	}
}

// waitAtMost waits until at most n writes are pending, or ctx ends.
func (q *writeQueue) waitAtMost(ctx context.Context, n int) {
	for {
		q.mu.Lock()
		pending, ended := q.pending, q.ended
		q.mu.Unlock()
		if pending <= n {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-ended:
		}
	}
}

// done counts a write that ended and wakes whoever waits for one.
func (q *writeQueue) done() { q.change(-1) }

// change moves the pending count by by; a write that ended (by < 0)
// wakes the waiters.
func (q *writeQueue) change(by int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.pending += by
	if by < 0 {
		close(q.ended)
		q.ended = make(chan struct{})
	}
	if q.observe != nil {
		q.observe(q.pending)
	}
}
