// Package registration builds the webhook's MutatingWebhookConfiguration and
// ValidatingWebhookConfiguration and applies them, for running the webhook
// outside a cluster; in a cluster the same objects come from deploy/.
package registration

import (
	"context"
	"fmt"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/sluice-dev/sluice/pkg/podkeys"
)

// Names of the individual webhooks inside the configurations.
const (
	// MutatingWebhookName queues the pods that name a queue, in managed
	// namespaces that did not opt in to defaulting.
	MutatingWebhookName = "mutate.pods.sluice.dev"
	// DefaultingWebhookName queues every pod of the managed namespaces that
	// opted in to defaulting: a pod without a queue goes to the LocalQueue
	// named default.
	DefaultingWebhookName = "default.pods.sluice.dev"
	// ValidatingWebhookName judges updates of the pods sluice manages.
	ValidatingWebhookName = "validate.pods.sluice.dev"
	// UnqueuedWebhookName refuses new pods that carry sluice's managed
	// label but no queue.
	UnqueuedWebhookName = "unqueued.pods.sluice.dev"
)

// DefaultingLabel, set to DefaultingEnabled on a namespace by a cluster
// admin, opts the namespace in to queue defaulting. Namespace labels are
// not the namespace users' to change, so they cannot opt out of quota.
const (
	DefaultingLabel   = "sluice.dev/queue-defaulting"
	DefaultingEnabled = "enabled"
)

// Options describe where the API server reaches the webhook and which
// requests it sends.
type Options struct {
	// Name of both configuration objects.
	Name string
	// URL is the base URL of the webhook server (https://host:port) when it
	// runs outside the cluster. Either URL or Service is set.
	URL string
	// Service is the in-cluster Service in front of the webhook; its Path is
	// filled in per webhook.
	Service *admissionregistrationv1.ServiceReference
	// CABundle is the PEM CA certificate the API server trusts the webhook's
	// serving certificate with.
	CABundle []byte
	// MutatePath, DefaultPath and ValidatePath are the handlers' HTTP
	// paths.
	MutatePath, DefaultPath, ValidatePath string
	// Namespaces selects the namespaces whose pods are sent to the webhook.
	Namespaces *metav1.LabelSelector
	// SystemNamespace is the namespace of sluice's own service accounts,
	// whose pod updates validation skips.
	SystemNamespace string
}

// QueueingLabels and QueueingAnnotations are the keys validation judges; an
// update that changes none of them is not sent to the webhook.
var (
	QueueingLabels = []string{
		podkeys.QueueNameLabel, podkeys.PodGroupNameLabel, podkeys.PodGroupRoleLabel, podkeys.ManagedLabel,
		podkeys.PriorityClassLabel, podkeys.MaxExecTimeLabel,
	}
	QueueingAnnotations = []string{podkeys.PodGroupTotalCountAnnotation, podkeys.PodGroupSetsAnnotation, podkeys.RetriableInGroupAnnotation}
)

// SkipOwnServiceAccounts is the CEL match condition that leaves out requests
// made by sluice's own services, which only write keys sluice owns.
func SkipOwnServiceAccounts(systemNamespace string) string {
	return fmt.Sprintf("!request.userInfo.username.startsWith(%q)", "system:serviceaccount:"+systemNamespace+":")
}

// OnlyQueueingChanges is the CEL match condition that keeps every CREATE
// but only those UPDATEs that add, remove or change a queueing key.
func OnlyQueueingChanges() string {
	var changed []string
	for _, k := range QueueingLabels {
		changed = append(changed, fmt.Sprintf("object.metadata.?labels[?%q] != oldObject.metadata.?labels[?%q]", k, k))
	}
	for _, k := range QueueingAnnotations {
		changed = append(changed, fmt.Sprintf("object.metadata.?annotations[?%q] != oldObject.metadata.?annotations[?%q]", k, k))
	}
	return "request.operation != 'UPDATE' || " + strings.Join(changed, " || ")
}

func (o Options) clientConfig(path string) admissionregistrationv1.WebhookClientConfig {
	cc := admissionregistrationv1.WebhookClientConfig{CABundle: o.CABundle}
	if o.Service != nil {
		svc := *o.Service
		svc.Path = ptr.To(path)
		cc.Service = &svc
	} else {
		cc.URL = ptr.To(strings.TrimSuffix(o.URL, "/") + path)
	}
	return cc
}

func podRule(ops ...admissionregistrationv1.OperationType) []admissionregistrationv1.RuleWithOperations {
	return []admissionregistrationv1.RuleWithOperations{{
		Operations: ops,
		Rule: admissionregistrationv1.Rule{
			APIGroups:   []string{""},
			APIVersions: []string{"v1"},
			Resources:   []string{"pods"},
			Scope:       ptr.To(admissionregistrationv1.NamespacedScope),
		},
	}}
}

// with returns a copy of sel that also requires reqs.
func with(sel *metav1.LabelSelector, reqs ...metav1.LabelSelectorRequirement) *metav1.LabelSelector {
	out := &metav1.LabelSelector{}
	if sel != nil {
		out = sel.DeepCopy()
	}
	out.MatchExpressions = append(out.MatchExpressions, reqs...)
	return out
}

func exists(key string) metav1.LabelSelectorRequirement {
	return metav1.LabelSelectorRequirement{Key: key, Operator: metav1.LabelSelectorOpExists}
}

func doesNotExist(key string) metav1.LabelSelectorRequirement {
	return metav1.LabelSelectorRequirement{Key: key, Operator: metav1.LabelSelectorOpDoesNotExist}
}

// defaulting selects the namespaces that opted in to queue defaulting, or,
// with NotIn, those that did not.
func defaulting(op metav1.LabelSelectorOperator) metav1.LabelSelectorRequirement {
	return metav1.LabelSelectorRequirement{Key: DefaultingLabel, Operator: op, Values: []string{DefaultingEnabled}}
}

// Mutating returns the configuration of the mutating webhooks, pod CREATE
// only, failing closed. The API server calls them only for pods sluice is
// asked to queue, so a webhook that is down stops no other pod:
//
//   - MutatingWebhookName, in managed namespaces that did not opt in to
//     defaulting, for the pods that name a queue;
//   - DefaultingWebhookName, in managed namespaces that opted in, for every
//     pod: there a pod without a queue goes to the LocalQueue default, and
//     a namespace that asked for every pod to be queued must not see pods
//     escape quota while the webhook is down.
//
// The two never both match one pod, so a pod costs one call. Selecting
// every pod of an opted-in namespace, rather than only those without a
// queue, keeps the defaulting webhook matching the pod it labelled: the
// API server evaluates selectors again on reinvocation.
//
// Both validate the created pod too, and are reinvoked if a later mutating
// webhook changes the pod, so validation sees the final object.
func Mutating(o Options) *admissionregistrationv1.MutatingWebhookConfiguration {
	hook := func(name, path string, ns, obj *metav1.LabelSelector) admissionregistrationv1.MutatingWebhook {
		return admissionregistrationv1.MutatingWebhook{
			Name:                    name,
			ClientConfig:            o.clientConfig(path),
			Rules:                   podRule(admissionregistrationv1.Create),
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
			NamespaceSelector:       ns,
			ObjectSelector:          obj,
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds:          ptr.To[int32](10),
			AdmissionReviewVersions: []string{"v1"},
			ReinvocationPolicy:      ptr.To(admissionregistrationv1.IfNeededReinvocationPolicy),
		}
	}
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: o.Name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{
			hook(MutatingWebhookName, o.MutatePath,
				with(o.Namespaces, defaulting(metav1.LabelSelectorOpNotIn)),
				with(nil, exists(podkeys.QueueNameLabel))),
			hook(DefaultingWebhookName, o.DefaultPath,
				with(o.Namespaces, defaulting(metav1.LabelSelectorOpIn)),
				&metav1.LabelSelector{}),
		},
	}
}

// Validating returns the configuration of the validating webhooks, failing
// closed, in managed namespaces:
//
//   - ValidatingWebhookName judges pod UPDATEs (the mutating webhooks
//     validate CREATE) of the pods that carry the managed label, which
//     every pod sluice queues has; on UPDATE the API server matches the
//     selector against the old and the new pod, so removing or adding the
//     label is judged too. It skips sluice's own service accounts and
//     updates that leave every queueing key alone.
//   - UnqueuedWebhookName refuses the CREATE of a pod that carries the
//     managed label but names no queue: the grouper follows every pod
//     labelled managed, and such a pod reaches no mutating webhook.
func Validating(o Options) *admissionregistrationv1.ValidatingWebhookConfiguration {
	hook := func(name string, op admissionregistrationv1.OperationType, obj *metav1.LabelSelector) admissionregistrationv1.ValidatingWebhook {
		return admissionregistrationv1.ValidatingWebhook{
			Name:                    name,
			ClientConfig:            o.clientConfig(o.ValidatePath),
			Rules:                   podRule(op),
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
			NamespaceSelector:       o.Namespaces,
			ObjectSelector:          obj,
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds:          ptr.To[int32](10),
			AdmissionReviewVersions: []string{"v1"},
		}
	}
	update := hook(ValidatingWebhookName, admissionregistrationv1.Update, with(nil, exists(podkeys.ManagedLabel)))
	update.MatchConditions = []admissionregistrationv1.MatchCondition{
		{Name: "not-from-sluice", Expression: SkipOwnServiceAccounts(o.SystemNamespace)},
		{Name: "queueing-keys-may-change", Expression: OnlyQueueingChanges()},
	}
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: o.Name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{
			update,
			hook(UnqueuedWebhookName, admissionregistrationv1.Create,
				with(nil, exists(podkeys.ManagedLabel), doesNotExist(podkeys.QueueNameLabel))),
		},
	}
}

// Apply creates both configurations or brings existing ones up to date.
func Apply(ctx context.Context, c client.Client, o Options) error {
	want := Mutating(o)
	m := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: o.Name}}
	if _, err := controllerutil.CreateOrUpdate(ctx, c, m, func() error { m.Webhooks = want.Webhooks; return nil }); err != nil {
		return fmt.Errorf("apply MutatingWebhookConfiguration %s: %w", o.Name, err)
	}
	wantV := Validating(o)
	v := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: o.Name}}
	if _, err := controllerutil.CreateOrUpdate(ctx, c, v, func() error { v.Webhooks = wantV.Webhooks; return nil }); err != nil {
		return fmt.Errorf("apply ValidatingWebhookConfiguration %s: %w", o.Name, err)
	}
	return nil
}

// Remove deletes both configurations; missing ones are fine.
func Remove(ctx context.Context, c client.Client, name string) error {
	for _, obj := range []client.Object{
		&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}},
		&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}},
	} {
		if err := c.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete %T %s: %w", obj, name, err)
		}
	}
	return nil
}

// ForeignPodWebhooks lists the mutating webhooks, other than sluice's own,
// that look like Kueue's pod integration: they read the same pod keys, so
// the two must never manage the same namespaces.
func ForeignPodWebhooks(ctx context.Context, c client.Client) ([]string, error) {
	var list admissionregistrationv1.MutatingWebhookConfigurationList
	if err := c.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("list mutating webhook configurations: %w", err)
	}
	var found []string
	for _, cfg := range list.Items {
		for _, wh := range cfg.Webhooks {
			if wh.Name == MutatingWebhookName || wh.Name == DefaultingWebhookName || !coversPods(wh.Rules) || !looksLikeKueue(cfg.Name, wh) {
				continue
			}
			found = append(found, cfg.Name+"/"+wh.Name)
		}
	}
	return found, nil
}

func coversPods(rules []admissionregistrationv1.RuleWithOperations) bool {
	return slices.ContainsFunc(rules, func(r admissionregistrationv1.RuleWithOperations) bool {
		return slices.Contains(r.APIGroups, "") && (slices.Contains(r.Resources, "pods") || slices.Contains(r.Resources, "*"))
	})
}

func looksLikeKueue(configName string, wh admissionregistrationv1.MutatingWebhook) bool {
	if strings.Contains(configName, "kueue") || strings.Contains(wh.Name, "kueue") {
		return true
	}
	svc := wh.ClientConfig.Service
	return svc != nil && strings.Contains(svc.Namespace, "kueue")
}

// DefaultNamespaces is the managed-namespaces selector used when none is
// configured: every namespace except kube-system and sluice's own.
func DefaultNamespaces(systemNamespace string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key:      corev1.LabelMetadataName,
		Operator: metav1.LabelSelectorOpNotIn,
		Values:   []string{metav1.NamespaceSystem, systemNamespace},
	}}}
}
