package controller

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/sluice-dev/sluice/services/grouper/internal/workload"
)

// podEvents keeps the roster and queues the pod of every event, in that
// order, so a reconcile finds the roster at least as new as the event that
// woke it. A deleted pod of a group also wakes the group's empty check.
func (r *Reconciler) podEvents() handler.EventHandler {
	enqueue := func(q workqueue.TypedRateLimitingInterface[reconcile.Request], obj client.Object) {
		q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}})
	}
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if pod, ok := e.Object.(*corev1.Pod); ok {
				r.roster.Set(pod)
				enqueue(q, pod)
			}
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if pod, ok := e.ObjectNew.(*corev1.Pod); ok {
				r.roster.Set(pod)
				enqueue(q, pod)
			}
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			pod, ok := e.Object.(*corev1.Pod)
			if !ok {
				return
			}
			r.roster.Delete(pod)
			enqueue(q, pod)
			if key, ok := workload.KeyFor(pod); ok && workload.IsGroupMember(pod) {
				gone := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
				r.groupGone <- event.GenericEvent{Object: gone}
			}
		},
		GenericFunc: func(_ context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(q, e.Object)
		},
	}
}
