// Package roster holds the grouper's managed pods by workload, as the pod
// informer delivers them, so that a workload's pods are at hand without
// listing (and copying) the cache, and so that what was worked out from a
// group's pods can be kept until one of them changes in a way that
// matters: every workload carries versions that count its pods' changes
// by kind, and a group.Tally of them.
//
// The roster holds the cache's own objects, not copies: read them, never
// change them. It is fed by the pod event handler before the event's pod
// is queued, so a reconcile never sees a roster older than the event that
// woke it.
package roster

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sluice-dev/sluice/services/grouper/internal/group"
	"github.com/sluice-dev/sluice/services/grouper/internal/workload"
)

// Versions count the changes of a workload's pods. Each is a tick of one
// clock shared by all workloads, so a workload that goes and comes back
// never repeats a version.
type Versions struct {
	// Any changes with every change of any pod.
	Any uint64
	// Structure changes when a pod is added or removed, or its
	// group.Shape changes, or its claim changes other than by its gate
	// being lifted.
	Structure uint64
	// Claims changes when a pod's gate is lifted.
	Claims uint64
}

// Roster holds managed pods by workload. The zero Roster is not usable;
// call New.
type Roster struct {
	mu        sync.RWMutex
	clock     uint64
	workloads map[workload.Key]*pods
	// names finds a pod by name: its workload and uid.
	names map[types.NamespacedName]ref
}

type ref struct {
	key workload.Key
	uid types.UID
}

type pods struct {
	members  map[types.UID]member
	versions Versions
	tally    group.Tally
}

type member struct {
	pod   *corev1.Pod
	shape group.Shape
	claim group.Claim
}

// New returns an empty Roster.
func New() *Roster {
	return &Roster{workloads: map[workload.Key]*pods{}, names: map[types.NamespacedName]ref{}}
}

// Set adds pod, or replaces the pod of its name it held.
func (r *Roster) Set(pod *corev1.Pod) {
	key, ok := workload.KeyFor(pod)
	if !ok {
		return
	}
	m := member{pod: pod, shape: group.ShapeOf(pod), claim: group.ClaimOf(pod)}
	name := types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}
	r.mu.Lock()
	defer r.mu.Unlock()
	// Another pod of the name (deleted without the roster being told), or
	// the pod under another workload (its group label edited), goes.
	if was, ok := r.names[name]; ok && (was.key != key || was.uid != pod.UID) {
		r.removeLocked(name, was)
	}
	r.names[name] = ref{key: key, uid: pod.UID}
	w := r.workloads[key]
	if w == nil {
		w = &pods{members: map[types.UID]member{}}
		r.workloads[key] = w
	}
	old, had := w.members[pod.UID]
	if had && pod.ResourceVersion != "" && old.pod.ResourceVersion == pod.ResourceVersion {
		// A resync: nothing changed.
		w.members[pod.UID] = m
		return
	}
	r.clock++
	w.versions.Any = r.clock
	switch {
	case !had || old.shape != m.shape:
		w.versions.Structure = r.clock
	case old.claim != m.claim && old.claim.Gated && !m.claim.Gated:
		w.versions.Claims = r.clock
	case old.claim != m.claim:
		// Only an ungate changes a claim: anything else is worked out
		// afresh.
		w.versions.Structure = r.clock
	}
	if had {
		w.tally.Remove(old.shape, old.claim)
	}
	w.members[pod.UID] = m
	w.tally.Add(m.shape, m.claim)
}

// Delete removes pod, unless the roster holds a newer pod of its name.
func (r *Roster) Delete(pod *corev1.Pod) {
	name := types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}
	r.mu.Lock()
	defer r.mu.Unlock()
	if was, ok := r.names[name]; ok && (pod.UID == "" || was.uid == pod.UID) {
		r.removeLocked(name, was)
	}
}

// removeLocked removes the pod called name, found at was.
func (r *Roster) removeLocked(name types.NamespacedName, was ref) {
	delete(r.names, name)
	w := r.workloads[was.key]
	if w == nil {
		return
	}
	if old, ok := w.members[was.uid]; ok {
		delete(w.members, was.uid)
		w.tally.Remove(old.shape, old.claim)
		r.clock++
		w.versions.Any, w.versions.Structure = r.clock, r.clock
	}
	if len(w.members) == 0 {
		delete(r.workloads, was.key)
	}
}

// Pods returns the pods of workload key, in no order.
func (r *Roster) Pods(key workload.Key) []*corev1.Pod {
	pods, _ := r.Snapshot(key, nil)
	return pods
}

// Snapshot returns the pods of workload key, in no order, the versions
// they are at, and what f (if not nil) reads of their tally, at once. f
// must not keep the tally.
func (r *Roster) Snapshot(key workload.Key, f func(*group.Tally)) ([]*corev1.Pod, Versions) {
	return r.read(key, true, f)
}

// Look returns the versions of workload key's pods and what f (if not
// nil) reads of their tally, at once. f must not keep the tally.
func (r *Roster) Look(key workload.Key, f func(*group.Tally)) Versions {
	_, v := r.read(key, false, f)
	return v
}

// read is Snapshot, with the pods only when withPods is set.
func (r *Roster) read(key workload.Key, withPods bool, f func(*group.Tally)) ([]*corev1.Pod, Versions) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	w := r.workloads[key]
	if w == nil {
		w = &pods{}
	}
	if f != nil {
		f(&w.tally)
	}
	if !withPods || len(w.members) == 0 {
		return nil, w.versions
	}
	out := make([]*corev1.Pod, 0, len(w.members))
	for _, m := range w.members {
		out = append(out, m.pod)
	}
	return out, w.versions
}

// Len returns the number of pods of workload key.
func (r *Roster) Len(key workload.Key) int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if w := r.workloads[key]; w != nil {
		return len(w.members)
	}
	return 0
}

// Each calls f with every pod it holds, workload by workload; f must not
// call the Roster.
func (r *Roster) Each(f func(workload.Key, *corev1.Pod)) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for key, w := range r.workloads {
		for _, m := range w.members {
			f(key, m.pod)
		}
	}
}
