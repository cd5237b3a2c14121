package workload

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	sluicev1 "github.com/sluice-dev/sluice/gen/sluice/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/pkg/podset"
)

// maxPodSets is the API's limit on spec.podSets.
const maxPodSets = 18

// MaxBytes bounds a new Workload's JSON. etcd refuses writes over 1.5 MiB,
// and the status that admission adds later (assignments, the checks'
// states and their podSetUpdates) must still fit: a Workload refused at
// submission is a clear answer to its pods, one that outgrows etcd
// halfway through its admission is not.
const MaxBytes = 1 << 20

// FromProto builds the Workload object a SubmitWorkload request asks for.
// Errors name the request field and the rule it breaks.
func FromProto(p *sluicev1.Workload) (*v1alpha1.Workload, error) {
	if p == nil {
		return nil, fmt.Errorf("workload: required")
	}
	ref := p.GetRef()
	if errs := validation.IsDNS1123Label(ref.GetNamespace()); len(errs) > 0 {
		return nil, fmt.Errorf("workload.ref.namespace %q: %s", ref.GetNamespace(), errs[0])
	}
	if errs := validation.IsDNS1123Subdomain(ref.GetName()); len(errs) > 0 {
		return nil, fmt.Errorf("workload.ref.name %q: %s", ref.GetName(), errs[0])
	}
	if errs := validation.IsDNS1123Subdomain(p.GetQueueName()); len(errs) > 0 {
		return nil, fmt.Errorf("workload.queue_name %q: %s", p.GetQueueName(), errs[0])
	}
	if n := len(p.GetPodSets()); n == 0 || n > maxPodSets {
		return nil, fmt.Errorf("workload.pod_sets: must have between 1 and %d entries, has %d", maxPodSets, n)
	}
	classRef, err := priorityClassRef(p)
	if err != nil {
		return nil, err
	}
	if limit := p.MaximumExecutionTimeSeconds; limit != nil && *limit < 1 {
		return nil, fmt.Errorf("workload.maximum_execution_time_seconds %d: must be at least 1", *limit)
	}
	priority := p.GetPriority()
	active := true
	wl := &v1alpha1.Workload{
		ObjectMeta: metav1.ObjectMeta{Namespace: ref.GetNamespace(), Name: ref.GetName()},
		Spec: v1alpha1.WorkloadSpec{
			QueueName:                   p.GetQueueName(),
			Priority:                    &priority,
			PriorityClassRef:            classRef,
			MaximumExecutionTimeSeconds: p.MaximumExecutionTimeSeconds,
			Active:                      &active,
		},
	}
	if tp := p.GetTraceparent(); tp != "" {
		wl.Annotations = map[string]string{podkeys.TraceparentAnnotation: tp}
	}
	if g := p.GetPodGroup(); g != "" {
		if errs := validation.IsValidLabelValue(g); len(errs) > 0 {
			return nil, fmt.Errorf("workload.pod_group %q: %s", g, errs[0])
		}
		if len(p.GetOwners()) > 0 {
			return nil, fmt.Errorf("workload.owners: must be empty for a pod group's workload (pod_group %q): its pods come and go while it stays", g)
		}
		wl.Labels = map[string]string{v1alpha1.PodGroupLabel: g}
	}
	seen := map[string]bool{}
	for i, ps := range p.GetPodSets() {
		path := fmt.Sprintf("workload.pod_sets[%d]", i)
		if errs := validation.IsDNS1123Label(ps.GetName()); len(errs) > 0 {
			return nil, fmt.Errorf("%s.name %q: %s", path, ps.GetName(), errs[0])
		}
		if seen[ps.GetName()] {
			return nil, fmt.Errorf("%s.name %q: must be unique in the workload", path, ps.GetName())
		}
		seen[ps.GetName()] = true
		if ps.GetCount() < 1 {
			return nil, fmt.Errorf("%s.count %d: must be at least 1", path, ps.GetCount())
		}
		requests := corev1.ResourceList{}
		for _, name := range slices.Sorted(maps.Keys(ps.GetRequests())) {
			q, err := resource.ParseQuantity(ps.GetRequests()[name])
			if err != nil {
				return nil, fmt.Errorf("%s.requests[%q] %q: not a quantity: %w", path, name, ps.GetRequests()[name], err)
			}
			if q.Sign() < 0 {
				return nil, fmt.Errorf("%s.requests[%q] %q: must not be negative", path, name, ps.GetRequests()[name])
			}
			requests[corev1.ResourceName(name)] = q
		}
		wl.Spec.PodSets = append(wl.Spec.PodSets, v1alpha1.PodSet{
			Name:  ps.GetName(),
			Count: ps.GetCount(),
			Template: v1alpha1.PodSetTemplate{
				RoleHash:     ps.GetRoleHash(),
				Labels:       cloneMap(ps.GetLabels()),
				Annotations:  cloneMap(ps.GetAnnotations()),
				Requests:     requests,
				NodeSelector: cloneMap(ps.GetNodeSelector()),
				Tolerations:  podset.TolerationsFromProto(ps.GetTolerations()),
			},
		})
	}
	for i, o := range p.GetOwners() {
		if o.GetName() == "" || o.GetUid() == "" {
			return nil, fmt.Errorf("workload.owners[%d]: name and uid are required", i)
		}
		controller := o.GetController()
		blockOwnerDeletion := false
		wl.OwnerReferences = append(wl.OwnerReferences, metav1.OwnerReference{
			APIVersion:         "v1",
			Kind:               "Pod",
			Name:               o.GetName(),
			UID:                types.UID(o.GetUid()),
			Controller:         &controller,
			BlockOwnerDeletion: &blockOwnerDeletion,
		})
	}
	// Encoding JSON costs far more than measuring the proto, and only a
	// large proto can make a Workload too large: its JSON is less than 16
	// times the proto's bytes (a string byte escaped as \u00XX takes 6, an
	// owner reference's fixed keys about 10 per byte of the smallest
	// owner) plus its envelope.
	if proto.Size(p) > (MaxBytes-jsonEnvelopeBytes)/16 {
		if err := checkSize(wl); err != nil {
			return nil, err
		}
	}
	return wl, nil
}

// jsonEnvelopeBytes bounds what a Workload's JSON holds beyond its proto's
// fields: apiVersion, kind and the metadata the admitter sets.
const jsonEnvelopeBytes = 4 << 10

// checkSize refuses a Workload over MaxBytes. Nothing in it grows with
// the pods' number; its pod sets' labels and annotations, copied from
// each role's first pod, can.
func checkSize(wl *v1alpha1.Workload) error {
	data, err := json.Marshal(wl)
	if err != nil {
		return fmt.Errorf("workload: encode: %w", err)
	}
	if len(data) <= MaxBytes {
		return nil
	}
	largest, size := "", 0
	for _, ps := range wl.Spec.PodSets {
		n := mapBytes(ps.Template.Labels) + mapBytes(ps.Template.Annotations)
		if n > size {
			largest, size = ps.Name, n
		}
	}
	return fmt.Errorf("workload.pod_sets: the Workload would be %d bytes, over the limit of %d: each pod set copies the "+
		"labels and annotations of its role's first pod (pod set %q carries %d bytes of them); make them smaller, or the roles fewer",
		len(data), MaxBytes, largest, size)
}

// mapBytes is the bytes of a map's keys and values.
func mapBytes(m map[string]string) int {
	n := 0
	for k, v := range m {
		n += len(k) + len(v)
	}
	return n
}

func cloneMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return maps.Clone(m)
}

// PodGroup is the name of the pod group wl was assembled from; empty for
// a single pod's workload.
func PodGroup(wl *v1alpha1.Workload) string { return wl.Labels[v1alpha1.PodGroupLabel] }

// Ref is the sluice.v1 reference to wl.
func Ref(wl *v1alpha1.Workload) *sluicev1.WorkloadRef {
	return &sluicev1.WorkloadRef{Namespace: wl.Namespace, Name: wl.Name, Uid: string(wl.UID)}
}

// priorityClassRef is the class a submitted workload's priority comes
// from: the pods' WorkloadPriorityClass, whose value the admitter reads
// when it creates the Workload, or else their PriorityClass, whose value
// the pods already carry in spec.priority. Nil for neither.
func priorityClassRef(p *sluicev1.Workload) (*v1alpha1.PriorityClassRef, error) {
	if name := p.GetWorkloadPriorityClass(); name != "" {
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			return nil, fmt.Errorf("workload.workload_priority_class %q: %s", name, errs[0])
		}
		return &v1alpha1.PriorityClassRef{Group: v1alpha1.GroupVersion.Group, Kind: v1alpha1.WorkloadPriorityClassKind, Name: name}, nil
	}
	if name := p.GetPriorityClassName(); name != "" {
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			return nil, fmt.Errorf("workload.priority_class_name %q: %s", name, errs[0])
		}
		return &v1alpha1.PriorityClassRef{Group: v1alpha1.PodPriorityClassGroup, Kind: v1alpha1.PodPriorityClassKind, Name: name}, nil
	}
	return nil, nil
}

// WorkloadPriorityClass names the WorkloadPriorityClass wl's priority
// comes from; empty when it comes from the pods' own priority.
func WorkloadPriorityClass(wl *v1alpha1.Workload) string {
	if ref := wl.Spec.PriorityClassRef; ref != nil && ref.Kind == v1alpha1.WorkloadPriorityClassKind {
		return ref.Name
	}
	return ""
}

// ToChecks builds the sluice.checks.v1 view of a reserved workload: each
// pod set with the flavors of its assignment, and the flavors' node labels
// and tolerations added to what the pods carry.
func ToChecks(wl *v1alpha1.Workload, flavors map[string]*v1alpha1.ResourceFlavor) *checksv1.Workload {
	out := &checksv1.Workload{
		Namespace:                   wl.Namespace,
		Name:                        wl.Name,
		Uid:                         string(wl.UID),
		QueueName:                   wl.Spec.QueueName,
		CreateTime:                  timestamppb.New(wl.CreationTimestamp.Time),
		MaximumExecutionTimeSeconds: wl.Spec.MaximumExecutionTimeSeconds,
	}
	if ref := wl.Spec.PriorityClassRef; ref != nil {
		out.PriorityClassName, out.PriorityClassKind = ref.Name, ref.Kind
	}
	out.Priority = Priority(wl)
	assignments := map[string]v1alpha1.PodSetAssignment{}
	if wl.Status.Admission != nil {
		out.ClusterQueue = wl.Status.Admission.ClusterQueue
		for _, a := range wl.Status.Admission.PodSetAssignments {
			assignments[a.Name] = a
		}
	}
	for _, ps := range wl.Spec.PodSets {
		p := &checksv1.PodSet{
			Name:         ps.Name,
			Count:        ps.Count,
			Requests:     map[string]string{},
			Flavors:      map[string]string{},
			NodeSelector: maps.Clone(ps.Template.NodeSelector),
			Labels:       maps.Clone(ps.Template.Labels),
			Annotations:  maps.Clone(ps.Template.Annotations),
		}
		for res, q := range ps.Template.Requests {
			p.Requests[string(res)] = q.String()
		}
		tolerations := slices.Clone(ps.Template.Tolerations)
		a := assignments[ps.Name]
		if a.Count != nil {
			p.Count = *a.Count
		}
		for res, q := range a.Borrowed {
			if p.Borrowed == nil {
				p.Borrowed = map[string]string{}
			}
			p.Borrowed[string(res)] = q.String()
		}
		var names []string
		for res, f := range a.Flavors {
			p.Flavors[string(res)] = f
			names = append(names, f)
		}
		slices.Sort(names)
		for _, name := range slices.Compact(names) {
			f := flavors[name]
			if f == nil {
				continue
			}
			if len(f.Spec.NodeLabels) > 0 && p.NodeSelector == nil {
				p.NodeSelector = map[string]string{}
			}
			for k, v := range f.Spec.NodeLabels {
				if _, ok := p.NodeSelector[k]; !ok {
					p.NodeSelector[k] = v
				}
			}
			tolerations = append(tolerations, podset.MissingTolerations(tolerations, f.Spec.Tolerations)...)
		}
		for _, t := range tolerations {
			p.Tolerations = append(p.Tolerations, TolerationToChecks(t))
		}
		out.PodSets = append(out.PodSets, p)
	}
	return out
}

// TolerationToChecks converts a toleration to the vendor contract's form.
func TolerationToChecks(t corev1.Toleration) *checksv1.Toleration {
	out := &checksv1.Toleration{Key: t.Key, Value: t.Value}
	switch t.Operator {
	case corev1.TolerationOpExists:
		out.Operator = checksv1.TolerationOperator_TOLERATION_OPERATOR_EXISTS
	case corev1.TolerationOpEqual:
		out.Operator = checksv1.TolerationOperator_TOLERATION_OPERATOR_EQUAL
	}
	switch t.Effect {
	case corev1.TaintEffectNoSchedule:
		out.Effect = checksv1.TaintEffect_TAINT_EFFECT_NO_SCHEDULE
	case corev1.TaintEffectPreferNoSchedule:
		out.Effect = checksv1.TaintEffect_TAINT_EFFECT_PREFER_NO_SCHEDULE
	case corev1.TaintEffectNoExecute:
		out.Effect = checksv1.TaintEffect_TAINT_EFFECT_NO_EXECUTE
	}
	if t.TolerationSeconds != nil {
		s := *t.TolerationSeconds
		out.TolerationSeconds = &s
	}
	return out
}
