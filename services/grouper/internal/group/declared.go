package group

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/sluice-dev/sluice/pkg/podgroup"
	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/services/grouper/internal/workload"
)

// Roles says how the pods of a group map to its workload's pod sets.
type Roles struct {
	// Of returns the name of the pod set a pod belongs to.
	Of func(*corev1.Pod) (string, error)
	// Declared is set for a group declared by pod-group-sets (KEP-976
	// Story 3): its roles are named by label, a role's pods are created
	// over time (fewer than its count is not "missing"), and the group ends
	// with the pods of the declaring pod's own role.
	Declared bool
	// WaitExtra is set for a group sized by its PodGroup's gang: pods
	// beyond their role's count wait, gated, for a place (a failed pod's)
	// rather than being deleted — a gang's size is its minimum, not a
	// limit the pods' creator agreed to.
	WaitExtra bool
}

// RolesOf returns how pods of a group map to pod sets: by their role label
// in a declared group, by role hash in a group created beforehand.
func RolesOf(pods []*corev1.Pod) Roles {
	return rolesFor(slices.ContainsFunc(pods, podgroup.Declared), slices.ContainsFunc(pods, podgroup.GangSized))
}

// rolesFor returns the Roles of a group with a declared pod, or with a
// pod sized by its PodGroup's gang.
func rolesFor(declared, gangSized bool) Roles {
	if declared {
		return Roles{Of: workload.DeclaredRole, Declared: true}
	}
	return Roles{Of: workload.RoleHash, WaitExtra: gangSized}
}

// declaring returns the active pods that carry the group's declaration.
func declaring(pods []*corev1.Pod) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range pods {
		if _, ok := p.Annotations[podkeys.PodGroupSetsAnnotation]; ok && podgroup.Active(p) {
			out = append(out, p)
		}
	}
	return out
}

// assembleDeclared reads a declared group before admission. Its workload
// is known as soon as the declaring pod is there: the declaration gives
// every pod set. Pods of a role beyond its count are excess, the youngest
// first, and pods naming a role the declaration lacks are strangers; both
// are deleted. Workers created before the declaring pod wait for it.
func assembleDeclared(namespace, name string, pods []*corev1.Pod) (*Assembly, error) {
	group := namespace + "/" + name
	queue, err := sameQueueing(group, pods)
	if err != nil {
		return nil, err
	}
	decls := declaring(pods)
	if len(decls) == 0 {
		// Workers only: the pod that declares the group is not there yet.
		return &Assembly{Queue: queue, Members: Ordered(activeOf(pods))}, nil
	}
	if _, err := same(group, podkeys.PodGroupSetsAnnotation, decls, func(p *corev1.Pod) string {
		return p.Annotations[podkeys.PodGroupSetsAnnotation]
	}); err != nil {
		return nil, err
	}
	Ordered(decls)
	sets, err := workload.Declaration(decls[0])
	if err != nil {
		return nil, fmt.Errorf("group %s: %w", group, err)
	}
	counts := map[string]int32{}
	for _, s := range sets {
		counts[s.Name] = s.Count
	}
	a := &Assembly{Queue: queue, TotalCount: podgroup.DeclaredCount(sets), Declared: podgroup.SetNames(sets)}
	byRole := map[string][]*corev1.Pod{}
	for _, p := range Ordered(activeOf(pods)) {
		role, err := workload.DeclaredRole(p)
		if err != nil {
			return nil, fmt.Errorf("group %s: %w", group, err)
		}
		if _, ok := counts[role]; !ok {
			a.Strangers = append(a.Strangers, p)
			continue
		}
		byRole[role] = append(byRole[role], p)
	}
	for _, s := range sets {
		members := byRole[s.Name]
		if n := int32(len(members)); n > s.Count {
			excess := slices.Clone(members[s.Count:])
			slices.Reverse(excess) // youngest first
			a.Excess = append(a.Excess, excess...)
			members = members[:s.Count]
		}
		a.Members = append(a.Members, members...)
	}
	Ordered(a.Members)
	if a.Workload, err = workload.ForDeclared(name, decls[0]); err != nil {
		return a, err
	}
	return a, nil
}

func activeOf(pods []*corev1.Pod) []*corev1.Pod {
	return slices.DeleteFunc(slices.Clone(pods), func(p *corev1.Pod) bool { return !podgroup.Active(p) })
}
