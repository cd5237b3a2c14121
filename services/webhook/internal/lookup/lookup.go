// Package lookup answers the webhook's questions about a pod's
// surroundings — is its namespace managed, does its namespace have a default
// LocalQueue, does the WorkloadPriorityClass it names exist, what has its
// group already (its declaration, the pods of each role, whether it runs),
// is Kueue installed — from informer caches (of object metadata, and of the
// few fields of pods in groups that matter, summed up per group), so the
// webhook sends no request to the API server per pod and reads no group pod
// by pod. Only a WorkloadPriorityClass the cache lacks is looked up live.
package lookup

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/services/webhook/internal/validate"
)

// LocalQueueGVK is the kind of sluice's namespaced queues.
var LocalQueueGVK = schema.GroupVersionKind{Group: "sluice.dev", Version: "v1alpha1", Kind: "LocalQueue"}

// WorkloadPriorityClassGVK is the kind pods name with
// podkeys.PriorityClassLabel.
var WorkloadPriorityClassGVK = LocalQueueGVK.GroupVersion().WithKind("WorkloadPriorityClass")

var namespaceGVK = corev1.SchemeGroupVersion.WithKind("Namespace")

var crdGVK = schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}

// KueueWorkloadCRD is the CRD whose presence tells that Kueue is installed.
const KueueWorkloadCRD = "workloads.kueue.x-k8s.io"

// ErrNotSynced is returned while the caches are still filling.
var ErrNotSynced = errors.New("webhook caches are not synced yet")

// Options configure a Cache.
type Options struct {
	// Namespaces selects the namespaces whose pods sluice manages.
	Namespaces labels.Selector
	// DefaultQueue is the name of the LocalQueue pods without a queue go to.
	// Only LocalQueues of this name are cached.
	DefaultQueue string
	// AllGroupPods caches every pod that names a group, not only those
	// naming a role in one: gang scheduling needs to know whether a new
	// pod joins a group that already runs.
	AllGroupPods bool
	// DefaultingLabel is the namespace label key that opts a namespace in
	// to queue defaulting, and DefaultingValue its value; they are only
	// used to tell operators, once the caches have synced, of namespaces
	// that have a default LocalQueue but did not opt in.
	DefaultingLabel, DefaultingValue string
	// WatchKueue watches the Kueue Workload CRD (KueueWorkloadCRD) so
	// that KueueInstalled can tell whether Kueue is installed.
	WatchKueue bool
	// OnKueue, if set, is told whether the Kueue Workload CRD exists: once
	// when the caches have synced (changed false), then on each change
	// (changed true). Calls are serialized, in the order of the changes.
	OnKueue func(installed, changed bool)
	// RetryInterval is how long to wait before trying again when a CRD
	// the caches watch is not served yet. Defaults to 2s.
	RetryInterval time.Duration
	// Log receives progress messages.
	Log logr.Logger
}

// Cache holds the metadata of namespaces, of default LocalQueues and of
// WorkloadPriorityClasses, and a summary of each group of the pods that
// name a role in a group (KEP-976 Story 3's declared groups) or, with
// Options.AllGroupPods, of every pod that names a group.
type Cache struct {
	cfg  *rest.Config
	opts Options
	// readers is set once the caches, and groups, have synced; nil before.
	readers atomic.Pointer[readers]
	synced  chan struct{}
	groups  *groups

	// kueueMu guards kueue and kueueSynced: OnKueueChange is called in
	// the order of the changes.
	kueueMu     sync.Mutex
	kueue       bool
	kueueSynced bool
}

// New returns a Cache that starts filling when Run is called.
func New(cfg *rest.Config, opts Options) *Cache {
	if opts.RetryInterval <= 0 {
		opts.RetryInterval = 2 * time.Second
	}
	if opts.Namespaces == nil {
		opts.Namespaces = labels.Everything()
	}
	return &Cache{cfg: cfg, opts: opts, synced: make(chan struct{}), groups: newGroups(opts.Log)}
}

// readers read what the webhook looks up: from the caches, and live from
// the API server for what a cache may not have seen yet.
type readers struct {
	cached, live client.Reader
}

func metadataOf(gvk schema.GroupVersionKind) *metav1.PartialObjectMetadata {
	obj := &metav1.PartialObjectMetadata{}
	obj.SetGroupVersionKind(gvk)
	return obj
}

// Run fills the caches and keeps them up to date until ctx is done. It
// waits for sluice's CRDs (LocalQueue, WorkloadPriorityClass) if they are
// not served yet, so the webhook can start before the CRDs are installed.
// Synced is closed once every cache has its initial contents.
func (c *Cache) Run(ctx context.Context) error {
	live, err := client.New(c.cfg, client.Options{})
	if err != nil {
		return fmt.Errorf("create API client for live lookups: %w", err)
	}
	var (
		informers cache.Cache
		handled   []toolscache.InformerSynced
	)
	for {
		informers, handled, err = c.build(ctx)
		if err == nil {
			break
		}
		if !meta.IsNoMatchError(err) && !apierrors.IsNotFound(err) {
			return err
		}
		c.opts.Log.Info("waiting for sluice's CRDs to be served", "kinds", []string{LocalQueueGVK.Kind, WorkloadPriorityClassGVK.Kind}, "reason", err.Error())
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(c.opts.RetryInterval):
		}
	}

	errs := make(chan error, 1)
	go func() { errs <- informers.Start(ctx) }()
	// The informers' stores fill before their event handlers have seen
	// every object: the summaries and Kueue's state are only right once
	// the handlers have too.
	if !informers.WaitForCacheSync(ctx) || !toolscache.WaitForCacheSync(ctx.Done(), handled...) {
		// Both give up only when ctx is done.
		return <-errs
	}
	c.readers.Store(&readers{cached: informers, live: live})
	c.kueueMu.Lock()
	c.kueueSynced = true
	if c.opts.OnKueue != nil {
		c.opts.OnKueue(c.kueue, false)
	}
	c.kueueMu.Unlock()
	close(c.synced)
	c.opts.Log.Info("webhook caches synced")
	c.reportDefaultQueuesWithoutOptIn(ctx, informers)
	if err := <-errs; err != nil {
		return fmt.Errorf("run webhook caches: %w", err)
	}
	return nil
}

// build creates the cache and registers its informers: namespaces,
// default LocalQueues, WorkloadPriorityClasses, pods of groups and, with
// WatchKueue, Kueue's CRD.
// It returns, with the cache, whether its event handlers have seen the
// informers' initial contents.
func (c *Cache) build(ctx context.Context) (cache.Cache, []toolscache.InformerSynced, error) {
	queue := metadataOf(LocalQueueGVK)
	cached := podkeys.PodGroupRoleLabel
	if c.opts.AllGroupPods {
		cached = podkeys.PodGroupNameLabel
	}
	inGroup, err := labels.NewRequirement(cached, selection.Exists, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("select pods with label %s: %w", cached, err)
	}
	byObject := map[client.Object]cache.ByObject{
		// Only the default queues matter: keep nothing else in memory.
		queue: {Field: fields.OneTermEqualSelector("metadata.name", c.opts.DefaultQueue)},
		// Only pods naming a role (or, for gang scheduling, a group),
		// and only what judging a new pod of their group needs.
		&corev1.Pod{}: {Label: labels.NewSelector().Add(*inGroup), Transform: trimPod},
	}
	kueueCRD := metadataOf(crdGVK)
	if c.opts.WatchKueue {
		// Only Kueue's Workload CRD tells whether Kueue is installed.
		byObject[kueueCRD] = cache.ByObject{Field: fields.OneTermEqualSelector("metadata.name", KueueWorkloadCRD)}
	}
	informers, err := cache.New(c.cfg, cache.Options{
		ByObject: byObject,
		// Never start an informer on demand from the request path.
		ReaderFailOnMissingInformer: true,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("create webhook caches: %w", err)
	}
	for _, obj := range []client.Object{metadataOf(namespaceGVK), queue, metadataOf(WorkloadPriorityClassGVK)} {
		if _, err := informers.GetInformer(ctx, obj); err != nil {
			return nil, nil, fmt.Errorf("watch %T %s: %w", obj, obj.GetObjectKind().GroupVersionKind().Kind, err)
		}
	}
	pods, err := informers.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return nil, nil, fmt.Errorf("watch pods of groups: %w", err)
	}
	summed, err := pods.AddEventHandler(c.groups.handler())
	if err != nil {
		return nil, nil, fmt.Errorf("sum up pods of groups: %w", err)
	}
	handled := []toolscache.InformerSynced{summed.HasSynced}
	if c.opts.WatchKueue {
		inf, err := informers.GetInformer(ctx, kueueCRD)
		if err != nil {
			return nil, nil, fmt.Errorf("watch CustomResourceDefinition %s: %w", KueueWorkloadCRD, err)
		}
		reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { c.setKueue(true) },
			DeleteFunc: func(any) { c.setKueue(false) },
		})
		if err != nil {
			return nil, nil, fmt.Errorf("handle CustomResourceDefinition %s: %w", KueueWorkloadCRD, err)
		}
		handled = append(handled, reg.HasSynced)
	}
	return informers, handled, nil
}

// setKueue records whether the Kueue Workload CRD exists, telling OnKueue
// of a change once the caches have synced (Run tells the state at sync).
func (c *Cache) setKueue(installed bool) {
	c.kueueMu.Lock()
	defer c.kueueMu.Unlock()
	if c.kueue == installed {
		return
	}
	c.kueue = installed
	if c.kueueSynced && c.opts.OnKueue != nil {
		c.opts.OnKueue(installed, true)
	}
}

// KueueInstalled reports whether the Kueue Workload CRD exists, as far as
// the cache has seen (always false without Options.WatchKueue).
func (c *Cache) KueueInstalled() bool {
	c.kueueMu.Lock()
	defer c.kueueMu.Unlock()
	return c.kueue
}

// reportDefaultQueuesWithoutOptIn logs, once per namespace, each managed
// namespace that has a default LocalQueue but lacks the defaulting label:
// its pods without a queue label are no longer queued there, which an
// operator upgrading from a sluice that defaulted everywhere must notice.
func (c *Cache) reportDefaultQueuesWithoutOptIn(ctx context.Context, r cache.Cache) {
	if c.opts.DefaultingLabel == "" {
		return
	}
	queues := &metav1.PartialObjectMetadataList{}
	queues.SetGroupVersionKind(LocalQueueGVK.GroupVersion().WithKind(LocalQueueGVK.Kind + "List"))
	if err := r.List(ctx, queues); err != nil {
		c.opts.Log.Error(err, "could not list default LocalQueues to check their namespaces' defaulting label")
		return
	}
	for _, q := range queues.Items {
		ns := metadataOf(namespaceGVK)
		if err := r.Get(ctx, types.NamespacedName{Name: q.Namespace}, ns); err != nil {
			continue // gone, or not seen yet
		}
		set := labels.Merge(ns.Labels, labels.Set{corev1.LabelMetadataName: q.Namespace})
		if !c.opts.Namespaces.Matches(set) || ns.Labels[c.opts.DefaultingLabel] == c.opts.DefaultingValue {
			continue
		}
		c.opts.Log.Info("namespace has a LocalQueue named "+c.opts.DefaultQueue+" but has not opted in to queue defaulting: "+
			"its pods without a queue label are not queued; label the namespace to queue them on it",
			"namespace", q.Namespace, "label", c.opts.DefaultingLabel+"="+c.opts.DefaultingValue)
	}
}

// trimPod keeps of a pod what judging a new pod of its group needs: its
// keys, whether it still counts or runs (phase, deletion, node,
// finalizers, gates) and its group's declaration.
func trimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	trimmed := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID, ResourceVersion: pod.ResourceVersion,
		CreationTimestamp: pod.CreationTimestamp, DeletionTimestamp: pod.DeletionTimestamp,
		Labels: pod.Labels, Finalizers: pod.Finalizers,
	}}
	if sets, ok := pod.Annotations[podkeys.PodGroupSetsAnnotation]; ok {
		trimmed.Annotations = map[string]string{podkeys.PodGroupSetsAnnotation: sets}
	}
	trimmed.Spec.NodeName = pod.Spec.NodeName
	trimmed.Spec.SchedulingGates = pod.Spec.SchedulingGates
	trimmed.Status.Phase = pod.Status.Phase
	return trimmed, nil
}

// Synced is closed once the caches hold their initial contents.
func (c *Cache) Synced() <-chan struct{} { return c.synced }

// Ready returns nil once the caches have synced; it fits a readiness check.
func (c *Cache) Ready(context.Context) error {
	if c.readers.Load() == nil {
		return ErrNotSynced
	}
	return nil
}

func (c *Cache) get(ctx context.Context, key types.NamespacedName, obj client.Object) (bool, error) {
	r := c.readers.Load()
	if r == nil {
		return false, ErrNotSynced
	}
	err := r.cached.Get(ctx, key, obj)
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err):
		return false, nil
	default:
		return false, fmt.Errorf("read %s %s from cache: %w", obj.GetObjectKind().GroupVersionKind().Kind, key, err)
	}
}

// NamespaceManaged reports whether pods in the namespace are subject to
// sluice. A namespace the cache has not seen yet (created a moment ago) is
// judged by its name label alone, which the API server sets on every
// namespace and on which the default selector is built.
func (c *Cache) NamespaceManaged(ctx context.Context, namespace string) (bool, error) {
	ns := metadataOf(namespaceGVK)
	found, err := c.get(ctx, types.NamespacedName{Name: namespace}, ns)
	if err != nil {
		return false, err
	}
	set := labels.Set{corev1.LabelMetadataName: namespace}
	if found {
		set = labels.Merge(ns.Labels, set)
	}
	return c.opts.Namespaces.Matches(set), nil
}

// DefaultQueueExists reports whether the namespace has a LocalQueue named
// Options.DefaultQueue.
func (c *Cache) DefaultQueueExists(ctx context.Context, namespace string) (bool, error) {
	return c.get(ctx, types.NamespacedName{Namespace: namespace, Name: c.opts.DefaultQueue}, metadataOf(LocalQueueGVK))
}

// PriorityClassExists reports whether the WorkloadPriorityClass name
// exists. A class the cache lacks is read once from the API server before
// the answer is no: the watch may not have delivered a class created a
// moment before the pod. Only pods naming a missing (or brand-new) class
// cost that request.
func (c *Cache) PriorityClassExists(ctx context.Context, name string) (bool, error) {
	key := types.NamespacedName{Name: name}
	found, err := c.get(ctx, key, metadataOf(WorkloadPriorityClassGVK))
	if err != nil || found {
		return found, err
	}
	err = c.readers.Load().live.Get(ctx, key, metadataOf(WorkloadPriorityClassGVK))
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err):
		return false, nil
	default:
		return false, fmt.Errorf("read WorkloadPriorityClass %s from the API server: %w", name, err)
	}
}

// DeclaredGroup tells what the cache has seen of group in namespace, for
// judging a new pod of role in it (see validate.Worker): the group's
// declaration and how many pods of role take a place in it.
func (c *Cache) DeclaredGroup(_ context.Context, namespace, group, role string) (validate.Group, error) {
	if c.readers.Load() == nil {
		return validate.Group{}, ErrNotSynced
	}
	return c.groups.declared(types.NamespacedName{Namespace: namespace, Name: group}, role), nil
}

// GroupRuns reports whether a pod of group in namespace runs (see
// mutate.Runs), as far as the cache has seen; it sees every pod of the
// group only with Options.AllGroupPods.
func (c *Cache) GroupRuns(_ context.Context, namespace, group string) (bool, error) {
	if c.readers.Load() == nil {
		return false, ErrNotSynced
	}
	return c.groups.runs(types.NamespacedName{Namespace: namespace, Name: group}), nil
}
