package controller

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// TestUrgentPodsGoFirst: pods woken as urgent (a decision, an end) are
// served before the pods queued earlier by other events, such as a burst
// of new pods waiting to be submitted.
func TestUrgentPodsGoFirst(t *testing.T) {
	q := priorityqueue.New[reconcile.Request]("test")
	defer q.ShutDown()
	ctx := context.Background()
	pod := func(name string) event.TypedGenericEvent[*corev1.Pod] {
		return event.TypedGenericEvent[*corev1.Pod]{Object: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}}
	}
	normal := &handler.TypedEnqueueRequestForObject[*corev1.Pod]{}
	for _, name := range []string{"new-1", "new-2", "new-3"} {
		normal.Generic(ctx, pod(name), q)
	}
	enqueueAt(urgentPriority).Generic(ctx, pod("admitted"), q)
	enqueueAt(urgentPriority).Generic(ctx, pod("ended"), q)
	// Len takes in what was added; the queue hands items out only then.
	if n := q.Len(); n != 5 {
		t.Fatalf("%d pods queued, want 5", n)
	}

	var got []string
	for range 5 {
		req, _ := q.Get()
		got = append(got, req.Name)
		q.Done(req)
	}
	want := []string{"admitted", "ended", "new-1", "new-2", "new-3"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("served %v, want %v", got, want)
		}
	}
}
