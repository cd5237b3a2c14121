package deploy

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/yaml"
)

// userGrant is one thing a role for people grants: a verb on a resource
// of an API group.
type userGrant struct {
	Role, Group, Resource, Verb string
}

// userGrants are the roles deploy/ gives the people sluice governs, and
// why: the table is the documentation, and deploy/ must match it exactly.
var userGrants = []struct {
	userGrant
	why string
}{
	{userGrant{"sluice-view", "sluice.dev", "localqueues", "get"}, "a namespace's viewers see its queues"},
	{userGrant{"sluice-view", "sluice.dev", "localqueues", "list"}, "a namespace's viewers see its queues"},
	{userGrant{"sluice-view", "sluice.dev", "localqueues", "watch"}, "a namespace's viewers see its queues"},
	{userGrant{"sluice-view", "sluice.dev", "workloads", "get"}, "a pod's creator sees why it waits"},
	{userGrant{"sluice-view", "sluice.dev", "workloads", "list"}, "a pod's creator sees why it waits"},
	{userGrant{"sluice-view", "sluice.dev", "workloads", "watch"}, "a pod's creator sees why it waits"},
	{userGrant{"sluice-edit", "sluice.dev", "localqueues", "create"}, "a namespace's editors manage its queues"},
	{userGrant{"sluice-edit", "sluice.dev", "localqueues", "update"}, "a namespace's editors manage its queues"},
	{userGrant{"sluice-edit", "sluice.dev", "localqueues", "patch"}, "a namespace's editors manage its queues"},
	{userGrant{"sluice-edit", "sluice.dev", "localqueues", "delete"}, "a namespace's editors manage its queues"},
	{userGrant{"sluice-edit", "sluice.dev", "localqueues", "deletecollection"}, "a namespace's editors manage its queues"},
	{userGrant{"sluice-workload-approver", "sluice.dev", "workloads", "get"}, "approvers find what waits for them"},
	{userGrant{"sluice-workload-approver", "sluice.dev", "workloads", "list"}, "approvers find what waits for them"},
	{userGrant{"sluice-workload-approver", "sluice.dev", "workloads", "watch"}, "approvers find what waits for them"},
	{userGrant{"sluice-workload-approver", "sluice.dev", "workloads", "patch"}, "approvers set the approval annotation; the policy sluice-workloads keeps the rest"},
	{userGrant{"sluice-pod-releaser", "sluice.dev", "pods", "release"}, "the permission the policy sluice-managed-pods asks of whoever removes sluice's gate or finalizer"},
	{userGrant{"sluice-pod-releaser", "", "pods", "list"}, "grouper release-all lists the managed pods"},
	{userGrant{"sluice-pod-releaser", "", "pods", "patch"}, "grouper release-all removes the gate and the finalizer"},
	{userGrant{"sluice-workload-deactivator", "sluice.dev", "workloads", "get"}, "finds the workload to deactivate"},
	{userGrant{"sluice-workload-deactivator", "sluice.dev", "workloads", "list"}, "finds the workload to deactivate"},
	{userGrant{"sluice-workload-deactivator", "sluice.dev", "workloads", "watch"}, "finds the workload to deactivate"},
	{userGrant{"sluice-workload-deactivator", "sluice.dev", "workloads", "patch"}, "writes spec.active"},
	{userGrant{"sluice-workload-deactivator", "sluice.dev", "workloads", "deactivate"}, "the permission the policy sluice-workloads asks for spec.active"},
	{userGrant{"sluice-priority-class-reader", "sluice.dev", "workloadpriorityclasses", "get"}, "a pod's creator picks a class its pods may name"},
	{userGrant{"sluice-priority-class-reader", "sluice.dev", "workloadpriorityclasses", "list"}, "a pod's creator picks a class its pods may name"},
	{userGrant{"sluice-priority-class-reader", "sluice.dev", "workloadpriorityclasses", "watch"}, "a pod's creator picks a class its pods may name"},
}

// aggregatedInto says which built-in role each role for people joins.
// The others are granted on purpose.
var aggregatedInto = map[string]string{
	"sluice-view": "view",
	"sluice-edit": "edit",
}

// TestUserRolesMatchTable compares the roles for people that deploy/
// builds (ClusterRoles no binding of deploy/ uses) with the table, and the
// built-in roles each joins.
func TestUserRolesMatchTable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, docs := render(ctx, t)
	objs, err := parseRBAC(docs)
	if err != nil {
		t.Fatal(err)
	}
	bound := map[string]bool{}
	for _, b := range objs.clusterRoleBindings {
		bound[b.RoleRef.Name] = true
	}
	for _, b := range objs.roleBindings {
		bound[b.RoleRef.Name] = true
	}
	want := map[userGrant]bool{}
	for _, g := range userGrants {
		want[g.userGrant] = true
	}
	var unexpected, missing []string
	have := map[userGrant]bool{}
	for name, cr := range objs.clusterRoles {
		if bound[name] {
			continue // a service's role: TestRBACMatchesTable judges it
		}
		for _, r := range cr.Rules {
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						ug := userGrant{name, g, res, v}
						have[ug] = true
						if !want[ug] {
							unexpected = append(unexpected, strings.Join([]string{ug.Role, ug.Verb, ug.Resource + "." + ug.Group}, " "))
						}
					}
				}
			}
			if len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
				t.Errorf("ClusterRole %s names objects or URLs; the table cannot judge it", name)
			}
		}
		if got := aggregationOf(cr); got != aggregatedInto[name] {
			t.Errorf("ClusterRole %s joins the built-in role %q, want %q", name, got, aggregatedInto[name])
		}
	}
	for _, g := range userGrants {
		if !have[g.userGrant] {
			missing = append(missing, strings.Join([]string{g.Role, g.Verb, g.Resource + "." + g.Group}, " "))
		}
	}
	slices.Sort(unexpected)
	if len(unexpected) > 0 {
		t.Errorf("deploy/ grants people what the table does not list:\n  %s", strings.Join(unexpected, "\n  "))
	}
	if len(missing) > 0 {
		t.Errorf("deploy/ does not grant people what the table lists:\n  %s", strings.Join(missing, "\n  "))
	}
}

// aggregationOf names the built-in role a ClusterRole joins by its
// aggregation label, or "" for none.
func aggregationOf(cr rbacv1.ClusterRole) string {
	var into []string
	for _, role := range []string{"admin", "edit", "view"} {
		if cr.Labels["rbac.authorization.k8s.io/aggregate-to-"+role] == "true" {
			into = append(into, role)
		}
	}
	return strings.Join(into, ",")
}

// TestPolicyScopeMatchesWebhook: the pod policy judges the namespaces the
// webhook manages, and skips the same callers (sluice's own services): a
// namespace the webhook gates and the policy does not guard would leave
// the gate open there, and one the policy guards outside sluice's could
// hold up Kueue's own controller.
func TestPolicyScopeMatchesWebhook(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, docs := render(ctx, t)
	var (
		mutating   admissionregistrationv1.MutatingWebhookConfiguration
		validating admissionregistrationv1.ValidatingWebhookConfiguration
		bindings   = map[string]admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
		policies   = map[string]admissionregistrationv1.ValidatingAdmissionPolicy{}
	)
	for _, d := range docs {
		var err error
		switch field(d, "kind: ") {
		case "MutatingWebhookConfiguration":
			err = yaml.UnmarshalStrict([]byte(d), &mutating)
		case "ValidatingWebhookConfiguration":
			err = yaml.UnmarshalStrict([]byte(d), &validating)
		case "ValidatingAdmissionPolicy":
			var p admissionregistrationv1.ValidatingAdmissionPolicy
			err = yaml.UnmarshalStrict([]byte(d), &p)
			policies[p.Name] = p
		case "ValidatingAdmissionPolicyBinding":
			var b admissionregistrationv1.ValidatingAdmissionPolicyBinding
			err = yaml.UnmarshalStrict([]byte(d), &b)
			bindings[b.Name] = b
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	pods, ok := bindings["sluice-managed-pods"]
	if !ok || pods.Spec.MatchResources == nil {
		t.Fatalf("deploy/ has no binding sluice-managed-pods with matchResources")
	}
	if len(validating.Webhooks) == 0 || len(mutating.Webhooks) == 0 {
		t.Fatalf("deploy/ has %d mutating and %d validating webhooks, want some of each", len(mutating.Webhooks), len(validating.Webhooks))
	}
	// The validating webhooks select the managed namespaces; the mutating
	// ones narrow them by the queue-defaulting opt-in, one each way.
	for _, w := range validating.Webhooks {
		if got, want := pods.Spec.MatchResources.NamespaceSelector, w.NamespaceSelector; !equality.Semantic.DeepEqual(got, want) {
			t.Errorf("binding sluice-managed-pods selects namespaces %v, the webhook %s %v: keep them equal", got, w.Name, want)
		}
	}
	for _, w := range mutating.Webhooks {
		managed := pods.Spec.MatchResources.NamespaceSelector.MatchExpressions
		if got := w.NamespaceSelector.MatchExpressions; len(got) < len(managed) || !equality.Semantic.DeepEqual(got[:len(managed)], managed) {
			t.Errorf("mutating webhook %s selects namespaces %v, not within the binding's %v", w.Name, got, managed)
		}
	}
	skip := validating.Webhooks[0].MatchConditions[0]
	for name, p := range policies {
		if len(p.Spec.MatchConditions) == 0 || p.Spec.MatchConditions[0] != skip {
			t.Errorf("policy %s: first match condition %v, want the webhook's %v", name, p.Spec.MatchConditions, skip)
		}
		if _, ok := bindings[name]; !ok {
			t.Errorf("policy %s has no binding of its name", name)
		}
		if p.Spec.FailurePolicy == nil || *p.Spec.FailurePolicy != admissionregistrationv1.Fail {
			t.Errorf("policy %s does not fail closed", name)
		}
	}
}
