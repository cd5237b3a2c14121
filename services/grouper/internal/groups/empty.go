package groups

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	sluicev1 "github.com/sluice-dev/sluice/gen/sluice/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/crashpoint"
	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/services/grouper/internal/keyqueue"
	"github.com/sluice-dev/sluice/services/grouper/internal/workload"
)

// GroupWorkload is the metadata of a pod group's Workload, as the grouper
// caches it: the cache holds only Workloads with the pod-group label (see
// GroupWorkloadSelector), and only their metadata.
func GroupWorkload() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("Workload"))
	return m
}

// emptyGroups notices pod groups whose pods are all gone and tells the
// admitter, which deletes their Workload or, for a group an eviction
// stopped, waits for the pods to come back. A group that holds quota gets
// a replacement window: the admitter answers with its end, and the group
// is looked at again then, and reported again if it is still empty; that
// report is what deletes its Workload. A group Workload has no owners, so
// this is what ends it. It looks at a group when its Workload changes
// (and at every group Workload when the grouper starts, so a report lost
// in a crash, or a window's end missed, is made again), when one of its
// pods is deleted, and when a window ends.
type emptyGroups struct{ p *Path }

// windowRecheckMin is the least wait before a group whose replacement
// window is open is looked at again: an admitter whose clock runs ahead of
// the grouper's may answer with an end that has passed here already.
const windowRecheckMin = time.Second

// SetupEmptyGroups registers the controller of groups whose pods are all
// gone, woken also by gone: the groups that lost a pod.
func (p *Path) SetupEmptyGroups(mgr ctrl.Manager, gone <-chan event.GenericEvent) error {
	err := ctrl.NewControllerManagedBy(mgr).
		Named("pod-groups").
		For(GroupWorkload()).
		WatchesRawSource(source.Channel(gone, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{
			RateLimiter: keyqueue.Backoff[reconcile.Request](),
		}).
		Complete(&emptyGroups{p: p})
	if err != nil {
		return fmt.Errorf("set up pod group controller: %w", err)
	}
	return nil
}

// Reconcile reports the group named by req when it has no pod left.
func (g *emptyGroups) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	p := g.p
	key := workload.Key{Namespace: req.Namespace, Name: req.Name}
	if !p.Shard.Owns(key.Namespace, key.Name) {
		return reconcile.Result{}, nil
	}
	wl := GroupWorkload()
	if err := p.Client.Get(ctx, req.NamespacedName, wl); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("get workload %s from cache: %w", key, err)
	}
	if wl.DeletionTimestamp != nil || wl.Labels[v1alpha1.PodGroupLabel] == "" {
		return reconcile.Result{}, nil
	}
	empty, err := g.empty(ctx, key)
	if err != nil || !empty {
		return reconcile.Result{}, err
	}
	ref := &sluicev1.WorkloadRef{Namespace: key.Namespace, Name: key.Name, Uid: string(wl.UID)}
	until, err := g.reportNoPods(ctx, ref)
	if err != nil {
		return reconcile.Result{}, err
	}
	crashpoint.Hit("grouper/report-no-pods")
	// Pods created from now on make the group again: they submit it anew.
	p.known.update(key, func(st *groupState) { st.submitted = false })
	if until.IsZero() {
		p.Log.V(1).Info("group has no pods", "group", key.String())
		return reconcile.Result{}, nil
	}
	// Its pods may come back until then; if none did, the next report
	// gives its quota back.
	p.Log.V(1).Info("group has no pods; its replacement window is open", "group", key.String(), "until", until)
	return reconcile.Result{RequeueAfter: max(until.Sub(p.Now()), windowRecheckMin)}, nil
}

// reportNoPods tells the admitter the group ref has no pod left, and
// returns the end of the replacement window the admitter keeps open for
// it (zero when none is). A workload the admitter does not know needs no
// report.
func (g *emptyGroups) reportNoPods(ctx context.Context, ref *sluicev1.WorkloadRef) (time.Time, error) {
	resp, err := g.p.Admitter.Progress(ctx, nil, &admitterv1.ReportProgressRequest{Workload: ref, NoPods: true},
		"that group "+ref.GetName()+" has no pods")
	if err != nil {
		return time.Time{}, err
	}
	if resp.GetNoPodsUntil() == nil { // also when NotFound left no answer
		return time.Time{}, nil
	}
	return resp.GetNoPodsUntil().AsTime(), nil
}

// empty reports whether the group has no pod: none in the cache, and none
// in the API server either (the cache may not have seen pods created a
// moment ago, and a group with pods must not lose its Workload).
func (g *emptyGroups) empty(ctx context.Context, key workload.Key) (bool, error) {
	if g.p.Roster.Len(key) > 0 {
		return false, nil
	}
	live := &metav1.PartialObjectMetadataList{}
	live.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	err := g.p.APIReader.List(ctx, live, client.InNamespace(key.Namespace), client.Limit(1),
		client.MatchingLabels{podkeys.ManagedLabel: podkeys.ManagedLabelValue, podkeys.PodGroupNameLabel: key.Name})
	if err != nil {
		return false, fmt.Errorf("list pods of group %s: %w", key, err)
	}
	return len(live.Items) == 0, nil
}
