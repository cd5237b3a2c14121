package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
)

// approvalCheck is the AdmissionCheck of deploy/samples/approval.yaml.
const approvalCheck = "approval"

// runApproval creates the pod of path in a queue that needs a person's
// approval, prints the approval check's message, runs the command it
// names with kubectl, as a person would, and follows the pod until it has
// finished.
func runApproval(ctx context.Context, c client.WithWatch, path, kubectl, kubeconfig string) error {
	pod, err := readPod(path)
	if err != nil {
		return err
	}
	if err := deletePod(ctx, c, pod); err != nil {
		return err
	}
	start := time.Now()
	if err := c.Create(ctx, pod); err != nil {
		return fmt.Errorf("creating pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	fmt.Printf("\ncreated pod %s/%s in queue %q, whose ClusterQueue needs a person's approval\n",
		pod.Namespace, pod.Name, pod.Labels[podkeys.QueueNameLabel])

	wl, message, err := awaitApprovalRequest(ctx, c, pod)
	if err != nil {
		return err
	}
	fmt.Printf("  %6.2fs  Workload %s waits: %s\n", time.Since(start).Seconds(), wl.Name, message)
	command, ok := approveCommand(message)
	if !ok {
		return fmt.Errorf("the approval check's message names no kubectl command: %q", message)
	}
	fmt.Printf("  %6.2fs  approving as it says: %s\n", time.Since(start).Seconds(), command)
	// The message's command begins with "kubectl" and ends with $USER: run
	// it through the shell with this run's kubectl and kubeconfig.
	sh := exec.CommandContext(ctx, "sh", "-c", strings.Replace(command, "kubectl", `"$KUBECTL"`, 1))
	sh.Env = append(os.Environ(), "KUBECTL="+kubectl)
	if kubeconfig != "" {
		sh.Env = append(sh.Env, "KUBECONFIG="+kubeconfig)
	}
	if out, err := sh.CombinedOutput(); err != nil {
		return fmt.Errorf("running %q: %w\n%s", command, err, out)
	}
	p := &progress{start: start, seen: map[string]bool{}, initialTolerations: pod.Spec.Tolerations}
	return p.follow(ctx, c, pod)
}

// awaitApprovalRequest waits until the Workload of pod shows the approval
// check's message, and returns both.
func awaitApprovalRequest(ctx context.Context, c client.Client, pod *corev1.Pod) (*sluicev1alpha1.Workload, string, error) {
	for {
		var list sluicev1alpha1.WorkloadList
		if err := c.List(ctx, &list, client.InNamespace(pod.Namespace)); err != nil {
			return nil, "", fmt.Errorf("listing workloads: %w", err)
		}
		for i := range list.Items {
			wl := &list.Items[i]
			if !ownedBy(wl, pod) {
				continue
			}
			for _, st := range wl.Status.AdmissionChecks {
				if st.Name == approvalCheck && strings.Contains(st.Message, "kubectl annotate") {
					return wl, st.Message, nil
				}
			}
			if meta.IsStatusConditionTrue(wl.Status.Conditions, sluicev1alpha1.WorkloadAdmitted) {
				return nil, "", fmt.Errorf("workload %s was admitted before anyone approved it", wl.Name)
			}
		}
		select {
		case <-ctx.Done():
			return nil, "", fmt.Errorf("the approval check asked for no approval in time; see .local/logs/")
		case <-time.After(200 * time.Millisecond): // poll interval
		}
	}
}

// approveCommand cuts the kubectl command out of the approval check's
// message ("…; to approve, run: kubectl annotate …").
func approveCommand(message string) (string, bool) {
	i := strings.Index(message, "kubectl annotate ")
	if i < 0 {
		return "", false
	}
	return strings.TrimSpace(message[i:]), true
}
