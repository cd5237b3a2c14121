package approval

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

// WorkloadResource is the resource the Informer lists and watches.
var WorkloadResource = v1alpha1.GroupVersion.WithResource("workloads")

// Informer is a Workloads backed by a metadata-only informer over the
// Workloads of every namespace: it needs list and watch on
// workloads.sluice.dev and nothing else, and keeps of each object only
// its name, uid and approval annotation.
type Informer struct {
	informer cache.SharedIndexInformer
	log      logr.Logger // set by Run, before any handler runs
}

var _ Workloads = (*Informer)(nil)

// NewInformer returns an Informer that reads through client once Run is
// called.
func NewInformer(client metadata.Interface) (*Informer, error) {
	inf := metadatainformer.NewFilteredMetadataInformer(client, WorkloadResource, metav1.NamespaceAll, 0, cache.Indexers{}, nil).Informer()
	if err := inf.SetTransform(slim); err != nil {
		return nil, fmt.Errorf("setting the Workload informer's transform: %w", err)
	}
	return &Informer{informer: inf}, nil
}

// Run fills the cache and keeps it up to date until ctx ends; log gets
// the errors of the OnApprovalChange function.
func (i *Informer) Run(ctx context.Context, log logr.Logger) {
	i.log = log
	i.informer.RunWithContext(ctx)
}

// HasSynced implements Workloads.
func (i *Informer) HasSynced() bool { return i.informer.HasSynced() }

// Get implements Workloads.
func (i *Informer) Get(ref Ref) (Workload, bool) {
	obj, found, err := i.informer.GetStore().GetByKey(ref.Namespace + "/" + ref.Name)
	if err != nil || !found {
		return Workload{}, false
	}
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return Workload{}, false
	}
	return workloadOf(m), true
}

// OnApprovalChange implements Workloads. The informer updates its store
// before it calls handlers, so Get already sees the change.
func (i *Informer) OnApprovalChange(f func(Ref) error) {
	// The error says only that the informer has stopped: handlers are
	// added before Run.
	_, _ = i.informer.AddEventHandler(approvalHandler(func(ref Ref) {
		if err := f(ref); err != nil {
			i.log.Error(err, "approval changed")
		}
	}))
}

// approvalHandler calls changed with the Ref of every Workload whose
// approval appeared or disappeared: one created or deleted approved, or
// one whose annotation was added or removed (or that was replaced by an
// object of the same name).
func approvalHandler(changed func(Ref)) cache.ResourceEventHandlerFuncs {
	ifApproved := func(obj any) {
		if m := metadataOf(obj); m != nil && workloadOf(m).Approved {
			changed(Ref{Namespace: m.Namespace, Name: m.Name})
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { ifApproved(obj) },
		UpdateFunc: func(oldObj, newObj any) {
			o, n := metadataOf(oldObj), metadataOf(newObj)
			if o == nil || n == nil {
				return
			}
			if workloadOf(o).Approved != workloadOf(n).Approved || o.UID != n.UID {
				changed(Ref{Namespace: n.Namespace, Name: n.Name})
			}
		},
		DeleteFunc: ifApproved,
	}
}

// metadataOf unwraps what an informer hands its handlers.
func metadataOf(obj any) *metav1.PartialObjectMetadata {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, _ := obj.(*metav1.PartialObjectMetadata)
	return m
}

func workloadOf(m *metav1.PartialObjectMetadata) Workload {
	approver, approved := m.Annotations[Annotation]
	return Workload{UID: string(m.UID), Approved: approved, Approver: approver}
}

// slim keeps what the check reads, so the cache of every Workload in the
// cluster stays small.
func slim(obj any) (any, error) {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return obj, nil
	}
	out := &metav1.PartialObjectMetadata{TypeMeta: m.TypeMeta}
	out.Namespace, out.Name, out.UID, out.ResourceVersion = m.Namespace, m.Name, m.UID, m.ResourceVersion
	if v, ok := m.Annotations[Annotation]; ok {
		out.Annotations = map[string]string{Annotation: v}
	}
	return out, nil
}
