// Package validate checks the keys a user puts on a pod: the labels and
// annotations sluice reads to queue and group it, and the sluice.dev/ keys
// only sluice may write. It reports every problem at once as a
// field.ErrorList naming the key and the rule broken.
package validate

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/sluice-dev/sluice/pkg/podgroup"
	"github.com/sluice-dev/sluice/pkg/podkeys"
)

var (
	labelsPath      = field.NewPath("metadata", "labels")
	annotationsPath = field.NewPath("metadata", "annotations")

	queueNamePath  = labelsPath.Key(podkeys.QueueNameLabel)
	groupNamePath  = labelsPath.Key(podkeys.PodGroupNameLabel)
	managedPath    = labelsPath.Key(podkeys.ManagedLabel)
	rolePath       = labelsPath.Key(podkeys.PodGroupRoleLabel)
	totalCountPath = annotationsPath.Key(podkeys.PodGroupTotalCountAnnotation)
	setsPath       = podgroup.SetsPath
	retriablePath  = annotationsPath.Key(podkeys.RetriableInGroupAnnotation)

	priorityClassPath = labelsPath.Key(podkeys.PriorityClassLabel)
	maxExecTimePath   = labelsPath.Key(podkeys.MaxExecTimeLabel)
)

// The details below are part of sluice's user-facing contract: they are
// documented in docs/webhook.md and asserted by the integration test.
const (
	// DetailGroupNeedsCount is the detail when a group name comes with
	// neither a total count, nor a declaration, nor a role.
	DetailGroupNeedsCount = "a pod that names a group must also declare how many pods the group has, " +
		"unless it declares the group's pod sets in " + podkeys.PodGroupSetsAnnotation + " or names its role in " + podkeys.PodGroupRoleLabel
	// DetailCountNeedsGroup is the detail when a total count or a
	// declaration has no group name.
	DetailCountNeedsGroup = "a pod that declares a group size must also name its group"
	// DetailCountWithSets is the detail when a pod carries both a total
	// count and a declaration.
	DetailCountWithSets = "a group declared by " + podkeys.PodGroupSetsAnnotation + " counts its pods from the declaration; remove this annotation"
	// DetailRoleFull is the detail when a worker's role has all its pods:
	// group, declared count, role, pods there, their names.
	DetailRoleFull = "group %s declares %d pods of role %s and has %d already (%s)"
	// DetailNotLabel prefixes the detail when a role is not a DNS-1123 label.
	DetailNotLabel = "must be a DNS-1123 label"
	// DetailNotSubdomain prefixes the detail when a name is not a DNS-1123 subdomain.
	DetailNotSubdomain = "must be a DNS-1123 subdomain"
	// DetailCountNotInteger is the detail when the total count does not parse.
	DetailCountNotInteger = "must be a whole number of pods"
	// DetailCountTooSmall is the detail when the total count is zero or negative.
	DetailCountTooSmall = "a group must have at least 1 pod"
	// DetailManagedValue is the detail when the managed label is not "true".
	DetailManagedValue = `sluice sets this label itself; the only value allowed is "true"`
	// DetailManagedRemoved is the detail when an update removes the managed
	// label from a pod sluice manages.
	DetailManagedRemoved = "sluice tracks the pod by this label until it is deleted; it cannot be removed"
	// DetailManagedUnqueued is the detail when a pod sluice does not queue
	// is created with the managed label: the grouper follows every pod
	// that carries it, and would take the pod for one it queued.
	DetailManagedUnqueued = "sluice sets this label on the pods it queues, and this pod is not queued " +
		"(it has no " + podkeys.QueueNameLabel + " label, or its controller is left to Kueue); remove this label"
	// DetailManagedAdded is the detail when an update adds the managed
	// label to a pod that was created without it.
	DetailManagedAdded = "sluice sets this label when it queues a pod at creation; it cannot be added later"
	// DetailQueueImmutable is the detail when a running pod changes queue.
	DetailQueueImmutable = "the queue can only change while the pod waits for admission or after it has finished"
	// DetailGroupImmutable is the detail when a pod leaves or changes its group.
	DetailGroupImmutable = "a pod cannot leave or change its group once it names one"
	// DetailRoleImmutable is the detail when a pod of a group changes its
	// role or its group's declaration.
	DetailRoleImmutable = "cannot change once the pod is created: the group's workload is built from it"
	// DetailRetriableFinal is the detail when retriable-in-group "false" is changed.
	DetailRetriableFinal = `once "false", this annotation can be neither removed nor changed`
	// DetailSluiceKey is the detail when a new pod carries a key under
	// podkeys.SluicePrefix that sluice did not write.
	DetailSluiceKey = "only sluice may write keys under " + podkeys.SluicePrefix + "; remove this key"
	// DetailPriorityClassMissing is the detail, given the class's name,
	// when a queued pod names a WorkloadPriorityClass that does not exist.
	DetailPriorityClassMissing = "WorkloadPriorityClass %q does not exist: create it, or name one that does (kubectl get workloadpriorityclasses)"
	// DetailPriorityClassImmutable is the detail when an update adds,
	// changes or removes the priority class of a pod sluice queued.
	DetailPriorityClassImmutable = "the priority class is fixed when the pod is created; to change it, create the pod again"
	// DetailMaxExecTimeNotPositive is the detail when the maximum
	// execution time is not a whole number of seconds in range.
	DetailMaxExecTimeNotPositive = "must be a whole number of seconds from 1 to 2147483647"
	// DetailMaxExecTimeImmutable is the detail when an update adds,
	// changes or removes the maximum execution time of a pod sluice
	// queued.
	DetailMaxExecTimeImmutable = "the maximum execution time is fixed when the pod is created; to change it, create the pod again"
)

// Create returns what is wrong with the queueing keys of a new pod.
func Create(pod *corev1.Pod) field.ErrorList {
	var errs field.ErrorList
	labels, annotations := pod.Labels, pod.Annotations

	groupName, hasGroup := labels[podkeys.PodGroupNameLabel]
	totalCount, hasCount := annotations[podkeys.PodGroupTotalCountAnnotation]
	sets, hasSets := annotations[podkeys.PodGroupSetsAnnotation]
	role, hasRole := labels[podkeys.PodGroupRoleLabel]
	switch {
	case hasGroup && !hasCount && !hasSets && !hasRole:
		errs = append(errs, field.Required(totalCountPath, DetailGroupNeedsCount))
	case hasCount && !hasGroup && podgroup.SchedulingGroup(pod) == "":
		// A pod of a PodGroup's gang is in the group the PodGroup names.
		errs = append(errs, field.Required(groupNamePath, DetailCountNeedsGroup))
	case hasSets && !hasGroup:
		errs = append(errs, field.Required(groupNamePath, DetailCountNeedsGroup))
	case hasSets && hasCount:
		errs = append(errs, field.Forbidden(totalCountPath, DetailCountWithSets))
	}
	if hasGroup {
		errs = append(errs, subdomain(groupNamePath, groupName)...)
	}
	if hasCount {
		errs = append(errs, count(totalCountPath, totalCount)...)
	}
	if hasRole {
		if problems := validation.IsDNS1123Label(role); len(problems) > 0 {
			errs = append(errs, field.Invalid(rolePath, role, DetailNotLabel+" ("+strings.Join(problems, "; ")+")"))
		}
	}
	if hasSets {
		errs = append(errs, declaration(labels, sets)...)
	}
	if queue, ok := labels[podkeys.QueueNameLabel]; ok {
		errs = append(errs, subdomain(queueNamePath, queue)...)
	}
	if managed, ok := labels[podkeys.ManagedLabel]; ok && managed != podkeys.ManagedLabelValue {
		errs = append(errs, field.Forbidden(managedPath, DetailManagedValue))
	}
	return errs
}

// Update returns what is wrong with an update of a pod from old to pod: the
// rules of Create on the new pod plus the keys that may not change.
func Update(old, pod *corev1.Pod) field.ErrorList {
	errs := Create(pod)

	// The grouper sees only pods carrying the managed label: without it the
	// pod would keep sluice's finalizer forever and its quota would leak.
	// Changing the value is already refused by Create.
	if old.Labels[podkeys.ManagedLabel] == podkeys.ManagedLabelValue {
		if _, ok := pod.Labels[podkeys.ManagedLabel]; !ok {
			errs = append(errs, field.Forbidden(managedPath, DetailManagedRemoved))
		}
	}

	// A pod sluice did not queue at creation stays unqueued: with the label
	// the grouper would take it for one of its own.
	// (Any other value is refused by Create.)
	if _, had := old.Labels[podkeys.ManagedLabel]; !had && pod.Labels[podkeys.ManagedLabel] == podkeys.ManagedLabelValue {
		errs = append(errs, field.Forbidden(managedPath, DetailManagedAdded))
	}

	oldQueue, newQueue := old.Labels[podkeys.QueueNameLabel], pod.Labels[podkeys.QueueNameLabel]
	if oldQueue != newQueue && !gated(old) && !podgroup.Ended(old) {
		errs = append(errs, field.Invalid(queueNamePath, newQueue, DetailQueueImmutable))
	}

	if oldGroup, ok := old.Labels[podkeys.PodGroupNameLabel]; ok {
		if newGroup := pod.Labels[podkeys.PodGroupNameLabel]; newGroup != oldGroup {
			errs = append(errs, field.Invalid(groupNamePath, newGroup, DetailGroupImmutable))
		}
	}

	if old.Labels[podkeys.PodGroupRoleLabel] != pod.Labels[podkeys.PodGroupRoleLabel] && podgroup.Declared(old) {
		errs = append(errs, field.Invalid(rolePath, pod.Labels[podkeys.PodGroupRoleLabel], DetailRoleImmutable))
	}
	if old.Annotations[podkeys.PodGroupSetsAnnotation] != pod.Annotations[podkeys.PodGroupSetsAnnotation] {
		errs = append(errs, field.Invalid(setsPath, field.OmitValueType{}, DetailRoleImmutable))
	}

	if old.Annotations[podkeys.RetriableInGroupAnnotation] == "false" &&
		pod.Annotations[podkeys.RetriableInGroupAnnotation] != "false" {
		errs = append(errs, field.Forbidden(retriablePath, DetailRetriableFinal))
	}

	if old.Labels[podkeys.ManagedLabel] == podkeys.ManagedLabelValue {
		// The class is what the workload's quota is reserved (and later
		// preempted) at, and every pod of a group must agree on it; the
		// pod's own spec.priority cannot change either. The maximum
		// execution time is read into the workload when it is created.
		errs = append(errs, fixedAtCreation(old, pod, podkeys.PriorityClassLabel, priorityClassPath, DetailPriorityClassImmutable)...)
		errs = append(errs, fixedAtCreation(old, pod, podkeys.MaxExecTimeLabel, maxExecTimePath, DetailMaxExecTimeImmutable)...)
	}
	return errs
}

// fixedAtCreation refuses an update that adds, changes or removes the
// label key: Invalid with the new value, or Forbidden when it is removed.
func fixedAtCreation(old, pod *corev1.Pod, key string, path *field.Path, detail string) field.ErrorList {
	before, had := old.Labels[key]
	after, has := pod.Labels[key]
	switch {
	case had == has && before == after:
		return nil
	case !has:
		return field.ErrorList{field.Forbidden(path, detail)}
	default:
		return field.ErrorList{field.Invalid(path, after, detail)}
	}
}

// Queued returns what is wrong with the keys that matter only on a pod
// sluice queues. They are judged only on such pods, so that sluice never
// stands in the way of a pod it leaves alone. classExists tells whether a
// WorkloadPriorityClass exists; Queued returns an error only when
// classExists does.
func Queued(pod *corev1.Pod, classExists func(name string) (bool, error)) (field.ErrorList, error) {
	errs, err := priorityClass(pod.Labels, classExists)
	if err != nil {
		return nil, err
	}
	return append(errs, maxExecTime(pod.Labels)...), nil
}

// priorityClass checks that the WorkloadPriorityClass a pod names, if
// any, is a valid name of a class that exists; classExists is asked only
// about a valid name.
func priorityClass(labels map[string]string, classExists func(name string) (bool, error)) (field.ErrorList, error) {
	class, ok := labels[podkeys.PriorityClassLabel]
	if !ok {
		return nil, nil
	}
	if errs := subdomain(priorityClassPath, class); len(errs) > 0 {
		return errs, nil
	}
	exists, err := classExists(class)
	if err != nil {
		return nil, fmt.Errorf("look up WorkloadPriorityClass %q: %w", class, err)
	}
	if !exists {
		return field.ErrorList{field.Invalid(priorityClassPath, class, fmt.Sprintf(DetailPriorityClassMissing, class))}, nil
	}
	return nil, nil
}

// maxExecTime checks that a pod's maximum execution time, if any, is a
// whole number of seconds from 1 to math.MaxInt32 (the Workload's field
// is an int32).
func maxExecTime(labels map[string]string) field.ErrorList {
	value, ok := labels[podkeys.MaxExecTimeLabel]
	if !ok {
		return nil
	}
	if seconds, err := strconv.ParseInt(value, 10, 32); err != nil || seconds < 1 {
		return field.ErrorList{field.Invalid(maxExecTimePath, value, DetailMaxExecTimeNotPositive)}
	}
	return nil
}

// Unqueued returns what is wrong with a new pod that sluice does not queue:
// it may not carry the managed label, by which the grouper follows the
// pods sluice queued (and whose group it would join by its group label).
func Unqueued(pod *corev1.Pod) field.ErrorList {
	if _, ok := pod.Labels[podkeys.ManagedLabel]; !ok {
		return nil
	}
	return field.ErrorList{field.Forbidden(managedPath, DetailManagedUnqueued)}
}

// SluiceKeys returns what is wrong with the sluice.dev/ keys of a new pod:
// sluice writes none of them at creation but the trace context, so every
// other one is the user's and refused. The trace context is allowed only
// when traceStamped says an earlier invocation of sluice's webhook for the
// same request stamped it (a reinvocation); the caller decides that.
func SluiceKeys(pod *corev1.Pod, traceStamped bool) field.ErrorList {
	var errs field.ErrorList
	for _, key := range sluiceKeys(pod.Labels) {
		errs = append(errs, field.Forbidden(labelsPath.Key(key), DetailSluiceKey))
	}
	for _, key := range sluiceKeys(pod.Annotations) {
		if key == podkeys.TraceparentAnnotation && traceStamped {
			continue
		}
		errs = append(errs, field.Forbidden(annotationsPath.Key(key), DetailSluiceKey))
	}
	return errs
}

// sluiceKeys returns the keys of m under podkeys.SluicePrefix, sorted so that
// messages are stable.
func sluiceKeys(m map[string]string) []string {
	var keys []string
	for key := range m {
		if strings.HasPrefix(key, podkeys.SluicePrefix) {
			keys = append(keys, key)
		}
	}
	slices.Sort(keys)
	return keys
}

// Reason names the rule an error breaks, for the rejection metric: the
// error type and the key, e.g. "Invalid:queue-name". The set is small and
// fixed, so it is safe as a metric label. Every sluice.dev/ key counts as
// "sluice.dev": those keys are the user's choice, and naming each would let
// users grow the metric without bound.
func Reason(e *field.Error) string {
	typ := strings.ReplaceAll(string(e.Type), "FieldValue", "")
	if e.Detail == DetailSluiceKey {
		return typ + ":" + strings.TrimSuffix(podkeys.SluicePrefix, "/")
	}
	key := e.Field
	if i := strings.LastIndex(key, "/"); i >= 0 {
		key = key[i+1:]
	}
	key = strings.TrimSuffix(key, "]")
	return typ + ":" + key
}

func subdomain(path *field.Path, value string) field.ErrorList {
	problems := validation.IsDNS1123Subdomain(value)
	if len(problems) == 0 {
		return nil
	}
	return field.ErrorList{field.Invalid(path, value, DetailNotSubdomain+" ("+strings.Join(problems, "; ")+")")}
}

func count(path *field.Path, value string) field.ErrorList {
	_, err := podgroup.ParseTotalCount(value)
	switch {
	case errors.Is(err, podgroup.ErrCountNotInteger):
		return field.ErrorList{field.Invalid(path, value, DetailCountNotInteger)}
	case err != nil:
		return field.ErrorList{field.Invalid(path, value, DetailCountTooSmall)}
	}
	return nil
}

// Group is what the webhook has seen of a declared group when a new
// worker of one role joins it.
type Group struct {
	// Sets is the group's declaration; nil while no pod declaring the
	// group is known. Its templates are shared: read, never change them.
	Sets []podgroup.Set
	// InRole is how many pods of the worker's role take a place in the
	// group (see Counts).
	InRole int
	// NamesInRole names those pods. Worker calls it only to refuse the
	// worker, so that admitting one costs nothing per pod of the group.
	NamesInRole func() []string
}

// Worker returns what is wrong with a new worker of a declared group, as
// far as what the webhook has seen of its group tells: its role must be
// declared and not have all its pods. Before the pod declaring the group
// is known nothing can be told; the grouper deletes, with an event,
// workers that turn out to be too many.
func Worker(pod *corev1.Pod, group Group) field.ErrorList {
	if _, declares := pod.Annotations[podkeys.PodGroupSetsAnnotation]; declares || !podgroup.Declared(pod) {
		return nil
	}
	sets := group.Sets
	if sets == nil {
		return nil
	}
	role := pod.Labels[podkeys.PodGroupRoleLabel]
	i := slices.IndexFunc(sets, func(s podgroup.Set) bool { return s.Name == role })
	if i < 0 {
		return field.ErrorList{field.NotSupported(rolePath, role, podgroup.SetNames(sets))}
	}
	if int64(group.InRole) < int64(sets[i].Count) {
		return nil
	}
	// The names are read after the count: judge by them, so that the
	// message agrees with itself should a pod have gone in between.
	there := group.NamesInRole()
	if n := len(there); int64(n) >= int64(sets[i].Count) {
		slices.Sort(there)
		return field.ErrorList{field.Forbidden(rolePath, fmt.Sprintf(DetailRoleFull,
			pod.Labels[podkeys.PodGroupNameLabel], sets[i].Count, role, n, strings.Join(there, ", ")))}
	}
	return nil
}

// Counts reports whether a pod of a group takes a place in it: it has not
// failed, is not being deleted before it ran, and is not a pod of an
// earlier run that ended and that sluice let go of.
func Counts(pod *corev1.Pod) bool { return podgroup.Active(pod) && !podgroup.Released(pod) }

// declaration checks a pod-group-sets annotation and that the pod
// carrying it has a role of its own in it.
func declaration(labels map[string]string, text string) field.ErrorList {
	sets, errs := podgroup.ParseSets(text)
	if len(errs) > 0 {
		return errs
	}
	if _, err := podgroup.OwnRole(labels, sets); err != nil {
		return field.ErrorList{err}
	}
	return nil
}

// gated reports whether the pod still waits behind sluice's admission gate.
func gated(pod *corev1.Pod) bool {
	for _, g := range pod.Spec.SchedulingGates {
		if g.Name == podkeys.AdmissionGate {
			return true
		}
	}
	return false
}
