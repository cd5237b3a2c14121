// Package e2eutil holds what the end-to-end suites (test/e2e and its crash
// suite) share about sluice's objects.
package e2eutil

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/podgroup"
)

// IsWorkloadOf reports whether wl is the Workload pod belongs to: its
// group's (named after the group, or the PodGroup the pod names, with the
// pod-group label; a group's Workload has no owners), or the single-pod
// Workload the pod owns.
func IsWorkloadOf(wl *sluicev1alpha1.Workload, pod *corev1.Pod) bool {
	if group, ok := podgroup.Name(pod); ok {
		return wl.Name == group && wl.Labels[sluicev1alpha1.PodGroupLabel] == group
	}
	return slices.ContainsFunc(wl.OwnerReferences, func(o metav1.OwnerReference) bool { return o.UID == pod.UID })
}

// SetActive sets the Workload's spec.active with a merge patch, as a
// person would with kubectl patch.
func SetActive(ctx context.Context, c client.Client, namespace, name string, active bool) error {
	patch := fmt.Appendf(nil, `{"spec":{"active":%t}}`, active)
	target := &sluicev1alpha1.Workload{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if err := c.Patch(ctx, target, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("set spec.active=%t on Workload %s/%s: %w", active, namespace, name, err)
	}
	return nil
}

// WaitGone polls until obj no longer exists (deleted, and released by
// every finalizer), for at most limit.
func WaitGone(ctx context.Context, c client.Client, obj client.Object, limit time.Duration) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, limit, true, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj)
		switch {
		case apierrors.IsNotFound(err):
			return true, nil
		case err != nil:
			last = err
		default:
			last = fmt.Errorf("still there: deletionTimestamp %v, finalizers %v", obj.GetDeletionTimestamp(), obj.GetFinalizers())
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("%T %s/%s never went: %w", obj, obj.GetNamespace(), obj.GetName(), last)
	}
	return nil
}
