package deploy

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/test/testenv"
)

// grant is one thing a subject may do: a verb on a resource of an API
// group, cluster-wide or in one namespace, on every object or only on the
// named ones.
type grant struct {
	Subject  string // namespace/name of a ServiceAccount, or kind:name
	Scope    string // "cluster" or a namespace
	Group    string // "" is the core group
	Resource string // with its subresource, e.g. workloads/status
	Verb     string
	Names    string // comma-separated resourceNames; empty is every object
}

func (g grant) String() string {
	s := fmt.Sprintf("%s: %s %s.%s in %s", g.Subject, g.Verb, g.Resource, g.Group, g.Scope)
	if g.Group == "" {
		s = fmt.Sprintf("%s: %s %s in %s", g.Subject, g.Verb, g.Resource, g.Scope)
	}
	if g.Names != "" {
		s += " named " + g.Names
	}
	return s
}

// allowed is a grant with the reason the service needs it.
type allowed struct {
	grant
	why string
}

const (
	admitter = "sluice-system/sluice-admitter"
	grouper  = "sluice-system/sluice-grouper"
	webhook  = "sluice-system/sluice-webhook"
	checks   = "sluice-system/sluice-checks"
	// The budget and approval checks run on their own (state per process);
	// budget talks to no API and has no row.
	checksBudget   = "sluice-system/sluice-checks-budget"
	checksApproval = "sluice-system/sluice-checks-approval"
	cluster        = "cluster"
	system         = "sluice-system"
)

func row(sa, scope, group, resource, verb, why string) allowed {
	return allowed{grant{Subject: sa, Scope: scope, Group: group, Resource: resource, Verb: verb}, why}
}

// deployGrants is everything deploy/ lets sluice's ServiceAccounts do, and
// why: the table is the documentation, and deploy/ must match it exactly.
// sluice-checks and sluice-checks-budget talk to no API and have no row.
var deployGrants = []allowed{
	row(admitter, cluster, "sluice.dev", "workloads", "get", "reads a Workload live when its cache may lag a write (lifecycle writer)"),
	row(admitter, cluster, "sluice.dev", "workloads", "list", "its Workload informer"),
	row(admitter, cluster, "sluice.dev", "workloads", "watch", "its Workload informer"),
	row(admitter, cluster, "sluice.dev", "workloads", "create", "creates the Workload the grouper submits; it is their only writer"),
	row(admitter, cluster, "sluice.dev", "workloads", "patch", "finalizer and metadata of its Workloads"),
	row(admitter, cluster, "sluice.dev", "workloads", "delete", "deletes a pod group's finished Workload on a new run, and the Workload of a group left with no pods"),
	row(admitter, cluster, "sluice.dev", "workloads/status", "patch", "quota reservation, check states, admission, eviction"),
	row(admitter, cluster, "sluice.dev", "clusterqueues/status", "patch", "usage and pending counts of each ClusterQueue"),
	row(admitter, cluster, "sluice.dev", "cohorts/status", "patch", "usage, borrowed and lent quota of each Cohort, and its loop condition"),
	row(admitter, cluster, "sluice.dev", "localqueues/status", "patch", "usage and pending counts of each LocalQueue"),
	row(admitter, cluster, "sluice.dev", "admissionchecks/status", "patch", "the Active condition its provider probes set"),
	row(admitter, cluster, "sluice.dev", "clusterqueues", "list", "ClusterQueue informer"),
	row(admitter, cluster, "sluice.dev", "clusterqueues", "watch", "ClusterQueue informer"),
	row(admitter, cluster, "sluice.dev", "cohorts", "list", "Cohort informer"),
	row(admitter, cluster, "sluice.dev", "cohorts", "watch", "Cohort informer"),
	row(admitter, cluster, "sluice.dev", "localqueues", "list", "LocalQueue informer"),
	row(admitter, cluster, "sluice.dev", "localqueues", "watch", "LocalQueue informer"),
	row(admitter, cluster, "sluice.dev", "admissionchecks", "list", "AdmissionCheck informer"),
	row(admitter, cluster, "sluice.dev", "admissionchecks", "watch", "AdmissionCheck informer"),
	row(admitter, cluster, "sluice.dev", "resourceflavors", "list", "ResourceFlavor informer"),
	row(admitter, cluster, "sluice.dev", "resourceflavors", "watch", "ResourceFlavor informer"),
	row(admitter, cluster, "sluice.dev", "workloadpriorityclasses", "list", "WorkloadPriorityClass informer: a new Workload is queued at its class's value"),
	row(admitter, cluster, "sluice.dev", "workloadpriorityclasses", "watch", "WorkloadPriorityClass informer: a new Workload is queued at its class's value"),
	row(admitter, cluster, "sluice.dev", "workloadpriorityclasses", "get", "reads a class live that its cache has not seen yet"),
	row(admitter, cluster, "", "namespaces", "list", "Namespace informer: ClusterQueues' namespace selectors match its labels"),
	row(admitter, cluster, "", "namespaces", "watch", "Namespace informer: ClusterQueues' namespace selectors match its labels"),
	row(admitter, cluster, "events.k8s.io", "events", "create", "events on Workloads, queues and checks"),
	row(admitter, cluster, "events.k8s.io", "events", "patch", "a repeated event is counted in its series"),
	row(admitter, system, "coordination.k8s.io", "leases", "get", "leader election reads the Lease"),
	row(admitter, system, "coordination.k8s.io", "leases", "create", "leader election creates the Lease the first time"),
	row(admitter, system, "coordination.k8s.io", "leases", "update", "leader election takes and renews the Lease, and releases it on shutdown"),
	row(admitter, system, "", "events", "create", "leader election records \"became leader\" on the Lease (core Events)"),
	row(admitter, system, "", "events", "patch", "a repeated leader-election event is aggregated"),
	row(admitter, system, "", "secrets", "list", "Secret informer of its own namespace: the CA bundles and client certificates AdmissionChecks' spec.tls names"),
	row(admitter, system, "", "secrets", "watch", "Secret informer: a rotated or fixed Secret applies to the next provider call and re-probes the checks that name it"),

	row(grouper, cluster, "", "pods", "get", "confirms live that a pod the cache shows gated still is, before reporting its workload stopped"),
	row(grouper, cluster, "", "pods", "list", "managed-pod informer, and a live list before calling a group empty"),
	row(grouper, cluster, "", "pods", "watch", "managed-pod informer"),
	row(grouper, cluster, "", "pods", "patch", "removes the scheduling gate, adds and removes the finalizer"),
	row(grouper, cluster, "", "pods", "delete", "deletes the pods of an evicted or deactivated workload"),
	row(grouper, cluster, "", "pods/status", "patch", "the DisruptionTarget condition before an eviction"),
	row(grouper, cluster, "sluice.dev", "workloads", "get", "reads a Workload's pod sets to say why a pod does not fit its pod set"),
	row(grouper, cluster, "sluice.dev", "workloads", "list", "metadata informer of pod groups' Workloads"),
	row(grouper, cluster, "sluice.dev", "workloads", "watch", "metadata informer of pod groups' Workloads"),
	row(grouper, cluster, "scheduling.k8s.io", "podgroups", "get", "reads a group's PodGroup when its create finds the name taken"),
	row(grouper, cluster, "scheduling.k8s.io", "podgroups", "create", "the scheduler gang of a KEP-976 group (webhook --gang-scheduling)"),
	row(grouper, cluster, "events.k8s.io", "events", "create", "events on pods"),
	row(grouper, cluster, "events.k8s.io", "events", "patch", "a repeated event is counted in its series"),

	row(webhook, cluster, "", "namespaces", "list", "metadata informer: which namespaces are managed"),
	row(webhook, cluster, "", "namespaces", "watch", "metadata informer: which namespaces are managed"),
	row(webhook, cluster, "", "pods", "list", "informer of the pods that name a group role, to refuse workers a group has no room for"),
	row(webhook, cluster, "", "pods", "watch", "informer of the pods that name a group role"),
	row(webhook, cluster, "sluice.dev", "localqueues", "list", "metadata informer of default LocalQueues"),
	row(webhook, cluster, "sluice.dev", "localqueues", "watch", "metadata informer of default LocalQueues"),
	row(webhook, cluster, "sluice.dev", "workloadpriorityclasses", "get", "reads live a class its cache has not seen yet before refusing a pod that names it"),
	row(webhook, cluster, "sluice.dev", "workloadpriorityclasses", "list", "metadata informer of WorkloadPriorityClasses: a queued pod must name one that exists"),
	row(webhook, cluster, "sluice.dev", "workloadpriorityclasses", "watch", "metadata informer of WorkloadPriorityClasses"),
	row(webhook, cluster, "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "list", "warns at start when Kueue's pod webhook is installed too"),
	named(row(webhook, cluster, "apiextensions.k8s.io", "customresourcedefinitions", "list", "--owners=auto: metadata informer of Kueue's Workload CRD, selected by name"), "workloads.kueue.x-k8s.io"),
	named(row(webhook, cluster, "apiextensions.k8s.io", "customresourcedefinitions", "watch", "--owners=auto: Kueue installed or removed while the webhook runs"), "workloads.kueue.x-k8s.io"),
	row(checksApproval, cluster, "sluice.dev", "workloads", "list", "metadata informer of Workloads: their approval annotation"),
	row(checksApproval, cluster, "sluice.dev", "workloads", "watch", "metadata informer of Workloads: an approval given or withdrawn"),
}

// localGrants are what hack/local-rbac.yaml adds for local runs only:
// the webhook's self-registration (--self-register, --unregister-on-exit).
var localGrants = []allowed{
	row(webhook, cluster, "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "create", "self-registration creates its configuration"),
	row(webhook, cluster, "admissionregistration.k8s.io", "validatingwebhookconfigurations", "create", "self-registration creates its configuration"),
	named(row(webhook, cluster, "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "get", "self-registration reads its configuration to update it"), "sluice-webhook"),
	named(row(webhook, cluster, "admissionregistration.k8s.io", "validatingwebhookconfigurations", "get", "self-registration reads its configuration to update it"), "sluice-webhook"),
	named(row(webhook, cluster, "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "update", "self-registration points it at this run's URL and CA"), "sluice-webhook"),
	named(row(webhook, cluster, "admissionregistration.k8s.io", "validatingwebhookconfigurations", "update", "self-registration points it at this run's URL and CA"), "sluice-webhook"),
	named(row(webhook, cluster, "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "delete", "--unregister-on-exit removes it"), "sluice-webhook"),
	named(row(webhook, cluster, "admissionregistration.k8s.io", "validatingwebhookconfigurations", "delete", "--unregister-on-exit removes it"), "sluice-webhook"),
}

func named(a allowed, names string) allowed {
	a.Names = names
	return a
}

// TestRBACMatchesTable compares what deploy/ (built by kustomize) and
// hack/local-rbac.yaml grant sluice's ServiceAccounts with the tables.
func TestRBACMatchesTable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, docs := render(ctx, t)
	objs, err := parseRBAC(docs)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := objs.serviceAccounts, []string{admitter, checks, checksApproval, checksBudget, grouper, webhook}; !slices.Equal(got, want) {
		t.Errorf("deploy/ builds ServiceAccounts %v, want %v", got, want)
	}
	compare(t, "deploy/", objs.grants(), deployGrants)

	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	local, err := os.ReadFile(filepath.Join(root, "hack", "local-rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	localObjs, err := parseRBAC(strings.Split(string(local), "\n---\n"))
	if err != nil {
		t.Fatal(err)
	}
	compare(t, "hack/local-rbac.yaml", localObjs.grants(), localGrants)
}

// compare fails with every grant that is in got and not in the table, and
// every one the table has and got lacks.
func compare(t *testing.T, source string, got []grant, table []allowed) {
	t.Helper()
	want := map[grant]bool{}
	for _, a := range table {
		if want[a.grant] {
			t.Errorf("table lists %v twice", a.grant)
		}
		want[a.grant] = true
	}
	have := map[grant]bool{}
	var unexpected, missing []string
	for _, g := range got {
		have[g] = true
		if !want[g] {
			unexpected = append(unexpected, g.String())
		}
	}
	for _, a := range table {
		if !have[a.grant] {
			missing = append(missing, a.grant.String())
		}
	}
	if len(unexpected) > 0 {
		slices.Sort(unexpected)
		t.Errorf("%s grants what the table does not list (remove it, or add it to the table with the reason the service needs it):\n  %s",
			source, strings.Join(slices.Compact(unexpected), "\n  "))
	}
	if len(missing) > 0 {
		t.Errorf("%s does not grant what the table lists:\n  %s", source, strings.Join(missing, "\n  "))
	}
}

// rbacObjects are the RBAC objects and ServiceAccounts of a manifest set.
type rbacObjects struct {
	serviceAccounts     []string // namespace/name, sorted
	clusterRoles        map[string]rbacv1.ClusterRole
	roles               map[string]rbacv1.Role // by namespace/name
	clusterRoleBindings []rbacv1.ClusterRoleBinding
	roleBindings        []rbacv1.RoleBinding
}

// parseRBAC reads the RBAC objects and ServiceAccounts of YAML documents;
// it refuses what it cannot judge (an aggregated ClusterRole).
func parseRBAC(docs []string) (rbacObjects, error) {
	o := rbacObjects{clusterRoles: map[string]rbacv1.ClusterRole{}, roles: map[string]rbacv1.Role{}}
	for _, d := range docs {
		var head struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(d), &head); err != nil {
			return o, fmt.Errorf("parsing a document: %w", err)
		}
		var err error
		switch head.Kind {
		case "ServiceAccount":
			o.serviceAccounts = append(o.serviceAccounts, head.Metadata.Namespace+"/"+head.Metadata.Name)
		case "ClusterRole":
			var cr rbacv1.ClusterRole
			if err = yaml.UnmarshalStrict([]byte(d), &cr); err == nil && cr.AggregationRule != nil {
				err = fmt.Errorf("ClusterRole %s aggregates other roles: list its rules instead", cr.Name)
			}
			o.clusterRoles[cr.Name] = cr
		case "Role":
			var r rbacv1.Role
			err = yaml.UnmarshalStrict([]byte(d), &r)
			o.roles[r.Namespace+"/"+r.Name] = r
		case "ClusterRoleBinding":
			var b rbacv1.ClusterRoleBinding
			err = yaml.UnmarshalStrict([]byte(d), &b)
			o.clusterRoleBindings = append(o.clusterRoleBindings, b)
		case "RoleBinding":
			var b rbacv1.RoleBinding
			err = yaml.UnmarshalStrict([]byte(d), &b)
			o.roleBindings = append(o.roleBindings, b)
		}
		if err != nil {
			return o, fmt.Errorf("%s %s: %w", head.Kind, head.Metadata.Name, err)
		}
	}
	slices.Sort(o.serviceAccounts)
	return o, nil
}

// grants expands every binding into the grants of its role's rules, one
// per subject, API group, resource and verb. A binding to a role that is
// not in the manifests grants what that role holds in the cluster, which
// the table cannot judge: it shows up as the role's name.
func (o rbacObjects) grants() []grant {
	var out []grant
	for _, b := range o.clusterRoleBindings {
		rules, ok := o.clusterRoles[b.RoleRef.Name]
		out = append(out, expand(b.Subjects, cluster, rules.Rules, ok, "ClusterRole "+b.RoleRef.Name)...)
	}
	for _, b := range o.roleBindings {
		var rules []rbacv1.PolicyRule
		var ok bool
		if b.RoleRef.Kind == "ClusterRole" {
			var cr rbacv1.ClusterRole
			cr, ok = o.clusterRoles[b.RoleRef.Name]
			rules = cr.Rules
		} else {
			var r rbacv1.Role
			r, ok = o.roles[b.Namespace+"/"+b.RoleRef.Name]
			rules = r.Rules
		}
		out = append(out, expand(b.Subjects, b.Namespace, rules, ok, b.RoleRef.Kind+" "+b.RoleRef.Name)...)
	}
	return out
}

func expand(subjects []rbacv1.Subject, scope string, rules []rbacv1.PolicyRule, known bool, role string) []grant {
	var out []grant
	for _, s := range subjects {
		subject := s.Kind + ":" + s.Name
		if s.Kind == rbacv1.ServiceAccountKind {
			subject = s.Namespace + "/" + s.Name
		}
		if !known {
			out = append(out, grant{Subject: subject, Scope: scope, Resource: "(everything " + role + " holds, which deploy/ does not define)"})
			continue
		}
		for _, r := range rules {
			names := strings.Join(r.ResourceNames, ",")
			for _, url := range r.NonResourceURLs {
				for _, v := range r.Verbs {
					out = append(out, grant{Subject: subject, Scope: scope, Resource: "URL " + url, Verb: v})
				}
			}
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						out = append(out, grant{Subject: subject, Scope: scope, Group: g, Resource: res, Verb: v, Names: names})
					}
				}
			}
		}
	}
	return out
}
