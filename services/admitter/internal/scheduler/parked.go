package scheduler

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

// parkedSet holds a ClusterQueue's parked workloads grouped by fit key:
// the workloads of a group ask the quota the same thing, so within a pass
// over the parked workloads, once the first of a group in line does not
// fit, none behind it will. Those behind it come later in queue order:
// their priority is no higher and they queued no earlier, so preemption
// offers them no victim it did not offer the first. The group is then set
// aside until the pass ends, and the pass tries the next group's first
// instead: a pass costs a try per group rather than one per workload, and
// a deep queue of a few shapes of workload is tried in a few tries.
//
// A workload that claimed victims has a group of its own (see fitKeyOf):
// its claimed victims are candidates for it alone.
type parkedSet struct {
	groups map[string]*parkedGroup
	// heads orders the groups neither set aside nor empty by their first
	// workload in line.
	heads groupHeap
	// aside are the groups set aside in this pass.
	aside []*parkedGroup
	n     int
}

// parkedGroup is the parked workloads of one fit key, in queue order.
type parkedGroup struct {
	key     string
	entries entryHeap
	index   int // in heads; -1 when not there
	aside   bool
}

func newParkedSet() parkedSet {
	return parkedSet{groups: map[string]*parkedGroup{}, heads: newGroupHeap()}
}

// Len is the number of parked workloads, set aside or not.
func (p *parkedSet) Len() int { return p.n }

// active reports whether a group not set aside has a parked workload.
func (p *parkedSet) active() bool { return p.heads.Len() > 0 }

// peek is the first in line of the groups not set aside, or nil.
func (p *parkedSet) peek() *entry {
	if p.heads.Len() == 0 {
		return nil
	}
	return p.heads.items[0].entries.peek()
}

func (p *parkedSet) push(e *entry) {
	g := p.groups[e.fitKey]
	if g == nil {
		g = &parkedGroup{key: e.fitKey, entries: newEntryHeap(byQueueOrder), index: -1}
		p.groups[e.fitKey] = g
	}
	g.entries.push(e)
	p.n++
	p.reorder(g)
}

func (p *parkedSet) remove(e *entry) {
	g := p.groups[e.fitKey]
	if g == nil || !g.entries.contains(e) {
		return
	}
	g.entries.remove(e)
	p.n--
	if g.entries.Len() == 0 {
		delete(p.groups, g.key)
	}
	p.reorder(g)
}

// reorder puts g where its first in line belongs among the heads, or
// takes it out when it is empty or set aside.
func (p *parkedSet) reorder(g *parkedGroup) {
	switch in := p.heads.contains(g); {
	case g.aside || g.entries.Len() == 0:
		p.heads.remove(g)
	case in:
		p.heads.fix(g)
	default:
		p.heads.push(g)
	}
}

// setAside leaves the group of key out of the pass: a workload ahead of
// all of it in line, asking the same, did not fit.
func (p *parkedSet) setAside(key string) {
	g := p.groups[key]
	if g == nil || g.aside {
		return
	}
	g.aside = true
	p.aside = append(p.aside, g)
	p.reorder(g)
}

// restore brings back the groups set aside: the pass ended, or what
// dominated them changed.
func (p *parkedSet) restore() {
	for _, g := range p.aside {
		g.aside = false
		if p.groups[g.key] == g {
			p.reorder(g)
		}
	}
	p.aside = nil
}

// each calls f for every parked workload, in no particular order.
func (p *parkedSet) each(f func(*entry)) {
	for _, g := range p.groups {
		for _, e := range g.entries.items {
			f(e)
		}
	}
}

// groupHeap orders groups by their first workload in line.
type groupHeap = indexedHeap[*parkedGroup]

func newGroupHeap() groupHeap {
	return groupHeap{
		less: func(a, b *parkedGroup) bool { return byQueueOrder(a.entries.peek(), b.entries.peek()) },
		at:   func(g *parkedGroup) *int { return &g.index },
	}
}

// fitKeyOf is e's fit key while it is parked: its pod sets' (see
// podSetsKey), or one of its own once it claimed victims.
func fitKeyOf(e *entry) string {
	if e.awaits != nil {
		return "claims:" + e.key.String()
	}
	return e.podSetsKey
}

// podSetsKey names what the quota is asked for a workload: per pod set
// its name, count, requests, node selector and tolerations, which are all
// that flavor assignment and preemption weigh besides priority and queue
// order.
func podSetsKey(wl *v1alpha1.Workload) string {
	var b strings.Builder
	for _, ps := range wl.Spec.PodSets {
		writePodSetKey(&b, ps)
	}
	return b.String()
}

func writePodSetKey(b *strings.Builder, ps v1alpha1.PodSet) {
	fmt.Fprintf(b, "%s*%d{", ps.Name, ps.Count)
	for _, res := range slices.Sorted(maps.Keys(ps.Template.Requests)) {
		q := ps.Template.Requests[res]
		fmt.Fprintf(b, "%s=%s,", res, q.String())
	}
	b.WriteString("|")
	for _, k := range slices.Sorted(maps.Keys(ps.Template.NodeSelector)) {
		fmt.Fprintf(b, "%s=%s,", k, ps.Template.NodeSelector[k])
	}
	b.WriteString("|")
	for _, t := range ps.Template.Tolerations {
		fmt.Fprintf(b, "%s:%s:%s:%s,", t.Key, t.Operator, t.Value, t.Effect)
	}
	b.WriteString("}")
}
