package harness

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
)

// policyManifests are the admission policies that keep what decides quota
// sluice's, and the roles for the people sluice governs; hack/sluice-up.sh
// applies the same files.
var policyManifests = []string{
	"deploy/policies/*.yaml",
	"deploy/user-roles.yaml",
}

// probeNamespacePrefix names the namespaces that hold the objects that
// show the policies are enforced.
const probeNamespacePrefix = "sluice-policy-probe-"

// InstallPolicies applies the policy manifests with cfg (an admin) and
// waits until the API server enforces them: it compiles a new policy a
// moment after the object is stored, and a test that relied on it before
// then would see the door it closes still open. It must run before
// sluice's webhook is registered, which would gate its probe pod.
func InstallPolicies(ctx context.Context, cfg *rest.Config) error {
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return fmt.Errorf("creating client: %w", err)
	}
	if err := sluicev1alpha1.AddToScheme(c.Scheme()); err != nil {
		return fmt.Errorf("adding sluice's API to the scheme: %w", err)
	}
	if err := applyManifests(ctx, c, policyManifests); err != nil {
		return err
	}
	return waitPoliciesEnforced(ctx, c)
}

// waitPoliciesEnforced makes one object of each kind the policies judge,
// polls until a change each policy refuses even to an admin is refused
// (a dry run, so nothing changes), and removes the objects.
func waitPoliciesEnforced(ctx context.Context, c client.Client) error {
	// A namespace of its own each time: an earlier one may still be
	// terminating.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: probeNamespacePrefix}}
	if err := c.Create(ctx, ns); err != nil {
		return fmt.Errorf("creating a namespace for the policy probes: %w", err)
	}
	defer func() { _ = c.Delete(context.WithoutCancel(ctx), ns) }()

	pod := probePod(ns.Name)
	wl := probeWorkload(ns.Name)
	for _, obj := range []client.Object{pod, wl} {
		if err := c.Create(ctx, obj); err != nil {
			return fmt.Errorf("creating policy probe %T: %w", obj, err)
		}
		defer func() { _ = c.Delete(context.WithoutCancel(ctx), obj) }()
	}
	pollCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	probes := []struct {
		policy string
		obj    client.Object
		patch  string
	}{
		{"sluice-managed-pods", pod, `{"metadata":{"annotations":{"` + podkeys.RoleHashAnnotation + `":"00000000"}}}`},
		{"sluice-workloads", wl, `{"spec":{"queueName":"another"}}`},
	}
	for _, p := range probes {
		err := Poll(pollCtx, func() error {
			err := c.Patch(pollCtx, p.obj, client.RawPatch(types.MergePatchType, []byte(p.patch)), client.DryRunAll)
			switch {
			case err == nil:
				return fmt.Errorf("policy %s is not enforced yet", p.policy)
			case apierrors.IsForbidden(err):
				return nil
			default:
				return err // the API server may still be starting: poll on
			}
		})
		if err != nil {
			return fmt.Errorf("waiting for the API server to enforce %s: %w", p.policy, err)
		}
	}
	return nil
}

// probePod is a pod the pod policy judges: it carries the managed label
// and a role hash. Another gate than sluice's keeps it off the nodes, and
// it has no finalizer, so it goes when deleted.
func probePod(namespace string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   namespace,
			Name:        "policy-probe",
			Labels:      map[string]string{podkeys.ManagedLabel: podkeys.ManagedLabelValue},
			Annotations: map[string]string{podkeys.RoleHashAnnotation: "ffffffff"},
		},
		Spec: corev1.PodSpec{
			SchedulingGates: []corev1.PodSchedulingGate{{Name: "sluice.dev/policy-probe"}},
			Containers:      []corev1.Container{{Name: "probe", Image: "probe"}},
		},
	}
}

// probeWorkload is a Workload the workload policy judges.
func probeWorkload(namespace string) *sluicev1alpha1.Workload {
	return &sluicev1alpha1.Workload{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "policy-probe"},
		Spec: sluicev1alpha1.WorkloadSpec{
			QueueName: "probe",
			PodSets: []sluicev1alpha1.PodSet{{
				Name:     "main",
				Count:    1,
				Template: sluicev1alpha1.PodSetTemplate{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1m")}},
			}},
		},
	}
}
