package lifecycle

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/services/admitter/internal/workload"
)

// ErrNoPriorityClass refuses a workload whose pods name a
// WorkloadPriorityClass that does not exist. The webhook refuses such pods
// at creation, so this is a class deleted since; the pods stay gated and
// are submitted again until the class exists.
var ErrNoPriorityClass = errors.New("WorkloadPriorityClass not found")

// resolvePriority sets the priority of a new workload whose pods name a
// WorkloadPriorityClass to the class's value. The value is read once, here:
// editing the class later does not move workloads already created.
func (w *Writer) resolvePriority(ctx context.Context, wl *v1alpha1.Workload) error {
	name := workload.WorkloadPriorityClass(wl)
	if name == "" {
		return nil
	}
	class := &v1alpha1.WorkloadPriorityClass{}
	err := w.cfg.Client.Get(ctx, types.NamespacedName{Name: name}, class)
	if apierrors.IsNotFound(err) {
		// The informer may not have seen a class created a moment ago.
		err = w.cfg.APIReader.Get(ctx, types.NamespacedName{Name: name}, class)
	}
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%w: label %s names WorkloadPriorityClass %q, which does not exist; create it, or create the pods again naming one that does",
			ErrNoPriorityClass, podkeys.PriorityClassLabel, name)
	case err != nil:
		return fmt.Errorf("read WorkloadPriorityClass %q: %w", name, err)
	}
	value := class.Value
	wl.Spec.Priority = &value
	return nil
}
