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
	MutatingWebhookName   = "mutate.pods.sluice.dev"
	ValidatingWebhookName = "validate.pods.sluice.dev"
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
	// MutatePath and ValidatePath are the handlers' HTTP paths.
	MutatePath, ValidatePath string
	// Namespaces selects the namespaces whose pods are sent to the webhook.
	Namespaces *metav1.LabelSelector
	// SystemNamespace is the namespace of sluice's own service accounts,
	// whose pod updates validation skips.
	SystemNamespace string
}

// QueueingLabels and QueueingAnnotations are the keys validation judges; an
// update that changes none of them is not sent to the webhook.
var (
	QueueingLabels      = []string{podkeys.QueueNameLabel, podkeys.PodGroupNameLabel, podkeys.PodGroupRoleLabel, podkeys.ManagedLabel}
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

// Mutating returns the configuration of the mutating webhook: pod CREATE
// only, failing closed. It also validates the created pod, and is reinvoked
// if a later mutating webhook changes the pod, so validation sees the final
// object.
func Mutating(o Options) *admissionregistrationv1.MutatingWebhookConfiguration {
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: o.Name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    MutatingWebhookName,
			ClientConfig:            o.clientConfig(o.MutatePath),
			Rules:                   podRule(admissionregistrationv1.Create),
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
			NamespaceSelector:       o.Namespaces,
			ObjectSelector:          &metav1.LabelSelector{},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds:          ptr.To[int32](10),
			AdmissionReviewVersions: []string{"v1"},
			ReinvocationPolicy:      ptr.To(admissionregistrationv1.IfNeededReinvocationPolicy),
		}},
	}
}

// Validating returns the configuration of the validating webhook: pod
// UPDATE only (the mutating webhook validates CREATE), failing closed,
// skipping sluice's own service accounts and updates that leave every
// queueing key alone.
func Validating(o Options) *admissionregistrationv1.ValidatingWebhookConfiguration {
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: o.Name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:              ValidatingWebhookName,
			ClientConfig:      o.clientConfig(o.ValidatePath),
			Rules:             podRule(admissionregistrationv1.Update),
			FailurePolicy:     ptr.To(admissionregistrationv1.Fail),
			MatchPolicy:       ptr.To(admissionregistrationv1.Equivalent),
			NamespaceSelector: o.Namespaces,
			ObjectSelector:    &metav1.LabelSelector{},
			MatchConditions: []admissionregistrationv1.MatchCondition{
				{Name: "not-from-sluice", Expression: SkipOwnServiceAccounts(o.SystemNamespace)},
				{Name: "queueing-keys-may-change", Expression: OnlyQueueingChanges()},
			},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds:          ptr.To[int32](10),
			AdmissionReviewVersions: []string{"v1"},
		}},
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
			if wh.Name == MutatingWebhookName || !coversPods(wh.Rules) || !looksLikeKueue(cfg.Name, wh) {
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
