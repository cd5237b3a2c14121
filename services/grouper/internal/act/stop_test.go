package act

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/services/grouper/internal/podstate"
)

// TestRemoveFinalizerOnce: once the grouper removed its finalizer from a
// pod, a reconcile that still sees the pod with it, from a cache not caught
// up yet, sends nothing (Pods has no client here: a request would panic),
// where a patch would fail its test and be retried for nothing.
func TestRemoveFinalizerOnce(t *testing.T) {
	stale := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Namespace: "ns", Name: "p", UID: "uid-p", Finalizers: []string{podkeys.ManagedFinalizer},
	}}
	st := podstate.State{UID: stale.UID, FinalizerRemoved: true}
	if err := (Pods{}).RemoveFinalizer(context.Background(), stale, &st); err != nil {
		t.Fatalf("RemoveFinalizer after the removal: %v", err)
	}
}
