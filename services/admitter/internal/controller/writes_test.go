package controller

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestWriteQueueRunsInOrderAndCountsPending: one worker runs the writes
// in the order they were queued; waitAtMost returns once the pending
// writes are down to its bound, and the observer saw every count.
func TestWriteQueueRunsInOrderAndCountsPending(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var seen []int
	var mu sync.Mutex
	q := newWriteQueue(8, func(n int) { mu.Lock(); seen = append(seen, n); mu.Unlock() })
	release := make(chan struct{})
	var ran []int
	for i := range 5 {
		if !q.add(ctx, func(context.Context) { <-release; ran = append(ran, i) }) {
			t.Fatal("add refused a write before ctx ended")
		}
	}
	run, stop := context.WithCancel(ctx)
	var workers sync.WaitGroup
	workers.Go(func() { q.run(run, 1) })

	waited := make(chan struct{})
	go func() { q.waitAtMost(ctx, 2); close(waited) }()
	for range 2 {
		release <- struct{}{}
	}
	select {
	case <-waited:
		t.Fatal("waitAtMost(2) returned with 3 writes pending")
	default:
	}
	release <- struct{}{}
	select {
	case <-waited:
	case <-ctx.Done():
		t.Fatal("waitAtMost(2) did not return with 2 writes pending")
	}
	close(release)
	q.waitAtMost(ctx, 0)
	stop()
	workers.Wait()
	if !slices.Equal(ran, []int{0, 1, 2, 3, 4}) {
		t.Fatalf("ran %v, want the writes in the order queued", ran)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []int{1, 2, 3, 4, 5, 4, 3, 2, 1, 0}; !slices.Equal(seen, want) {
		t.Fatalf("observed pending %v, want %v", seen, want)
	}
}

// TestWriteQueueStops: once ctx ends, add queues nothing, waitAtMost
// returns, and run returns after the running write; a queued write is
// dropped.
func TestWriteQueueStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	q := newWriteQueue(1, nil)
	started, release := make(chan struct{}), make(chan struct{})
	q.add(ctx, func(context.Context) { close(started); <-release })
	stopped := make(chan struct{})
	go func() { q.run(ctx, 1); close(stopped) }()
	<-started
	dropped := false
	q.add(ctx, func(context.Context) { dropped = true })

	cancel()
	if q.add(ctx, func(context.Context) {}) {
		t.Fatal("add queued a write into a full queue after ctx ended")
	}
	q.waitAtMost(ctx, 0)
	close(release)
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after ctx ended")
	}
	if dropped {
		t.Fatal("a write queued behind the running one ran after ctx ended")
	}
}
