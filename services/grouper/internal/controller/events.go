package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/sluice-dev/sluice/pkg/podgroup"
	"github.com/sluice-dev/sluice/services/grouper/internal/workload"
)

// followPods registers the pod event handler on the pod informer. It keeps
// the roster and then wakes the pod of every event, in that order, so a
// reconcile finds the roster at least as new as the event that woke it; a
// deleted pod of a group also wakes the group's empty check. The roster is
// complete once RosterSynced reports true: until then the absence of a pod
// from it says nothing.
func (r *Reconciler) followPods(ctx context.Context, c cache.Cache) error {
	informer, err := c.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return fmt.Errorf("get the pod informer: %w", err)
	}
	reg, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.podChanged(obj) },
		UpdateFunc: func(_, obj any) { r.podChanged(obj) },
		DeleteFunc: r.podDeleted,
	})
	if err != nil {
		return fmt.Errorf("follow pods: %w", err)
	}
	r.rosterSynced = reg.HasSynced
	return nil
}

// RosterSynced reports whether the roster holds every pod of the cache's
// first list: only then may the absence of a pod from it be trusted, and
// the decisions that act on absence be followed.
func (r *Reconciler) RosterSynced() bool {
	return r.rosterSynced != nil && r.rosterSynced()
}

func (r *Reconciler) podChanged(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	r.roster.Set(pod)
	if ending(pod) {
		r.wakeUrgent(pod) // its end frees quota
		return
	}
	r.wakePod(pod)
}

// ending reports whether pod ended or is being deleted.
func ending(pod *corev1.Pod) bool {
	return pod.DeletionTimestamp != nil || podgroup.Ended(pod)
}

func (r *Reconciler) podDeleted(obj any) {
	if tombstone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	r.roster.Delete(pod)
	r.wakeUrgent(pod)
	if key, ok := workload.KeyFor(pod); ok && workload.IsGroupMember(pod) {
		gone := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
		r.groupGone <- event.GenericEvent{Object: gone}
	}
}
