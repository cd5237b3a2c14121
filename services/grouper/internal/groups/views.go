package groups

import (
	"context"
	"sync"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	"github.com/sluice-dev/sluice/services/grouper/internal/group"
	"github.com/sluice-dev/sluice/services/grouper/internal/workload"
)

// groupView is one group's views: the last assembly and observation
// worked out from its pods, with the roster versions they were worked out
// at. A group's pods wake one by one and each asks the same question: each
// view is worked out once per change of the group that matters, not once
// per pod, so a group of N pods costs O(N) per change, not per pod. Its
// lock is held while a view is worked out, so the group's other pods wait
// for it rather than repeat it.
type groupView struct {
	mu       sync.Mutex
	assembly *assemblyView
	observed *observedView
}

type assemblyView struct {
	version  uint64
	gangSize int32
	a        *group.Assembly
	err      error
}

type observedView struct {
	// decision is the admission observed; a repeated identical decision is
	// the same pointer (see decisions.Store.Put).
	decision  *admitterv1.Decision
	structure uint64
	claims    uint64
	// owned is how many of the pods took part in the run.
	owned int
	state *group.State
}

// assemble returns the Assembly of a group not admitted yet (see
// group.Assemble), worked out again only when a pod of the group changed
// or the gang's size became known. A group still short of pods (see
// group.Tally.Short) is not assembled at all: short says so.
func (p *Path) assemble(ctx context.Context, key workload.Key) (a *group.Assembly, short bool, err error) {
	gangSized := false
	p.Roster.Look(key, func(t *group.Tally) { short, gangSized = t.Short(), t.GangSized() })
	if short {
		return nil, true, nil
	}
	size, err := p.gangSize(ctx, key, gangSized)
	if err != nil {
		return nil, false, err
	}
	view := p.known.view(key)
	view.mu.Lock()
	defer view.mu.Unlock()
	versions := p.Roster.Look(key, nil)
	if av := view.assembly; av != nil && av.version == versions.Any && av.gangSize == size {
		return av.a, false, av.err
	}
	pods, versions := p.Roster.Snapshot(key, nil)
	a, err = group.Assemble(key.Namespace, key.Name, pods, size)
	view.assembly = &assemblyView{version: versions.Any, gangSize: size, a: a, err: err}
	return a, false, err
}

// observe returns the State of an admitted group under the admission d
// (see group.Observe), worked out again only when the group's structure
// changed, or its claims changed in a way that can change the State: a
// pod ungated under another run, or any ungate when the State cut pods by
// their order. The views keep no list of the group's pods: it would keep
// the pods as they were before their ungates alive beside the cache's.
func (p *Path) observe(key workload.Key, d *admitterv1.Decision) (*group.State, error) {
	run := group.Run{UID: d.GetWorkload().GetUid(), Reservation: d.GetReservationId()}
	view := p.known.view(key)
	view.mu.Lock()
	defer view.mu.Unlock()
	view.assembly = nil // admitted: it is not submitted again
	owned := 0
	versions := p.Roster.Look(key, func(t *group.Tally) { owned = t.Owned(run) })
	if ov := view.observed; ov != nil && ov.decision == d && ov.structure == versions.Structure &&
		(ov.claims == versions.Claims || (!ov.state.CutByOrder && ov.owned == owned)) {
		return ov.state, nil
	}
	var roles group.Roles
	pods, versions := p.Roster.Snapshot(key, func(t *group.Tally) { roles, owned = t.Roles(), t.Owned(run) })
	state, err := group.Observe(run, d.GetPodSetCounts(), roles, pods)
	if err != nil {
		view.observed = nil
		return nil, err
	}
	view.observed = &observedView{decision: d, structure: versions.Structure, claims: versions.Claims, owned: owned, state: state}
	return state, nil
}
