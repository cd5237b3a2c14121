package lifecycle

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

// TestMessageQueueRenewedOnceDrained checks that the message queue is
// replaced once it drained after taking many keys, that a queue that took
// few is kept, and that all the workers move to the new queue: every
// message asked for is written once, before and after the renewal, and
// after it the workers still write side by side.
func TestMessageQueueRenewedOnceDrained(t *testing.T) {
	tests := []struct {
		name        string
		keys        int
		wantRenewed bool
	}{
		{name: "few keys", keys: 3},
		{name: "many keys", keys: 40, wantRenewed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const workers = 4
			ctx, cancel := context.WithCancel(context.Background())
			m := newMessages()
			m.renewAfter = 20
			var mu sync.Mutex
			writes := map[types.NamespacedName]int{}
			// Once together is set, each write waits until as many writes
			// as there are workers are under way: it takes every worker.
			var together bool
			var underWay sync.WaitGroup
			served := make(chan struct{})
			go func() {
				defer close(served)
				m.serve(ctx, workers, func(key types.NamespacedName) {
					if _, ok := m.take(key, &v1alpha1.Workload{}); !ok {
						return
					}
					mu.Lock()
					writes[key]++
					wait := together
					mu.Unlock()
					if wait {
						underWay.Done()
						underWay.Wait()
					}
				})
			}()
			written := func(n int) func() bool {
				return func() bool { mu.Lock(); defer mu.Unlock(); return len(writes) == n }
			}

			first := m.queue()
			// One at a time, so that the workers wait on the queue when it
			// is replaced.
			for i := range tt.keys {
				m.tell(key(i), "waiting", false)
				poll(t, fmt.Sprintf("message %d written", i), written(i+1))
			}
			if renewed := m.queue() != first; renewed != tt.wantRenewed {
				t.Errorf("queue renewed: %t, want %t", renewed, tt.wantRenewed)
			}
			mu.Lock()
			together = true
			mu.Unlock()
			underWay.Add(workers)
			for i := range workers {
				m.tell(key(tt.keys+i), "waiting", false)
			}
			poll(t, "messages asked for after the drain written by every worker at once", written(tt.keys+workers))

			cancel()
			<-served
			for k, n := range writes {
				if n != 1 {
					t.Errorf("%s written %d times, want once", k, n)
				}
			}
		})
	}
}

func key(i int) types.NamespacedName {
	return types.NamespacedName{Namespace: "ns", Name: fmt.Sprintf("wl-%d", i)}
}

// poll waits up to ten seconds for cond.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}
