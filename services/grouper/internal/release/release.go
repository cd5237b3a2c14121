// Package release is the emergency exit for pods sluice can no longer
// serve: it removes sluice's scheduling gate and finalizer from every pod
// carrying the managed label, so the pods schedule (without admission) and
// can be deleted (without accounting).
package release

import (
	"context"
	"fmt"
	"io"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/services/grouper/internal/podpatch"
)

// pageSize is the number of pods listed per request.
const pageSize = 500

// Options choose what to release.
type Options struct {
	// Namespace limits the release to one namespace; empty is all.
	Namespace string
	// DryRun lists what would be released without changing anything.
	DryRun bool
	// Out receives one line per pod and a summary.
	Out io.Writer
}

// Summary counts the pods seen and released.
type Summary struct {
	Seen     int
	Released int
	Failed   int
}

// All releases every managed pod, page by page. A pod that fails is
// reported and skipped; the error then says how many failed, and running
// the command again retries them.
func All(ctx context.Context, cs kubernetes.Interface, opts Options) (Summary, error) {
	var sum Summary
	sel := labels.SelectorFromSet(labels.Set{podkeys.ManagedLabel: podkeys.ManagedLabelValue}).String()
	listOpts := metav1.ListOptions{LabelSelector: sel, Limit: pageSize}
	for {
		pods, err := cs.CoreV1().Pods(opts.Namespace).List(ctx, listOpts)
		if err != nil {
			return sum, fmt.Errorf("list managed pods: %w", err)
		}
		for i := range pods.Items {
			sum.Seen++
			released, err := one(ctx, cs, &pods.Items[i], opts)
			switch {
			case err != nil:
				sum.Failed++
				fmt.Fprintf(opts.Out, "FAILED %s/%s: %v\n", pods.Items[i].Namespace, pods.Items[i].Name, err)
			case released:
				sum.Released++
			}
		}
		if pods.Continue == "" {
			break
		}
		listOpts.Continue = pods.Continue
	}
	verb := "released"
	if opts.DryRun {
		verb = "would release"
	}
	fmt.Fprintf(opts.Out, "%d managed pods, %s %d, %d failed\n", sum.Seen, verb, sum.Released, sum.Failed)
	if sum.Failed > 0 {
		return sum, fmt.Errorf("%d pods could not be released; run the command again", sum.Failed)
	}
	return sum, nil
}

// one releases one pod; false means it carried neither gate nor finalizer.
func one(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod, opts Options) (bool, error) {
	patch, found, err := podpatch.Release(pod)
	if err != nil || !found {
		return false, err
	}
	what := describe(pod)
	if opts.DryRun {
		fmt.Fprintf(opts.Out, "would release %s/%s (%s)\n", pod.Namespace, pod.Name, what)
		return true, nil
	}
	_, err = cs.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.JSONPatchType, patch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("patch: %w", err)
	}
	fmt.Fprintf(opts.Out, "released %s/%s (%s)\n", pod.Namespace, pod.Name, what)
	return true, nil
}

func describe(pod *corev1.Pod) string {
	switch gate, fin := podpatch.HasGate(pod), podpatch.HasFinalizer(pod); {
	case gate && fin:
		return "gate and finalizer"
	case gate:
		return "gate"
	default:
		return "finalizer"
	}
}
