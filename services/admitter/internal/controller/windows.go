package controller

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

// replacementWindow is how long a pod group holding quota in ClusterQueue
// name may be without pods: the queue's spec.podGroupReplacementWindow, or
// the admitter's default for a queue that sets none or is gone (its
// workloads still hold the quota it reserved until they give it back). It
// is read from the informer cache, synced before the admitter leads, each
// time a group is reported empty: a change of the queue's setting applies
// to the windows already open.
func (a *Admitter) replacementWindow(ctx context.Context, name string) (time.Duration, error) {
	var cq v1alpha1.ClusterQueue
	err := a.cfg.Cache.Get(ctx, client.ObjectKey{Name: name}, &cq)
	switch {
	case apierrors.IsNotFound(err):
		return a.cfg.ReplacementWindow, nil
	case err != nil:
		return 0, fmt.Errorf("read ClusterQueue %s: %w", name, err)
	case cq.Spec.PodGroupReplacementWindow != nil:
		// The schema refuses a negative window; a queue stored before it
		// did gives the quota back at once rather than never.
		return max(cq.Spec.PodGroupReplacementWindow.Duration, 0), nil
	}
	return a.cfg.ReplacementWindow, nil
}
