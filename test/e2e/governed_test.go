package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/test/harness"
)

// The tests in this file act as the people sluice governs would: kubectl
// with the token of a namespace's user, bound to `edit` (or to a role an
// operator grants on purpose) in that namespace only, never an admin's.
// Each tries a door that was once open and must now be closed.

var (
	editPods = []harness.Access{
		{Verb: "create", Resource: "pods"}, {Verb: "patch", Resource: "pods"}, {Verb: "get", Resource: "pods"},
	}
	readSluice = []harness.Access{
		{Verb: "get", Group: "sluice.dev", Resource: "workloads"}, {Verb: "list", Group: "sluice.dev", Resource: "localqueues"},
	}
	approve = harness.Access{Verb: "patch", Group: "sluice.dev", Resource: "workloads"}
	release = harness.Access{Verb: "release", Group: "sluice.dev", Resource: "pods"}
)

// newUser makes a user of ns bound to roles and waits until want is
// allowed.
func newUser(ctx context.Context, t *testing.T, ns, name string, roles []string, want ...harness.Access) *harness.User {
	t.Helper()
	u, err := harness.NewUser(ctx, env, ns, name, roles...)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := u.WaitAllowed(wctx, want...); err != nil {
		t.Fatal(err)
	}
	return u
}

// createAs creates pod as u with kubectl, from its YAML, and reads it
// back into pod (uid included, which finds its Workload).
func createAs(ctx context.Context, t *testing.T, u *harness.User, pod *corev1.Pod) {
	t.Helper()
	if _, err := u.KubectlStdin(ctx, podYAML(t, pod), "create", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
		t.Fatal(err)
	}
}

func podYAML(t *testing.T, pod *corev1.Pod) string {
	t.Helper()
	pod = pod.DeepCopy()
	pod.APIVersion, pod.Kind = "v1", "Pod"
	out, err := yaml.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// refused runs kubectl as u and fails the test unless kubectl fails with
// output that holds every part of want.
func refused(ctx context.Context, t *testing.T, u *harness.User, want []string, args ...string) {
	t.Helper()
	out, err := u.Kubectl(ctx, args...)
	if err == nil {
		t.Fatalf("kubectl %s as %s was accepted, want it refused; it printed: %s", strings.Join(args, " "), u.Username(), out)
	}
	if !containsAll(out, want...) {
		t.Fatalf("kubectl %s as %s was refused, but not for the rule: want %q in:\n%s", strings.Join(args, " "), u.Username(), want, out)
	}
}

// accepted runs kubectl as u and fails the test if kubectl fails.
func accepted(ctx context.Context, t *testing.T, u *harness.User, args ...string) string {
	t.Helper()
	out, err := u.Kubectl(ctx, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// gateMessage is what the API server says when someone removes sluice's
// gate without the permission to release pods.
var gateMessage = []string{"sluice-managed-pods", "the gate kueue.x-k8s.io/admission is sluice's", `verb "release" on pods.sluice.dev`}

// TestGateIsSluices: in a full queue a user cannot run a second pod by
// removing its gate (nor its finalizer) by hand; someone granted the
// permission to release pods can, with `grouper release-all`, and the
// released pod runs.
func TestGateIsSluices(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ns := createNamespace(ctx, t, "gate")
	createQueues(ctx, t, ns, "gate-cq", "2")
	alice := newUser(ctx, t, ns, "alice", []string{"edit"}, editPods...)

	first, second := newPod(ns, "first", "2", "10m"), newPod(ns, "second", "1", "10m")
	createAs(ctx, t, alice, first)
	waitPod(ctx, t, first, "running", running)
	createAs(ctx, t, alice, second)
	waitWorkloadOf(ctx, t, second, "pending for quota", waitsForQuota)

	refused(ctx, t, alice, gateMessage,
		"patch", "pod", "second", "--type=json", "-p", `[{"op":"remove","path":"/spec/schedulingGates/0"}]`)
	refused(ctx, t, alice, []string{"sluice-managed-pods", "the finalizer kueue.x-k8s.io/managed is sluice's", `verb "release" on pods.sluice.dev`},
		"patch", "pod", "second", "--type=json", "-p", `[{"op":"remove","path":"/metadata/finalizers/0"}]`)
	// A strategic merge patch and a replace of the whole list take other
	// paths through the API server to the same place.
	refused(ctx, t, alice, gateMessage,
		"patch", "pod", "second", "-p", `{"spec":{"schedulingGates":[{"$patch":"delete","name":"kueue.x-k8s.io/admission"}]}}`)
	refused(ctx, t, alice, gateMessage,
		"patch", "pod", "second", "--type=json", "-p", `[{"op":"replace","path":"/spec/schedulingGates","value":[]}]`)

	var cur corev1.Pod
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(second), &cur); err != nil {
		t.Fatal(err)
	}
	if !hasGate(&cur) || !slices.Contains(cur.Finalizers, podkeys.ManagedFinalizer) {
		t.Fatalf("pod second lost sluice's gate or finalizer: gates %v finalizers %v", cur.Spec.SchedulingGates, cur.Finalizers)
	}
	waitClusterQueue(ctx, t, "gate-cq", "2 cpu reserved", func(cq *sluicev1alpha1.ClusterQueue) bool {
		r := cpuReserved(cq)
		return r.Cmp(resource.MustParse("2")) == 0
	})

	// The way out, on purpose: an operator with the permission to release
	// pods runs the documented command.
	ops := newUser(ctx, t, ns, "ops", []string{"sluice-pod-releaser"}, release,
		harness.Access{Verb: "list", Resource: "pods"}, harness.Access{Verb: "patch", Resource: "pods"})
	releaseAll(ctx, t, ops)
	released := waitPod(ctx, t, second, "released and running", func(p *corev1.Pod) bool {
		return !hasGate(p) && !slices.Contains(p.Finalizers, podkeys.ManagedFinalizer) && running(p)
	})
	if released.DeletionTimestamp != nil {
		t.Fatalf("the released pod is being deleted")
	}
}

// releaseAll runs `grouper release-all` for u's namespace with u's
// credentials.
func releaseAll(ctx context.Context, t *testing.T, u *harness.User) {
	t.Helper()
	bin := os.Getenv("SLUICE_SERVICES_BIN")
	if bin == "" {
		t.Fatal("SLUICE_SERVICES_BIN is not set: run the suite with make e2e")
	}
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "grouper"), "release-all", "--kubeconfig", u.Kubeconfig, "--namespace", u.Namespace)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("grouper release-all as %s: %v: %s", u.Username(), err, out)
	}
	if !strings.Contains(string(out), "released "+u.Namespace+"/second") {
		t.Fatalf("grouper release-all did not release the pod: %s", out)
	}
}

// TestRoleHashIsSluices: pods of one group that ask for 1 and 3 cpu and
// name one role hash of their choice become two pod sets of their true
// shapes, so a 2-cpu queue does not admit their 4 cpu; and a pod's hash
// cannot be rewritten after creation.
func TestRoleHashIsSluices(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := createNamespace(ctx, t, "hash")
	createQueues(ctx, t, ns, "hash-cq", "2")
	alice := newUser(ctx, t, ns, "alice", []string{"edit"}, editPods...)

	var pods []*corev1.Pod
	for i, cpu := range []string{"1", "3"} {
		p := newPod(ns, fmt.Sprintf("member-%d", i), cpu, "10m")
		p.Labels[podkeys.PodGroupNameLabel] = "chosen-hash"
		p.Annotations[podkeys.PodGroupTotalCountAnnotation] = "2"
		p.Annotations[podkeys.RoleHashAnnotation] = "aaaaaaaa"
		createAs(ctx, t, alice, p)
		pods = append(pods, p)
	}
	hashes := map[string]bool{}
	for _, p := range pods {
		var cur corev1.Pod
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(p), &cur); err != nil {
			t.Fatal(err)
		}
		hashes[cur.Annotations[podkeys.RoleHashAnnotation]] = true
	}
	if len(hashes) != 2 || hashes["aaaaaaaa"] {
		t.Fatalf("the pods' role hashes are %v, want two hashes sluice computed", hashes)
	}
	wl := waitWorkloadOf(ctx, t, pods[0], "pending for quota", waitsForQuota)
	var total resource.Quantity
	for _, ps := range wl.Spec.PodSets {
		q := ps.Template.Requests[corev1.ResourceCPU]
		for range ps.Count {
			total.Add(q)
		}
	}
	if len(wl.Spec.PodSets) != 2 || total.Cmp(resource.MustParse("4")) != 0 {
		t.Fatalf("the group's workload has pod sets %+v (%s cpu), want two sets of 4 cpu in all", wl.Spec.PodSets, total.String())
	}
	for _, p := range pods {
		if cur := waitPod(ctx, t, p, "gated", hasGate); cur.Spec.NodeName != "" {
			t.Fatalf("pod %s was bound", p.Name)
		}
	}
	refused(ctx, t, alice, []string{"sluice-managed-pods", "metadata.annotations[kueue.x-k8s.io/role-hash]", "cannot change"},
		"annotate", "pod", "member-1", "--overwrite", podkeys.RoleHashAnnotation+"=aaaaaaaa")
}

// TestSluiceKeysAreSluices: a user can neither create a pod with keys
// under sluice.dev/ nor add, change or remove them afterwards; keys of
// other domains, subdomains of sluice.dev included, are the user's.
func TestSluiceKeysAreSluices(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := createNamespace(ctx, t, "keys")
	createQueues(ctx, t, ns, "keys-cq", "4")
	alice := newUser(ctx, t, ns, "alice", []string{"edit"}, editPods...)

	forged := newPod(ns, "forged", "1", "10m")
	forged.Annotations[podkeys.WorkloadUIDAnnotation] = "forged"
	if _, err := alice.KubectlStdin(ctx, podYAML(t, forged), "create", "-f", "-"); err == nil ||
		!containsAll(err.Error(), "metadata.annotations[sluice.dev/workload-uid]", "only sluice may write keys under sluice.dev/") {
		t.Fatalf("creating a pod with %s: got %v, want the webhook to refuse the key", podkeys.WorkloadUIDAnnotation, err)
	}
	labelled := newPod(ns, "labelled", "1", "10m")
	labelled.Labels["sluice.dev/shard"] = "7"
	if _, err := alice.KubectlStdin(ctx, podYAML(t, labelled), "create", "-f", "-"); err == nil ||
		!containsAll(err.Error(), "metadata.labels[sluice.dev/shard]", "only sluice may write keys under sluice.dev/") {
		t.Fatalf("creating a pod with label sluice.dev/shard: got %v, want the webhook to refuse the key", err)
	}

	p := newPod(ns, "plain", "1", "10m")
	p.Annotations["nodepool.sluice.dev/pool"] = "users"
	createAs(ctx, t, alice, p)
	waitPod(ctx, t, p, "running", running)

	annotations := []string{"sluice-managed-pods", "metadata.annotations: keys under sluice.dev/ are sluice's"}
	refused(ctx, t, alice, annotations, "annotate", "pod", "plain", "--overwrite", podkeys.WorkloadAnnotation+"=another")
	refused(ctx, t, alice, annotations, "annotate", "pod", "plain", podkeys.WorkloadUIDAnnotation+"-")
	refused(ctx, t, alice, annotations, "annotate", "pod", "plain", podkeys.TraceparentAnnotation+"-")
	refused(ctx, t, alice, annotations, "annotate", "pod", "plain", "sluice.dev/released=true")
	refused(ctx, t, alice, []string{"sluice-managed-pods", "metadata.labels: keys under sluice.dev/ are sluice's"},
		"label", "pod", "plain", "sluice.dev/shard=7")
	accepted(ctx, t, alice, "annotate", "pod", "plain", "--overwrite", "nodepool.sluice.dev/pool=mine", "team.example.com/owner=alice")
}

// TestAdmittedWorkloadCannotBeEdited: an approver, who may patch Workloads
// to approve them, cannot shrink an admitted workload's pod sets (nor move
// it, reprioritise or deactivate it), and the queue keeps counting what
// runs; the approval annotation is theirs to write.
func TestAdmittedWorkloadCannotBeEdited(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := createNamespace(ctx, t, "edit-wl")
	createQueues(ctx, t, ns, "edit-wl-cq", "2")
	alice := newUser(ctx, t, ns, "alice", []string{"edit"}, append(editPods, readSluice...)...)
	bob := newUser(ctx, t, ns, "bob", []string{"sluice-workload-approver"}, approve)

	p := newPod(ns, "runs", "1", "10m")
	createAs(ctx, t, alice, p)
	waitPod(ctx, t, p, "running", running)
	wl := waitWorkloadOf(ctx, t, p, "admitted", admitted)
	ref := "workloads.sluice.dev/" + wl.Name

	refused(ctx, t, bob, []string{"spec.podSets", "podSets are immutable"},
		"patch", ref, "--type=json", "-p", `[{"op":"replace","path":"/spec/podSets/0/template/requests/cpu","value":"1m"}]`)
	refused(ctx, t, bob, []string{"spec.podSets", "podSets are immutable"},
		"patch", ref, "--type=json", "-p", `[{"op":"replace","path":"/spec/podSets/0/count","value":0}]`)
	refused(ctx, t, bob, []string{"sluice-workloads", "spec.queueName"},
		"patch", ref, "--type=merge", "-p", `{"spec":{"queueName":"elsewhere"}}`)
	refused(ctx, t, bob, []string{"sluice-workloads", "spec.priority"},
		"patch", ref, "--type=merge", "-p", `{"spec":{"priority":1000}}`)
	refused(ctx, t, bob, []string{"sluice-workloads", `spec.active: deactivating or reactivating a workload needs the verb "deactivate"`},
		"patch", ref, "--type=merge", "-p", `{"spec":{"active":false}}`)
	refused(ctx, t, bob, []string{"sluice-workloads", "under sluice.dev/ are sluice's"},
		"label", ref, sluicev1alpha1.PodGroupLabel+"=forged")
	refused(ctx, t, bob, []string{"forbidden", "workloads/status"},
		"patch", ref, "--subresource=status", "--type=merge", "-p", `{"status":{"admission":null}}`)
	accepted(ctx, t, bob, "annotate", ref, "approval.checks.sluice.dev/approved-by=bob")
	// A user with edit reads the workload, and writes nothing of it.
	if out := accepted(ctx, t, alice, "get", ref, "-o", "jsonpath={.spec.podSets[0].template.requests.cpu}"); out != "1" {
		t.Fatalf("alice reads the workload's cpu as %q, want 1", out)
	}
	refused(ctx, t, alice, []string{"forbidden", `cannot patch resource "workloads"`},
		"annotate", ref, "--overwrite", "approval.checks.sluice.dev/approved-by=alice")

	var cur sluicev1alpha1.Workload
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(wl), &cur); err != nil {
		t.Fatal(err)
	}
	if q := cur.Spec.PodSets[0].Template.Requests[corev1.ResourceCPU]; q.Cmp(resource.MustParse("1")) != 0 || !admitted(&cur) || !isTrue(cur.Spec.Active) {
		t.Fatalf("the workload changed: requests %v admitted %t active %v", cur.Spec.PodSets[0].Template.Requests, admitted(&cur), cur.Spec.Active)
	}
	waitClusterQueue(ctx, t, "edit-wl-cq", "1 cpu reserved", func(cq *sluicev1alpha1.ClusterQueue) bool {
		r := cpuReserved(cq)
		return r.Cmp(resource.MustParse("1")) == 0
	})
}

func isTrue(b *bool) bool { return b == nil || *b }

// TestRolesPeopleHave: the built-in roles of a namespace carry what their
// holders need of sluice, by aggregation: view reads LocalQueues and
// Workloads, edit also manages LocalQueues; neither writes Workloads.
func TestRolesPeopleHave(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := createNamespace(ctx, t, "roles")
	createQueues(ctx, t, ns, "roles-cq", "1")
	carol := newUser(ctx, t, ns, "carol", []string{"view"}, readSluice...)
	alice := newUser(ctx, t, ns, "alice", []string{"edit"},
		harness.Access{Verb: "create", Group: "sluice.dev", Resource: "localqueues"},
		harness.Access{Verb: "delete", Group: "sluice.dev", Resource: "localqueues"})

	if out := accepted(ctx, t, carol, "get", "localqueues.sluice.dev", "-o", "name"); !strings.Contains(out, "localqueue.sluice.dev/user-queue") {
		t.Fatalf("carol lists LocalQueues as %q", out)
	}
	accepted(ctx, t, carol, "get", "workloads.sluice.dev")
	lq := `{"apiVersion":"sluice.dev/v1alpha1","kind":"LocalQueue","metadata":{"name":"team"},"spec":{"clusterQueue":"roles-cq"}}`
	if _, err := carol.KubectlStdin(ctx, lq, "create", "-f", "-"); err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Fatalf("carol (view) creating a LocalQueue: got %v, want forbidden", err)
	}
	if _, err := alice.KubectlStdin(ctx, lq, "create", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	accepted(ctx, t, alice, "delete", "localqueues.sluice.dev", "team")
	refused(ctx, t, alice, []string{"forbidden", `cannot delete resource "workloads"`}, "delete", "workloads.sluice.dev", "anyone")
}

// TestResizeRefused: a user whose operator granted in-place resize cannot
// resize a pod sluice manages: its quota was booked for what it asked at
// creation. The pod waits in a full queue, where the API server itself
// would let its requests grow (no node has to support the resize yet),
// and keeps its role hash, so it would be admitted, and run, as booked
// for less than it asks.
func TestResizeRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := createNamespace(ctx, t, "resize")
	createQueues(ctx, t, ns, "resize-cq", "2")
	alice := newUser(ctx, t, ns, "alice", []string{"edit"}, editPods...)
	grantResize(ctx, t, ns, alice)

	first, grows := newPod(ns, "first", "2", "10m"), newPod(ns, "grows", "1", "10m")
	createAs(ctx, t, alice, first)
	waitPod(ctx, t, first, "running", running)
	createAs(ctx, t, alice, grows)
	waitWorkloadOf(ctx, t, grows, "pending for quota", waitsForQuota)
	refused(ctx, t, alice, []string{"sluice-managed-pods", "cannot be resized in place"},
		"patch", "pod", "grows", "--subresource=resize", "--type=merge", "-p",
		`{"spec":{"containers":[{"name":"main","resources":{"requests":{"cpu":"3"}}}]}}`)
	var cur corev1.Pod
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(grows), &cur); err != nil {
		t.Fatal(err)
	}
	if q := cur.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]; q.Cmp(resource.MustParse("1")) != 0 {
		t.Fatalf("the pod's cpu request is %s, want 1", q.String())
	}
}

// grantResize is what an operator does who lets u resize pods in place
// in ns: a Role with the resize subresource, bound to u.
func grantResize(ctx context.Context, t *testing.T, ns string, u *harness.User) {
	t.Helper()
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "resizer"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods/resize"}, Verbs: []string{"get", "patch", "update"}}},
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "resizer"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: u.Name}},
	}
	mustCreate(ctx, t, role)
	mustCreate(ctx, t, binding)
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := u.WaitAllowed(wctx, harness.Access{Verb: "patch", Resource: "pods", Subresource: "resize"}); err != nil {
		t.Fatal(err)
	}
}
