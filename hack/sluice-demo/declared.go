package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
)

// runDeclared creates the KEP-976 Story 3 sample's driver, which declares
// the workers it will create, and prints how the group is admitted from
// the driver alone. Once the driver runs, the demo creates the workers, as
// the driver would, and prints each joining its pod set and being ungated
// at once, then the group finishing with the driver.
func runDeclared(ctx context.Context, c client.WithWatch, file string) error {
	pods, group, err := readGroup(ctx, c, file)
	if err != nil {
		return err
	}
	driver, workers := pods[0], pods[1:]
	start := time.Now()
	if err := c.Create(ctx, driver); err != nil {
		return fmt.Errorf("creating pod %s/%s: %w", driver.Namespace, driver.Name, err)
	}
	fmt.Printf("\ncreated driver %s/%s of group %q; it declares its workers in %s, none of which exists yet\n",
		driver.Namespace, driver.Name, group, podkeys.PodGroupSetsAnnotation)
	p := &progress{start: start, seen: map[string]bool{}}
	if err := p.awaitDriverRunning(ctx, c, driver, group); err != nil {
		return err
	}
	var names []string
	for _, w := range workers {
		if err := c.Create(ctx, w); err != nil {
			return fmt.Errorf("creating worker %s/%s: %w", w.Namespace, w.Name, err)
		}
		names = append(names, w.Name)
	}
	p.step("workers", "the driver runs and creates its workers: %s", strings.Join(names, ", "))
	return p.followGroup(ctx, c, driver.Namespace, group, len(pods))
}

// awaitDriverRunning prints the group's Workload and the driver's steps
// until the driver runs.
func (p *progress) awaitDriverRunning(ctx context.Context, c client.Client, driver *corev1.Pod, group string) error {
	for {
		var wl sluicev1alpha1.Workload
		if c.Get(ctx, client.ObjectKey{Namespace: driver.Namespace, Name: group}, &wl) == nil {
			var sets []string
			for _, ps := range wl.Spec.PodSets {
				sets = append(sets, fmt.Sprintf("%s×%d", ps.Name, ps.Count))
			}
			p.step("workload", "queued as Workload %s with every declared pod set: %s", wl.Name, strings.Join(sets, ", "))
			p.observeWorkload(&wl)
			if meta.IsStatusConditionTrue(wl.Status.Conditions, sluicev1alpha1.WorkloadAdmitted) {
				p.step("admitted-whole", "admitted for the whole group's quota before any worker exists")
			}
		}
		var cur corev1.Pod
		if err := c.Get(ctx, client.ObjectKeyFromObject(driver), &cur); err == nil {
			if gated(&cur) {
				p.step("driver-gated", "driver gated by the webhook, labelled with its role %s=%s",
					podkeys.PodGroupRoleLabel, cur.Labels[podkeys.PodGroupRoleLabel])
			}
			if cur.Status.Phase == corev1.PodRunning {
				p.step("driver-running", "driver ungated and running on %s", cur.Spec.NodeName)
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("driver %s did not start in time; see .local/logs/", driver.Name)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
