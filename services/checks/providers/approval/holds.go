package approval

import (
	"maps"
	"slices"
)

// holds indexes the evaluation keys the check was asked about, until
// their Release, by the workload they belong to.
type holds struct {
	byKey map[string]Ref
	byRef map[Ref]map[string]struct{}
}

func newHolds() holds {
	return holds{byKey: map[string]Ref{}, byRef: map[Ref]map[string]struct{}{}}
}

// add records that key belongs to ref.
func (h holds) add(key string, ref Ref) {
	if old, ok := h.byKey[key]; ok {
		if old == ref {
			return
		}
		h.remove(key)
	}
	h.byKey[key] = ref
	keys := h.byRef[ref]
	if keys == nil {
		keys = map[string]struct{}{}
		h.byRef[ref] = keys
	}
	keys[key] = struct{}{}
}

// remove forgets key; an unknown key is fine.
func (h holds) remove(key string) {
	ref, ok := h.byKey[key]
	if !ok {
		return
	}
	delete(h.byKey, key)
	delete(h.byRef[ref], key)
	if len(h.byRef[ref]) == 0 {
		delete(h.byRef, ref)
	}
}

// keys returns the keys held for ref, sorted.
func (h holds) keys(ref Ref) []string {
	return slices.Sorted(maps.Keys(h.byRef[ref]))
}

// len is how many keys are held.
func (h holds) len() int { return len(h.byKey) }
