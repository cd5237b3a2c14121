// Command sluice-demo creates the KEP-976 Story 1 sample and prints, as they
// happen, the steps its pod goes through: gated, queued, quota reserved,
// checked, admitted, ungated with the check's updates, scheduled, running,
// succeeded, and its quota released. Then it does the same for the Story 2
// sample, a group of pods created together and admitted whole, and for the
// Story 3 sample, a driver admitted for the workers it declares and creates
// later, and for a pod in a queue that needs a person's approval, which it
// gives by running the command the approval check prints. `make run` calls
// it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/kube"
	"github.com/sluice-dev/sluice/pkg/podkeys"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "path to the kubeconfig (default: $KUBECONFIG)")
	samples := flag.String("samples", "deploy/samples", "directory holding story1-pod.yaml, story2-group.yaml, story3-spark.yaml and approval-pod.yaml")
	kubectl := flag.String("kubectl", "bin/kubectl", "kubectl to run the approval check's command with")
	timeout := flag.Duration("timeout", 2*time.Minute, "how long to wait for the pod to finish")
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := run(ctx, *kubeconfig, *samples, *kubectl); err != nil {
		fmt.Fprintf(os.Stderr, "sluice-demo: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, kubeconfig, samples, kubectl string) error {
	cfg, err := kube.RESTConfig(kubeconfig, 50, 100, "sluice-demo")
	if err != nil {
		return err
	}
	scheme, err := kube.Scheme()
	if err != nil {
		return err
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("creating client: %w", err)
	}

	pod, err := readPod(filepath.Join(samples, "story1-pod.yaml"))
	if err != nil {
		return err
	}
	// A pod left from an earlier demo run would hide every step.
	if err := deletePod(ctx, c, pod); err != nil {
		return err
	}
	start := time.Now()
	if err := c.Create(ctx, pod); err != nil {
		return fmt.Errorf("creating pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	fmt.Printf("\ncreated pod %s/%s in queue %q\n", pod.Namespace, pod.Name, pod.Labels[podkeys.QueueNameLabel])

	p := &progress{start: start, seen: map[string]bool{}, initialTolerations: pod.Spec.Tolerations}
	if err := p.follow(ctx, c, pod); err != nil {
		return err
	}
	if err := runGroup(ctx, c, filepath.Join(samples, "story2-group.yaml")); err != nil {
		return err
	}
	if err := runDeclared(ctx, c, filepath.Join(samples, "story3-spark.yaml")); err != nil {
		return err
	}
	return runApproval(ctx, c, filepath.Join(samples, "approval-pod.yaml"), kubectl, kubeconfig)
}

// follow watches the pod and the Workloads of its namespace and prints each
// step as it happens, until the pod has finished and its quota is released.
func (p *progress) follow(ctx context.Context, c client.WithWatch, pod *corev1.Pod) error {
	pods, err := c.Watch(ctx, &corev1.PodList{}, client.InNamespace(pod.Namespace),
		client.MatchingFields{"metadata.name": pod.Name})
	if err != nil {
		return fmt.Errorf("watching pod: %w", err)
	}
	defer pods.Stop()
	workloads, err := c.Watch(ctx, &sluicev1alpha1.WorkloadList{}, client.InNamespace(pod.Namespace))
	if err != nil {
		return fmt.Errorf("watching workloads: %w", err)
	}
	defer workloads.Stop()

	var wl *sluicev1alpha1.Workload
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("pod %s did not finish in time; see .local/logs/", pod.Name)
		case ev, ok := <-pods.ResultChan():
			if !ok {
				return fmt.Errorf("pod watch closed")
			}
			cur, isPod := ev.Object.(*corev1.Pod)
			if !isPod || cur.UID != pod.UID {
				continue
			}
			p.observePod(cur)
			if cur.Status.Phase == corev1.PodSucceeded || cur.Status.Phase == corev1.PodFailed {
				return p.awaitRelease(ctx, c, wl)
			}
		case ev, ok := <-workloads.ResultChan():
			if !ok {
				return fmt.Errorf("workload watch closed")
			}
			w, isWl := ev.Object.(*sluicev1alpha1.Workload)
			if !isWl || !ownedBy(w, pod) {
				continue
			}
			wl = w
			p.observeWorkload(w)
		}
	}
}

func ownedBy(wl *sluicev1alpha1.Workload, pod *corev1.Pod) bool {
	return slices.ContainsFunc(wl.OwnerReferences, func(o metav1.OwnerReference) bool { return o.UID == pod.UID })
}

func readPod(path string) (*corev1.Pod, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading sample pod: %w", err)
	}
	pod := &corev1.Pod{}
	if err := yaml.UnmarshalStrict(data, pod); err != nil {
		return nil, fmt.Errorf("parsing %s: %w", path, err)
	}
	return pod, nil
}

func deletePod(ctx context.Context, c client.Client, pod *corev1.Pod) error {
	old := &corev1.Pod{}
	err := c.Get(ctx, client.ObjectKeyFromObject(pod), old)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("looking for an earlier demo pod: %w", err)
	}
	if err := c.Delete(ctx, old); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting the earlier demo pod: %w", err)
	}
	fmt.Printf("waiting for the pod of an earlier run to go away...\n")
	for {
		err := c.Get(ctx, client.ObjectKeyFromObject(pod), old)
		if apierrors.IsNotFound(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the earlier demo pod %s was not deleted in time", pod.Name)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// progress prints each step once, with the time since the pod was created.
type progress struct {
	start time.Time
	seen  map[string]bool
	// initialTolerations are the pod's own, so that the demo shows only
	// what admission added.
	initialTolerations []corev1.Toleration
	// clusterQueue is where quota was reserved.
	clusterQueue string
}

func (p *progress) step(key, format string, args ...any) {
	if p.seen[key] {
		return
	}
	p.seen[key] = true
	fmt.Printf("  %6.2fs  %s\n", time.Since(p.start).Seconds(), fmt.Sprintf(format, args...))
}

func (p *progress) observeWorkload(wl *sluicev1alpha1.Workload) {
	{
		p.step("workload", "queued as Workload %s in LocalQueue %s", wl.Name, wl.Spec.QueueName)
		if c := meta.FindStatusCondition(wl.Status.Conditions, sluicev1alpha1.WorkloadQuotaReserved); c != nil {
			if c.Status == "True" && wl.Status.Admission != nil {
				p.clusterQueue = wl.Status.Admission.ClusterQueue
				p.step("reserved", "quota reserved in ClusterQueue %s (flavors %s)",
					wl.Status.Admission.ClusterQueue, flavors(wl.Status.Admission))
			} else if c.Status == "False" {
				p.step("waiting:"+c.Message, "waiting for quota: %s", c.Message)
			}
		}
		for _, ac := range wl.Status.AdmissionChecks {
			p.step("check:"+ac.Name+string(ac.State), "admission check %s: %s %s", ac.Name, ac.State, ac.Message)
		}
		if meta.IsStatusConditionTrue(wl.Status.Conditions, sluicev1alpha1.WorkloadAdmitted) {
			p.step("admitted", "admitted")
		}
	}
}

func (p *progress) observePod(pod *corev1.Pod) {
	if gated(pod) {
		p.step("gated", "gated by the webhook: gate %s, label %s=%s, finalizer %s, role hash %s",
			podkeys.AdmissionGate, podkeys.ManagedLabel, pod.Labels[podkeys.ManagedLabel],
			podkeys.ManagedFinalizer, pod.Annotations[podkeys.RoleHashAnnotation])
	}
	if !gated(pod) && p.seen["gated"] {
		p.step("ungated", "ungated by the grouper with nodeSelector %v, tolerations added %s, label %s=%s",
			pod.Spec.NodeSelector, tolerations(added(p.initialTolerations, pod.Spec.Tolerations)),
			podkeys.PodSetLabel, pod.Labels[podkeys.PodSetLabel])
	}
	if pod.Spec.NodeName != "" {
		p.step("scheduled", "scheduled by kube-scheduler onto node %s", pod.Spec.NodeName)
	}
	switch pod.Status.Phase {
	case corev1.PodRunning:
		p.step("running", "running")
	case corev1.PodSucceeded:
		p.step("succeeded", "succeeded")
	case corev1.PodFailed:
		p.step("failed", "failed: %s", pod.Status.Message)
	}
}

// awaitRelease waits for the workload to finish and its ClusterQueue to hold
// no quota for it any more.
func (p *progress) awaitRelease(ctx context.Context, c client.Client, wl *sluicev1alpha1.Workload) error {
	if wl == nil {
		return fmt.Errorf("the pod finished but no Workload was found for it")
	}
	for {
		var cur sluicev1alpha1.Workload
		if err := c.Get(ctx, client.ObjectKeyFromObject(wl), &cur); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("reading workload: %w", err)
		}
		if cond := meta.FindStatusCondition(cur.Status.Conditions, sluicev1alpha1.WorkloadFinished); cond != nil && cond.Status == "True" {
			p.step("finished", "workload finished (%s)", cond.Reason)
			var cq sluicev1alpha1.ClusterQueue
			if c.Get(ctx, client.ObjectKey{Name: p.clusterQueue}, &cq) == nil &&
				cq.Status.ReservingWorkloads == 0 {
				p.step("released", "quota released: ClusterQueue %s reserves %s", cq.Name, usage(&cq))
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("workload %s did not finish in time", wl.Name)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func gated(pod *corev1.Pod) bool {
	return slices.ContainsFunc(pod.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool {
		return g.Name == podkeys.AdmissionGate
	})
}

func flavors(a *sluicev1alpha1.Admission) string {
	var out []string
	for _, psa := range a.PodSetAssignments {
		for r, f := range psa.Flavors {
			out = append(out, fmt.Sprintf("%s:%s=%s", psa.Name, r, f))
		}
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// added returns the tolerations of after that before did not have.
func added(before, after []corev1.Toleration) []corev1.Toleration {
	var out []corev1.Toleration
	for _, t := range after {
		if !slices.ContainsFunc(before, func(b corev1.Toleration) bool { return b.MatchToleration(&t) }) {
			out = append(out, t)
		}
	}
	return out
}

func usage(cq *sluicev1alpha1.ClusterQueue) string {
	var out []string
	for _, f := range cq.Status.FlavorsReservation {
		for _, r := range f.Resources {
			out = append(out, fmt.Sprintf("%s %s=%s", f.Name, r.Name, r.Total.String()))
		}
	}
	if len(out) == 0 {
		return "nothing"
	}
	return strings.Join(out, ", ")
}

func tolerations(ts []corev1.Toleration) string {
	var out []string
	for _, t := range ts {
		out = append(out, fmt.Sprintf("%s=%s:%s(%s)", t.Key, t.Value, t.Effect, t.Operator))
	}
	return "[" + strings.Join(out, " ") + "]"
}
