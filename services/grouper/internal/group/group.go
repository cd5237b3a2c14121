// Package group decides what a KEP-976 pod group needs, from its pods
// alone: whether they agree on how they are queued and on their size,
// which pods make the workload and which are excess, when the workload can
// be submitted, which failed pods their replacements free, whether pods
// are missing, and whether the group finished — and how. It knows groups created beforehand
// (Story 2: a total count, roles by role hash) and groups declared by the
// pod-group-sets annotation (Story 3: roles by label, workers created
// later). It does no I/O; the grouper's controller acts on what it says.
package group

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	sluicev1 "github.com/sluice-dev/sluice/gen/sluice/v1"
	"github.com/sluice-dev/sluice/pkg/podgroup"
	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/services/grouper/internal/podpatch"
	"github.com/sluice-dev/sluice/services/grouper/internal/workload"
)

// MaxRoles is the most roles (distinct role hashes) a group may have: the
// Workload API's limit of pod sets.
const MaxRoles = podgroup.MaxPodSets

// MismatchError says that a group's pods disagree on a key that must be
// the same for all of them.
type MismatchError struct {
	Group string
	// Key is the label or annotation they disagree on.
	Key string
	// Pods lists, per value, the pods carrying it.
	Pods map[string][]string
}

func (e *MismatchError) Error() string {
	var parts []string
	for _, v := range slices.Sorted(maps.Keys(e.Pods)) {
		parts = append(parts, fmt.Sprintf("%q (%s)", v, NameList(e.Pods[v])))
	}
	return fmt.Sprintf("the pods of group %s disagree on %s: %s; every pod of a group must carry the same value",
		e.Group, e.Key, strings.Join(parts, ", "))
}

// TooManyRolesError says that a group has more roles than a workload can
// have pod sets.
type TooManyRolesError struct {
	Group string
	Roles int
}

func (e *TooManyRolesError) Error() string {
	return fmt.Sprintf("group %s has %d roles (distinct role hashes), more than the %d pod sets a workload can have; "+
		"pods of one role must differ only in what the role hash leaves out (names, images, env, commands, volumes)",
		e.Group, e.Roles, MaxRoles)
}

// namesShown is the most pod names a message lists: an event's note is
// refused beyond 1,024 characters, and a group may have thousands of pods.
const namesShown = 10

// NameList lists names, separated by commas, cut after the first few with
// how many more there are.
func NameList(names []string) string {
	if len(names) <= namesShown {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:namesShown], ", "), len(names)-namesShown)
}

// Assembly is what a group's pods say before admission.
type Assembly struct {
	// Queue and TotalCount are what every pod says.
	Queue      string
	TotalCount int32
	// Members are the active pods that make the workload, first in line
	// first; at most TotalCount.
	Members []*corev1.Pod
	// Excess are the active pods beyond TotalCount (beyond their role's
	// count in a declared group), to delete: the youngest, gated ones
	// first.
	Excess []*corev1.Pod
	// Strangers are the active pods of a declared group that name a role
	// it does not declare, to delete; Declared lists the roles it does.
	Strangers []*corev1.Pod
	Declared  []string
	// Missing is how many active pods the group still waits for.
	Missing int32
	// Workload is the workload to submit; nil while pods are missing (or,
	// in a declared group, while the pod declaring it is).
	Workload *sluicev1.Workload
}

// Assemble reads the pods of group name (every pod carrying its name, in
// any order) for a workload to submit. A group whose pods disagree on the
// queue, the priority class, the maximum execution time, the total count
// or the declaration has no workload (MismatchError), nor has one with
// too many roles (TooManyRolesError).
// gangSize is the minCount of the gang of the PodGroup the group's pods
// name, for a group without a total count (0 when it has none): such a
// group is submitted with every pod it has once it has gangSize
// (NoSizeError while the size is not known).
func Assemble(namespace, name string, pods []*corev1.Pod, gangSize int32) (*Assembly, error) {
	// Pods that ended and that sluice let go of belong to a run that is
	// over (the group comes back with new pods): they neither count nor
	// need to agree.
	pods = slices.DeleteFunc(slices.Clone(pods), podgroup.Released)
	if len(pods) == 0 {
		return nil, fmt.Errorf("group %s/%s: no pods", namespace, name)
	}
	if RolesOf(pods).Declared {
		return assembleDeclared(namespace, name, pods)
	}
	group := namespace + "/" + name
	queue, err := sameQueueing(group, pods)
	if err != nil {
		return nil, err
	}
	countText, err := same(group, podkeys.PodGroupTotalCountAnnotation, pods, func(p *corev1.Pod) string {
		return p.Annotations[podkeys.PodGroupTotalCountAnnotation]
	})
	if err != nil {
		return nil, err
	}
	byGang := countText == "" && slices.ContainsFunc(pods, podgroup.GangSized)
	total := gangSize
	switch {
	case byGang && gangSize < 1:
		return nil, &NoSizeError{Group: group, PodGroup: name}
	case !byGang:
		if total, err = podgroup.ParseTotalCount(countText); err != nil {
			return nil, fmt.Errorf("group %s: annotation %s %q: %w", group, podkeys.PodGroupTotalCountAnnotation, countText, err)
		}
	}
	active := activeOf(pods)
	Ordered(active)
	a := &Assembly{Queue: queue, TotalCount: total, Members: active}
	// A gang's size is its minimum: every pod there when it is complete
	// is in its workload. A total count is exact: pods beyond it go.
	switch n := int32(len(active)); {
	case n > total && !byGang:
		a.Members, a.Excess = active[:total], active[total:]
		slices.Reverse(a.Excess) // youngest first
	case n < total:
		a.Missing = total - n
	}
	if roles := countRoles(a.Members); roles > MaxRoles {
		return a, &TooManyRolesError{Group: group, Roles: roles}
	}
	if a.Missing == 0 {
		if a.Workload, err = workload.ForGroup(namespace, name, a.Members); err != nil {
			return a, err
		}
	}
	return a, nil
}

// NoSizeError says that a group sized by its PodGroup's gang does not
// know its size: the PodGroup does not exist (yet) or has no gang policy.
type NoSizeError struct {
	Group, PodGroup string
}

func (e *NoSizeError) Error() string {
	return fmt.Sprintf("group %s has no %s annotation and waits for the size of its gang: PodGroup %s does not exist yet or has no gang minCount",
		e.Group, podkeys.PodGroupTotalCountAnnotation, e.PodGroup)
}

// sameQueueing returns the LocalQueue the pods of a group name, once they
// agree on every label their workload is queued by: the queue, the
// WorkloadPriorityClass its quota is reserved (and preempted) at, and how
// long it may run. A workload has one of each. Otherwise it returns a
// MismatchError naming the first label they disagree on.
func sameQueueing(group string, pods []*corev1.Pod) (string, error) {
	queue, err := sameLabel(group, podkeys.QueueNameLabel, pods)
	if err != nil {
		return "", err
	}
	for _, key := range []string{podkeys.PriorityClassLabel, podkeys.MaxExecTimeLabel} {
		if _, err := sameLabel(group, key, pods); err != nil {
			return "", err
		}
	}
	return queue, nil
}

// sameLabel returns the value every pod has for label key (empty when
// none has it), or a MismatchError.
func sameLabel(group, key string, pods []*corev1.Pod) (string, error) {
	return same(group, key, pods, func(p *corev1.Pod) string { return p.Labels[key] })
}

// same returns the value every pod has for key, or a MismatchError.
func same(group, key string, pods []*corev1.Pod, value func(*corev1.Pod) string) (string, error) {
	byValue := map[string][]string{}
	for _, p := range pods {
		v := value(p)
		byValue[v] = append(byValue[v], p.Name)
	}
	if len(byValue) == 1 {
		for v := range byValue {
			return v, nil
		}
	}
	for _, names := range byValue {
		slices.Sort(names)
	}
	return "", &MismatchError{Group: group, Key: key, Pods: byValue}
}

func countRoles(pods []*corev1.Pod) int {
	roles := map[string]bool{}
	for _, p := range pods {
		hash, _ := workload.RoleHash(p)
		roles[hash] = true
	}
	return len(roles)
}

// Ordered sorts pods in the order a group keeps them: those holding
// sluice's finalizer first, then the ungated ones, then the older ones
// (by name when created at once), so excess pods are cut from the end.
func Ordered(pods []*corev1.Pod) []*corev1.Pod {
	slices.SortStableFunc(pods, func(a, b *corev1.Pod) int {
		if c := compareBool(podpatch.HasFinalizer(a), podpatch.HasFinalizer(b)); c != 0 {
			return c
		}
		if c := compareBool(!podpatch.HasGate(a), !podpatch.HasGate(b)); c != 0 {
			return c
		}
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	return pods
}

// compareBool orders true before false.
func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return -1
	default:
		return 1
	}
}

// State is what an admitted group's pods say, role by role.
type State struct {
	// Run is the admission the state is of.
	Run Run
	// Excess are active pods beyond their role's count, to delete: the
	// youngest first. Pods being deleted do not count: their replacements
	// are not excess. In a group created beforehand, pods of a role the
	// workload does not have are excess too.
	Excess []*corev1.Pod
	// Strangers are the active pods of a declared group naming a role its
	// workload does not have, to delete.
	Strangers []*corev1.Pod
	// Waiting are the pods of a gang-sized group beyond their role's count
	// (or of a role its workload lacks): they stay gated until a place
	// frees.
	Waiting []*corev1.Pod
	// Roles is how the group's pods map to pod sets.
	Roles Roles
	// Replaced are failed pods a newer pod of their role took the place
	// of: their finalizer may go. The pod that failed first is replaced
	// first.
	Replaced []*corev1.Pod
	// Missing counts, per role, the pods the group waits for (failed and
	// not replaced yet).
	Missing map[string]int32
	// Succeeded counts, per role, the pods that succeeded: their quota can
	// be released at once.
	Succeeded map[string]int32
	// Finished is set once the group ended; Success says how, Message why.
	Finished bool
	Success  bool
	Message  string
	// CutByOrder is set when a role had more active pods than its count:
	// which of them were cut (Excess, Waiting) depended on their order,
	// which an ungate changes (see Ordered). Otherwise the State depends
	// on the pods' claims only through which pods take part in the run.
	CutByOrder bool
}

// Run is one admission of a group: the uid of its Workload and the id of
// the reservation it was admitted under. An eviction ends a run; the
// admission that follows is another.
type Run struct {
	UID         string
	Reservation string
}

// Owns reports whether pod takes part in run. A gated pod does, whatever
// its annotations claim: only the ungate that lifts the gate says which
// run a pod is in, so a gated pod's claim to another run is not believed
// and it is counted (as excess, if its role is full). An ungated pod does
// unless it was admitted under another reservation or, if ungated before
// reservations were recorded on pods, in another Workload.
func (run Run) Owns(pod *corev1.Pod) bool { return run.OwnsClaim(ClaimOf(pod)) }

// Observe reads an admitted group: its run, its pod sets (pod set name →
// count), how its pods map to them, and all the pods carrying its name.
// Pods of another run (an earlier reservation of this Workload, or an
// earlier Workload of the same name) are not its own: they neither fill
// its places nor count toward its end.
func Observe(run Run, podSets map[string]int32, how Roles, pods []*corev1.Pod) (*State, error) {
	st := &State{Run: run, Missing: map[string]int32{}, Succeeded: map[string]int32{}, Roles: how}
	type role struct {
		active, failed []*corev1.Pod
		// declaring: the role of the pod declaring the group.
		declaring bool
	}
	roles := map[string]*role{}
	var running, succeeded int32
	nonRetriable := ""
	for _, p := range pods {
		if !run.Owns(p) {
			continue
		}
		hash, err := how.Of(p)
		if err != nil {
			return nil, err
		}
		r := roles[hash]
		if r == nil {
			r = &role{}
			roles[hash] = r
		}
		if _, declares := p.Annotations[podkeys.PodGroupSetsAnnotation]; declares {
			r.declaring = true
		}
		switch {
		case podgroup.Active(p) && p.DeletionTimestamp != nil && p.Status.Phase != corev1.PodSucceeded:
			// Leaving: a replacement created meanwhile takes its place
			// rather than being cut as excess.
			running++
		case podgroup.Active(p):
			r.active = append(r.active, p)
			if p.Status.Phase == corev1.PodSucceeded {
				succeeded++
				st.Succeeded[hash]++
			} else {
				running++
			}
		case podpatch.HasFinalizer(p):
			r.failed = append(r.failed, p)
		}
		if !podgroup.Retriable(p) && p.Status.Phase == corev1.PodFailed && nonRetriable == "" {
			nonRetriable = p.Name
		}
	}
	var total int32
	for hash, count := range podSets {
		total += count
		r := roles[hash]
		switch {
		case r == nil && how.Declared:
			continue // the pods of a declared role come over time
		case r == nil:
			st.Missing[hash] = count
			continue
		}
		active := r.active
		if n := int32(len(active)); n > count {
			st.CutByOrder = true
			Ordered(active)
			excess := slices.Clone(active[count:])
			slices.Reverse(excess)
			if how.WaitExtra {
				st.Waiting = append(st.Waiting, excess...)
			} else {
				st.Excess = append(st.Excess, excess...)
			}
			active = active[:count]
		}
		if how.Declared && !r.declaring {
			// Workers are created by the pod that declared them, as it
			// needs them: a failed one holds no place.
			st.Replaced = append(st.Replaced, r.failed...)
			continue
		}
		// Each failed pod holds a place until a newer pod takes it.
		if len(r.failed) > 1 {
			slices.SortStableFunc(r.failed, func(a, b *corev1.Pod) int { return FailedAt(a).Compare(FailedAt(b)) })
		}
		free := int32(len(active)) + int32(len(r.failed)) - count
		replaced := min(max(free, 0), int32(len(r.failed)))
		st.Replaced = append(st.Replaced, r.failed[:replaced]...)
		missing := count - int32(len(active))
		if how.Declared {
			missing = min(missing, int32(len(r.failed))-replaced)
		}
		if missing > 0 {
			st.Missing[hash] = missing
		}
	}
	for hash := range roles {
		if _, ok := podSets[hash]; !ok {
			// A role the workload does not have: every pod of it is
			// excess (it would have no pod set to be admitted in).
			r := roles[hash]
			switch {
			case how.Declared:
				st.Strangers = append(st.Strangers, r.active...)
			case how.WaitExtra:
				st.Waiting = append(st.Waiting, r.active...)
			default:
				st.Excess = append(st.Excess, r.active...)
			}
		}
	}
	own := ""
	if how.Declared && running == 0 {
		own = ownRoleSucceeded(run, podSets, how, pods)
	}
	switch {
	case succeeded >= total && total > 0:
		st.Finished, st.Success, st.Message = true, true, fmt.Sprintf("all %d pods succeeded", total)
	case own != "":
		st.Finished, st.Success = true, true
		st.Message = fmt.Sprintf("every pod of role %s, which declares the group, succeeded, and no pod of the group runs", own)
	case nonRetriable != "" && running == 0:
		st.Finished, st.Message = true, fmt.Sprintf("pod %s failed and is not retriable in its group (%s: \"false\")",
			nonRetriable, podkeys.RetriableInGroupAnnotation)
	}
	if st.Finished {
		st.Missing = map[string]int32{}
	}
	return st, nil
}

// ownRoleSucceeded returns the role of the pods declaring a group when
// all of that role's pods succeeded: a declared group is done when its
// driver is, whatever became of the workers it created. Empty otherwise.
func ownRoleSucceeded(run Run, podSets map[string]int32, how Roles, pods []*corev1.Pod) string {
	own := ""
	var succeeded int32
	for _, p := range pods {
		if !run.Owns(p) {
			continue
		}
		role, err := how.Of(p)
		if err != nil {
			continue
		}
		if _, declares := p.Annotations[podkeys.PodGroupSetsAnnotation]; declares {
			own = role
		}
		if p.Status.Phase == corev1.PodSucceeded && p.Annotations[podkeys.PodGroupSetsAnnotation] != "" {
			succeeded++
		}
	}
	if own == "" || succeeded < podSets[own] {
		return ""
	}
	return own
}

// FailedAt is when pod ended: the latest finish of its containers, else
// its creation.
func FailedAt(pod *corev1.Pod) time.Time {
	at := pod.CreationTimestamp.Time
	for _, statuses := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, cs := range statuses {
			if t := cs.State.Terminated; t != nil && t.FinishedAt.After(at) {
				at = t.FinishedAt.Time
			}
		}
	}
	return at
}
