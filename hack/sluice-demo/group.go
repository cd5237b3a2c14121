package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1alpha2 "k8s.io/api/scheduling/v1alpha2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
)

// runGroup creates the KEP-976 Story 2 sample — a group of pods created
// together — and prints how it goes through as one workload: queued once
// every pod exists, admitted whole, every pod ungated, and finished when
// all of them succeeded.
func runGroup(ctx context.Context, c client.WithWatch, file string) error {
	pods, group, err := readGroup(ctx, c, file)
	if err != nil {
		return err
	}
	start := time.Now()
	var names []string
	for _, pod := range pods {
		if err := c.Create(ctx, pod); err != nil {
			return fmt.Errorf("creating pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		names = append(names, pod.Name)
	}
	fmt.Printf("\ncreated pod group %q: %s (total count %s)\n", group, strings.Join(names, ", "),
		pods[0].Annotations[podkeys.PodGroupTotalCountAnnotation])
	p := &progress{start: start, seen: map[string]bool{}}
	return p.followGroup(ctx, c, pods[0].Namespace, group, len(pods))
}

// followGroup prints the group's steps until its workload finished and its
// quota is released.
func (p *progress) followGroup(ctx context.Context, c client.Client, ns, group string, size int) error {
	for {
		var wl sluicev1alpha1.Workload
		found := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: group}, &wl) == nil
		if found {
			var sets []string
			for _, ps := range wl.Spec.PodSets {
				sets = append(sets, fmt.Sprintf("%s×%d", ps.Name, ps.Count))
			}
			p.step("workload", "queued as one Workload %s with a pod set per role: %s", wl.Name, strings.Join(sets, ", "))
			p.observeWorkload(&wl)
		}
		var list corev1.PodList
		if err := c.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{podkeys.PodGroupNameLabel: group}); err != nil {
			return fmt.Errorf("listing the group's pods: %w", err)
		}
		gatedPods, ungated, running, succeeded := 0, 0, 0, 0
		for _, pod := range list.Items {
			switch {
			case gated(&pod):
				gatedPods++
			case pod.Status.Phase == corev1.PodSucceeded:
				succeeded++
				ungated++
			default:
				ungated++
				if pod.Status.Phase == corev1.PodRunning {
					running++
				}
			}
		}
		if gatedPods == size {
			p.step("gated", "all %d pods gated by the webhook, none starts before the group is admitted", size)
		}
		if ungated == size {
			p.step("ungated", "all %d pods ungated by the grouper, each with its role's pod set info", size)
		}
		if running == size {
			p.step("running", "all %d pods running", size)
			var pg schedulingv1alpha2.PodGroup
			if c.Get(ctx, client.ObjectKey{Namespace: ns, Name: group}, &pg) == nil && pg.Spec.SchedulingPolicy.Gang != nil {
				p.step("gang", "bound by kube-scheduler as one gang through PodGroup %s (minCount %d), which sluice created for the group",
					pg.Name, pg.Spec.SchedulingPolicy.Gang.MinCount)
			}
		}
		if succeeded == size {
			p.step("succeeded", "all %d pods succeeded", size)
		}
		if found && meta.IsStatusConditionTrue(wl.Status.Conditions, sluicev1alpha1.WorkloadFinished) {
			return p.awaitRelease(ctx, c, &wl)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("group %s did not finish in time; see .local/logs/", group)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// readGroup reads the pods of a group sample and clears what an earlier
// demo run left of them: the pods, and the group's Workload (sluice deletes
// it once its pods are gone; a new group of the same name must not meet
// it). It returns the pods and the group's name.
func readGroup(ctx context.Context, c client.Client, file string) ([]*corev1.Pod, string, error) {
	pods, err := readPods(file)
	if err != nil {
		return nil, "", err
	}
	for _, pod := range pods {
		if err := deletePod(ctx, c, pod); err != nil {
			return nil, "", err
		}
	}
	group := pods[0].Labels[podkeys.PodGroupNameLabel]
	if err := deleteWorkload(ctx, c, pods[0].Namespace, group); err != nil {
		return nil, "", err
	}
	return pods, group, nil
}

// readPods reads the pods of a multi-document YAML file.
func readPods(path string) ([]*corev1.Pod, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading sample pods: %w", err)
	}
	var pods []*corev1.Pod
	for _, doc := range bytes.Split(data, []byte("\n---\n")) {
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		pod := &corev1.Pod{}
		if err := yaml.UnmarshalStrict(doc, pod); err != nil {
			return nil, fmt.Errorf("parsing %s: %w", path, err)
		}
		pods = append(pods, pod)
	}
	if len(pods) == 0 || slices.ContainsFunc(pods, func(p *corev1.Pod) bool { return p.Labels[podkeys.PodGroupNameLabel] == "" }) {
		return nil, fmt.Errorf("%s: want pods that all name a group", path)
	}
	return pods, nil
}

// deleteWorkload deletes the Workload ns/name, if any, and waits until it
// is gone.
func deleteWorkload(ctx context.Context, c client.Client, ns, name string) error {
	wl := &sluicev1alpha1.Workload{}
	wl.Namespace, wl.Name = ns, name
	if err := c.Delete(ctx, wl); apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return fmt.Errorf("deleting the earlier demo's Workload %s: %w", name, err)
	}
	fmt.Printf("waiting for the Workload of an earlier run to go away...\n")
	for {
		if err := c.Get(ctx, client.ObjectKeyFromObject(wl), wl); apierrors.IsNotFound(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the earlier demo's Workload %s was not deleted in time", name)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
