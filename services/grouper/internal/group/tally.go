package group

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/sluice-dev/sluice/pkg/podgroup"
	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/services/grouper/internal/podpatch"
	"github.com/sluice-dev/sluice/services/grouper/internal/workload"
)

// Claim is what a pod says of the run it takes part in (see Run.Owns): a
// gated pod takes part in whichever run admits it; an ungated one in the
// reservation, or the Workload, its ungate recorded.
type Claim struct {
	Gated       bool
	Reservation string
	UID         string
}

// ClaimOf returns pod's claim.
func ClaimOf(pod *corev1.Pod) Claim {
	if podpatch.HasGate(pod) {
		return Claim{Gated: true}
	}
	return Claim{
		Reservation: pod.Annotations[podkeys.ReservationAnnotation],
		UID:         pod.Annotations[podkeys.WorkloadUIDAnnotation],
	}
}

// OwnsClaim reports whether a pod claiming c takes part in run.
func (run Run) OwnsClaim(c Claim) bool {
	if c.Gated {
		return true
	}
	if c.Reservation != "" && run.Reservation != "" {
		return c.Reservation == run.Reservation
	}
	return c.UID == "" || run.UID == "" || c.UID == run.UID
}

// Shape is what observing an admitted group reads of one of its pods,
// apart from its Claim: as long as no pod of a group changes its Shape,
// and none is added or removed, an Observe of the group under one
// admission gives the same State (see State.CutByOrder for the claims).
// Fields that change as a pod runs (its node, its phase between Pending
// and Running) are reduced to what Observe tells apart, so that pods
// starting do not change their Shape.
type Shape struct {
	Name    string
	Created int64
	Queue   string
	// RoleHash is the pod's role hash (workload.RoleHash); RoleLabel and
	// Sets are its role label and pod-group-sets annotation, from which a
	// declared group's roles are read.
	RoleHash, RoleLabel, Sets string
	Declares                  bool
	// TotalCount is the pod-group-total-count annotation ("" when absent).
	TotalCount          string
	Declared, GangSized bool
	Retriable           bool
	// Phase is Succeeded, Failed, or empty for any other phase.
	Phase                       corev1.PodPhase
	Active, Deleting, Finalizer bool
	// FailedAt is FailedAt's Unix nanoseconds, for a failed pod only.
	FailedAt int64
}

// ShapeOf returns pod's Shape.
func ShapeOf(pod *corev1.Pod) Shape {
	s := Shape{
		Name:       pod.Name,
		Created:    pod.CreationTimestamp.UnixNano(),
		Queue:      pod.Labels[podkeys.QueueNameLabel],
		RoleLabel:  pod.Labels[podkeys.PodGroupRoleLabel],
		TotalCount: pod.Annotations[podkeys.PodGroupTotalCountAnnotation],
		Declared:   podgroup.Declared(pod),
		GangSized:  podgroup.GangSized(pod),
		Retriable:  podgroup.Retriable(pod),
		Active:     podgroup.Active(pod),
		Deleting:   pod.DeletionTimestamp != nil,
		Finalizer:  podpatch.HasFinalizer(pod),
	}
	s.Sets, s.Declares = pod.Annotations[podkeys.PodGroupSetsAnnotation]
	// A role hash that cannot be computed fails Observe, which says why.
	s.RoleHash, _ = workload.RoleHash(pod)
	switch pod.Status.Phase {
	case corev1.PodSucceeded:
		s.Phase = corev1.PodSucceeded
	case corev1.PodFailed:
		s.Phase = corev1.PodFailed
		s.FailedAt = FailedAt(pod).UnixNano()
	}
	return s
}

// released reports whether a pod of this shape is Released (see
// podgroup.Released).
func (s Shape) released() bool {
	return (s.Phase == corev1.PodSucceeded || s.Phase == corev1.PodFailed) && !s.Finalizer
}

// Tally counts, over a group's pods, what decides without reading them
// all whether the group is still short of pods, how its pods map to pod
// sets, and how many of them take part in a run. The zero Tally is an
// empty group; Add and Remove keep it, and Remove must be given what Add
// was.
type Tally struct {
	pods                int
	declared, gangSized int
	// live counts the pods that are not Released; the counts below are
	// over them.
	live                        int
	liveDeclared, liveGangSized int
	queues, totalCounts         map[string]int
	// active counts the live pods that are active, and roles their role
	// hashes.
	active int
	roles  map[string]int
	// gated counts the gated pods, ungated the others by claim.
	gated   int
	ungated map[Claim]int
}

// Add counts a pod of shape s and claim c.
func (t *Tally) Add(s Shape, c Claim) { t.count(s, c, 1) }

// Remove takes back what Add counted.
func (t *Tally) Remove(s Shape, c Claim) { t.count(s, c, -1) }

func (t *Tally) count(s Shape, c Claim, n int) {
	t.pods += n
	if s.Declared {
		t.declared += n
	}
	if s.GangSized {
		t.gangSized += n
	}
	if c.Gated {
		t.gated += n
	} else {
		t.ungated = countIn(t.ungated, c, n)
	}
	if s.released() {
		return
	}
	t.live += n
	if s.Declared {
		t.liveDeclared += n
	}
	if s.GangSized {
		t.liveGangSized += n
	}
	t.queues = countIn(t.queues, s.Queue, n)
	t.totalCounts = countIn(t.totalCounts, s.TotalCount, n)
	if s.Active {
		t.active += n
		t.roles = countIn(t.roles, s.RoleHash, n)
	}
}

// countIn adds n to m[k], dropping keys that fall to zero.
func countIn[K comparable](m map[K]int, k K, n int) map[K]int {
	if m == nil {
		m = map[K]int{}
	}
	if m[k] += n; m[k] == 0 {
		delete(m, k)
	}
	return m
}

// Pods is the number of pods counted.
func (t *Tally) Pods() int { return t.pods }

// Roles returns how the group's pods map to pod sets, as RolesOf does
// for the pods counted.
func (t *Tally) Roles() Roles { return rolesFor(t.declared > 0, t.gangSized > 0) }

// GangSized reports whether a pod counted is sized by its PodGroup's gang.
func (t *Tally) GangSized() bool { return t.gangSized > 0 }

// Short reports whether Assemble would find a group created beforehand
// short of pods, without a problem to tell: its live pods agree on their
// queue and a valid total count, have no more roles than a workload may,
// and fewer of them are active than the count. Such a group has nothing
// to submit until another pod comes. False says only that Assemble must
// look.
func (t *Tally) Short() bool {
	if t.liveDeclared > 0 || t.liveGangSized > 0 || len(t.queues) != 1 || len(t.totalCounts) != 1 || len(t.roles) > MaxRoles {
		return false
	}
	for text := range t.totalCounts {
		total, err := podgroup.ParseTotalCount(text)
		return err == nil && int32(t.active) < total
	}
	return false
}

// Owned is the number of pods counted that take part in run.
func (t *Tally) Owned(run Run) int {
	n := t.gated
	for c, count := range t.ungated {
		if run.OwnsClaim(c) {
			n += count
		}
	}
	return n
}
