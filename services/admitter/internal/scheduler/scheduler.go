// Package scheduler decides which pending workloads get quota, and in what
// order. It is kept up to date by events — every version of a Workload the
// admitter stores, and every ClusterQueue, LocalQueue, ResourceFlavor,
// AdmissionCheck, Cohort and Namespace the informers see — and holds each
// pending workload in its ClusterQueue's ordered queue and each
// reservation's usage in its ClusterQueue's total and in the quota tree
// through which ClusterQueues of a cohort borrow and lend. A cycle
// therefore costs the heads it tries, not every workload known: workloads that did not fit are parked until
// something that could change the answer happens (quota freed, a queue or
// flavor changed).
//
// A cycle takes one head per ClusterQueue at a time and admits the heads in
// the order users of Kueue know: higher priority first, then the ones that
// fit without borrowing, then the ones that have waited longest; with fair
// sharing on, the heads of a cohort tree go by their queues' weighted
// shares instead (see fairOrder). A head that does not fit, in a queue whose preemption policy allows, claims
// victims (see package preemption) and waits for them to stop; a claimed
// victim is not counted on by another preemptor. It does no I/O: it
// returns a Plan — reservations to write, workloads to evict and messages
// telling waiting workloads why — and counts the reservations as assumed
// until the admitter's write comes back as a new version of the workload
// (or Unassume says the write was lost).
package scheduler

import (
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/services/admitter/internal/queue"
	"github.com/sluice-dev/sluice/services/admitter/internal/quota"
	"github.com/sluice-dev/sluice/services/admitter/internal/shrink"
	"github.com/sluice-dev/sluice/services/admitter/internal/store"
	"github.com/sluice-dev/sluice/services/admitter/internal/workload"
)

// Scheduler is the admitter's incremental view of queues and usage. It is
// safe for concurrent use.
type Scheduler struct {
	mu            sync.Mutex
	clusterQueues map[string]*clusterQueue
	// cohorts are the Cohort objects; tree is the quota every ClusterQueue
	// and Cohort declares and what the ClusterQueues hold, shared through
	// cohorts.
	cohorts map[string]*v1alpha1.Cohort
	tree    *quota.Tree
	// freedRoots are the root Cohorts in whose trees quota was given back
	// since the last cycle: every ClusterQueue below may borrow it, so the
	// next cycle wakes them all, once per tree however many workloads
	// finished.
	freedRoots map[string]bool
	// ghosts are deleted ClusterQueues whose workloads still hold quota:
	// they stay in the tree, without quota, so that what they hold keeps
	// counting in their cohort until it is given back.
	ghosts map[string]bool
	// drainingCQs and drainingLQs are the queues whose stopPolicy is
	// HoldAndDrain, so that a cycle looks at their workloads alone.
	drainingCQs map[string]bool
	drainingLQs map[types.NamespacedName]bool

	localQueues map[types.NamespacedName]*localQueue
	flavors     map[string]*v1alpha1.ResourceFlavor
	checks      map[string]*v1alpha1.AdmissionCheck
	namespaces  map[string]labels.Set
	workloads   map[types.NamespacedName]*entry
	// byLocalQueue indexes the workloads by the LocalQueue they name, and
	// byAdmission the reserving ones by the ClusterQueue of their admission,
	// so a queue event re-places only the workloads it concerns.
	byLocalQueue map[types.NamespacedName]map[types.NamespacedName]*entry
	byAdmission  map[string]map[types.NamespacedName]*entry
	// claims are the victims of preemption, each with the pending
	// workload it was preempted for (see claimant).
	claims map[types.NamespacedName]types.NamespacedName
	// victimPools are the candidate victims of preemption, by tree,
	// gathered once a cycle (see victimPool); each cycle starts afresh.
	victimPools map[poolKey]*victimPool
	// blockedNotes are this cycle's answers of preemption.Blocked, by what
	// they depend on (see preemptor.blocked); each cycle starts afresh.
	blockedNotes map[string]string
	// held are the pending workloads whose requeue time is still ahead.
	held entryHeap
	// messages are the waiting workloads whose message changed since the
	// last cycle (a queue that does not exist, a namespace that does not
	// match, ...): the next Plan carries them.
	messages map[types.NamespacedName]*entry
	// retired remembers the finished workloads dropped from memory, by
	// uid and resourceVersion, so a late older version cannot bring one
	// back; Forget clears the mark when the Workload is deleted.
	retired map[types.NamespacedName]mark
	// fairSharing is the fair-sharing setting (see WithFairSharing).
	fairSharing FairSharing
	// holds are the free quota held for waiting preemptors during a
	// cycle (see holdForPreemptors).
	holds map[*entry]*quotaHold
	// lastHeld are the preemptors the last cycle held quota for, at its
	// start or its end, with their ClusterQueues.
	lastHeld map[*entry]string
}

type mark struct {
	uid             types.UID
	resourceVersion string
}

// New returns an empty Scheduler, adjusted by opts.
func New(opts ...Option) *Scheduler {
	s := &Scheduler{
		clusterQueues: map[string]*clusterQueue{},
		cohorts:       map[string]*v1alpha1.Cohort{},
		tree:          quota.NewTree(),
		freedRoots:    map[string]bool{},
		ghosts:        map[string]bool{},
		drainingCQs:   map[string]bool{},
		drainingLQs:   map[types.NamespacedName]bool{},
		localQueues:   map[types.NamespacedName]*localQueue{},
		flavors:       map[string]*v1alpha1.ResourceFlavor{},
		checks:        map[string]*v1alpha1.AdmissionCheck{},
		namespaces:    map[string]labels.Set{},
		workloads:     map[types.NamespacedName]*entry{},
		byLocalQueue:  map[types.NamespacedName]map[types.NamespacedName]*entry{},
		byAdmission:   map[string]map[types.NamespacedName]*entry{},
		messages:      map[types.NamespacedName]*entry{},
		claims:        map[types.NamespacedName]types.NamespacedName{},
		held:          newEntryHeap(byRequeueTime),
		retired:       map[types.NamespacedName]mark{},
		holds:         map[*entry]*quotaHold{},
		lastHeld:      map[*entry]string{},
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// placement is where a workload counts.
type placement int

const (
	// unplaced: finished, inactive or deleted without a reservation, or
	// not placed yet.
	unplaced placement = iota
	// waiting: cannot be queued at all (no such LocalQueue, ...); the
	// entry's message says why.
	waiting
	// held: queued in its ClusterQueue, but not before its requeue time.
	held
	// queued: in its ClusterQueue's heap, to be tried.
	queued
	// parked: tried, and did not fit; tried again when quota frees or the
	// queue changes. retrying: parked, and tried again in the current pass.
	// stuck: no freed quota can help; only a change of the queue or its
	// flavors brings it back.
	parked
	retrying
	stuck
	// reserved: holds quota (status.admission, or a reservation the
	// current cycle assumed).
	reserved
)

// entry is one workload as the scheduler sees it.
type entry struct {
	key        types.NamespacedName
	wl         *v1alpha1.Workload
	fp         fingerprint
	lq         types.NamespacedName
	where      placement
	cq         *clusterQueue // where it counts (pending or reserved)
	countsInLQ bool
	lqCounted  countKind          // how its LocalQueue counts it
	counted    countKind          // how its ClusterQueue counts it
	usage      quota.Usage        // reserved only
	amounts    map[quota.FR]int64 // usage as counted in the quota tree
	message    string             // waiting, parked and stuck: why
	sent       string             // the message last handed out in a Plan
	admittedIn string             // reserved only: the ClusterQueue of its admission
	shape      string             // the resources it requests (see shapeOf)
	podSetsKey string             // what it asks of the quota (see podSetsKey)
	fitKey     string             // parked only: its group (see fitKeyOf)
	heapIndex  int                // in whichever heap holds it
	assumed    bool
	// evicted is the resourceVersion last handed out to be evicted.
	evicted string
	// awaits is, for a head that claimed victims, the usage their quota
	// makes room for.
	awaits map[quota.FR]int64
}

// fingerprint is what decides a workload's placement; versions with the
// same fingerprint (a new message, new check states) keep their place.
type fingerprint struct {
	uid          types.UID
	generation   int64
	deleting     bool
	finished     bool
	admitted     bool
	reservation  string
	clusterQueue string
	requeueAt    time.Time
	reclaimable  string
	// waitingForPods: a pod group's pods are missing (failed and not
	// replaced, or deleted by an eviction and not created again).
	waitingForPods bool
}

func fingerprintOf(wl *v1alpha1.Workload) fingerprint {
	fp := fingerprint{
		uid:            wl.UID,
		generation:     wl.Generation,
		deleting:       workload.IsDeleting(wl),
		finished:       workload.IsFinished(wl),
		admitted:       workload.IsAdmitted(wl),
		waitingForPods: meta.IsStatusConditionTrue(wl.Status.Conditions, v1alpha1.WorkloadWaitingForReplacementPods),
	}
	if a := wl.Status.Admission; a != nil {
		fp.reservation, fp.clusterQueue = a.ReservationID, a.ClusterQueue
	}
	if rs := wl.Status.RequeueState; rs != nil && rs.RequeueAt != nil {
		fp.requeueAt = rs.RequeueAt.Time
	}
	for _, r := range wl.Status.ReclaimablePods {
		fp.reclaimable += fmt.Sprintf("%s=%d,", r.Name, r.Count)
	}
	return fp
}

// Observe records a version of a workload. Older versions than the one
// held are ignored, so callers racing each other cannot move it back.
func (s *Scheduler) Observe(wl *v1alpha1.Workload) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := workload.Key(wl)
	if m, ok := s.retired[key]; ok && m.uid == wl.UID && !store.Newer(wl.ResourceVersion, m.resourceVersion) {
		return
	}
	e := s.workloads[key]
	if e != nil && e.wl.UID == wl.UID && !store.Newer(wl.ResourceVersion, e.wl.ResourceVersion) {
		return
	}
	fp := fingerprintOf(wl)
	if e != nil && e.fp == fp && !e.assumed {
		e.wl = wl
		return
	}
	if e == nil {
		if fp.finished {
			s.retired[key] = mark{wl.UID, wl.ResourceVersion}
			return
		}
		e = &entry{key: key, heapIndex: -1}
		s.workloads[key] = e
	}
	e.wl, e.fp, e.assumed = wl, fp, false
	e.shape, e.podSetsKey = shapeOf(wl), podSetsKey(wl)
	s.place(e)
}

// Forget drops a workload that is gone; uid guards against forgetting a
// newer incarnation of the name (empty matches any).
func (s *Scheduler) Forget(key types.NamespacedName, uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m, ok := s.retired[key]; ok && (uid == "" || m.uid == uid) {
		shrink.Delete(&s.retired, key)
	}
	e := s.workloads[key]
	if e == nil || (uid != "" && e.wl.UID != uid) {
		return
	}
	s.retire(e)
	shrink.Delete(&s.retired, key)
}

// Unassume undoes the reservation a Plan assumed for wl when the write
// that was to record it did not land. A newer version of the workload
// already replaced the assumption; then nothing changes.
func (s *Scheduler) Unassume(wl *v1alpha1.Workload) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.workloads[workload.Key(wl)]
	if e == nil || !e.assumed || e.wl != wl {
		return
	}
	e.assumed = false
	s.place(e)
}

// retire forgets e entirely.
func (s *Scheduler) retire(e *entry) {
	s.unplace(e)
	s.unindex(e)
	shrink.Delete(&s.workloads, e.key)
	shrink.Delete(&s.messages, e.key)
}

func (s *Scheduler) index(e *entry) {
	m := s.byLocalQueue[e.lq]
	if m == nil {
		m = map[types.NamespacedName]*entry{}
		s.byLocalQueue[e.lq] = m
	}
	m[e.key] = e
}

func (s *Scheduler) unindex(e *entry) {
	if m := s.byLocalQueue[e.lq]; m != nil {
		delete(m, e.key)
		if len(m) == 0 {
			delete(s.byLocalQueue, e.lq)
		}
	}
}

// place computes where e counts from its workload and the queues, undoing
// where it counted before. Quota a reservation gave back wakes the
// ClusterQueue's parked workloads.
func (s *Scheduler) place(e *entry) {
	if e.assumed {
		s.keepAssumed(e)
		return
	}
	prevCQ, prevUsage, prevIn, prevRoot := (*clusterQueue)(nil), quota.Usage(nil), "", ""
	if e.where == reserved {
		prevCQ, prevUsage, prevIn = e.cq, e.usage, e.admittedIn
		if e.amounts != nil {
			prevRoot = s.tree.Root(prevIn)
		}
	}
	s.unplace(e)
	wl := e.wl
	if lq := (types.NamespacedName{Namespace: wl.Namespace, Name: wl.Spec.QueueName}); lq != e.lq {
		s.unindex(e)
		e.lq = lq
	}
	s.index(e)
	defer func() {
		gaveBack := e.where != reserved || e.admittedIn != prevIn || freed(prevUsage, e.usage)
		switch {
		case prevCQ != nil && (e.cq != prevCQ || gaveBack):
			s.quotaFreed(prevCQ)
		case prevCQ == nil && prevRoot != "" && gaveBack:
			// A deleted ClusterQueue's workload gave its quota back to
			// the cohort.
			s.freedRoots[prevRoot] = true
		}
	}()

	switch {
	case e.fp.finished:
		s.retire(e)
		s.retired[e.key] = mark{wl.UID, wl.ResourceVersion}
		return
	case wl.Status.Admission != nil:
		s.reserve(e, wl.Status.Admission.ClusterQueue, quota.WorkloadUsage(wl))
		return
	case !workload.IsActive(wl) || e.fp.deleting:
		return
	case e.fp.waitingForPods:
		// Quota goes to a group only once its pods are all there again.
		return
	}
	lq := s.localQueues[e.lq]
	if lq == nil {
		s.wait(e, "LocalQueue "+wl.Spec.QueueName+" doesn't exist")
		return
	}
	e.countsInLQ, e.lqCounted = true, countPending
	lq.counts.add(countPending)
	cq := s.clusterQueues[lq.lq.Spec.ClusterQueue]
	switch {
	case cq == nil:
		s.wait(e, "ClusterQueue "+lq.lq.Spec.ClusterQueue+" doesn't exist")
		return
	case stopped(lq.lq.Spec.StopPolicy):
		s.wait(e, "LocalQueue "+lq.lq.Name+" is stopped (stopPolicy "+string(*lq.lq.Spec.StopPolicy)+")")
		return
	case !cq.selector.Empty() && !cq.selector.Matches(s.namespaces[wl.Namespace]):
		s.wait(e, "namespace "+wl.Namespace+" doesn't match the namespaceSelector of ClusterQueue "+cq.name)
		return
	}
	e.cq = cq
	e.counted = countPending
	cq.counts.add(countPending)
	if !queue.ReadyAt(wl, time.Now()).IsZero() {
		e.where = held
		s.held.push(e)
		return
	}
	s.enqueue(cq, e)
}

// keepAssumed places again a reservation a cycle assumed, where it was
// assumed: its write may land at any moment, so until its answer (Observe
// of a newer version, or Unassume) its quota stays taken, whatever queue
// event re-places the workloads of its queue.
func (s *Scheduler) keepAssumed(e *entry) {
	name, usage := e.admittedIn, e.usage
	s.unplace(e)
	s.reserve(e, name, usage)
}

// reserve counts e as holding usage in ClusterQueue name (which may not
// exist: then only its LocalQueue counts it, and the reservation is found
// under the name when the queue comes).
func (s *Scheduler) reserve(e *entry, name string, usage quota.Usage) {
	cq := s.clusterQueues[name]
	kind := countReserving
	if e.fp.admitted {
		kind = countAdmitted
	}
	e.where, e.usage, e.counted = reserved, usage, kind
	e.sent = "" // the reservation's write replaces any waiting message
	if lq := s.localQueues[e.lq]; lq != nil {
		e.countsInLQ, e.lqCounted = true, kind
		lq.counts.add(kind)
	}
	e.admittedIn = name
	m := s.byAdmission[e.admittedIn]
	if m == nil {
		m = map[types.NamespacedName]*entry{}
		s.byAdmission[e.admittedIn] = m
	}
	m[e.key] = e
	if cq != nil {
		e.cq = cq
		cq.usage.Add(usage)
		cq.counts.add(kind)
	}
	if s.tree.HasClusterQueue(name) {
		e.amounts = quota.Amounts(usage)
		s.tree.AddUsage(name, e.amounts)
	}
}

// quotaFreed wakes the parked workloads that quota given back by cq may
// fit: cq's own, and in a cohort those of every queue of its tree (at the
// next cycle).
func (s *Scheduler) quotaFreed(cq *clusterQueue) {
	cq.wake()
	if root := s.tree.Root(cq.name); root != "" {
		s.freedRoots[root] = true
	}
}

// wait records that e cannot be queued, and why.
func (s *Scheduler) wait(e *entry, message string) {
	e.where, e.message = waiting, message
	if e.sent != message {
		s.messages[e.key] = e
	}
}

// enqueue puts e in cq's heap, and makes sure the next cycle looks at cq.
func (s *Scheduler) enqueue(cq *clusterQueue, e *entry) {
	e.where, e.cq = queued, cq
	cq.heap.push(e)
	switch {
	case cq.blockedBy == nil:
	case queue.Compare(e.wl, cq.blockedBy.wl) < 0:
		// Ahead of the workload a StrictFIFO queue waits for: it is the
		// head now.
		cq.unblock()
	default:
		e.message = behindMessage(cq)
		if e.sent != e.message {
			s.messages[e.key] = e
		}
	}
}

// unplace undoes every count, usage and queue position of e.
func (s *Scheduler) unplace(e *entry) {
	if e.countsInLQ {
		if lq := s.localQueues[e.lq]; lq != nil {
			lq.counts.remove(e.lqCounted)
		}
	}
	switch e.where {
	case held:
		s.held.remove(e)
	case queued, parked, retrying, stuck:
		e.cq.take(e)
	case reserved:
		if m := s.byAdmission[e.admittedIn]; m != nil {
			delete(m, e.key)
			if len(m) == 0 {
				delete(s.byAdmission, e.admittedIn)
			}
		}
		if e.cq != nil {
			e.cq.usage.Sub(e.usage)
		}
		if e.amounts != nil {
			s.tree.RemoveUsage(e.admittedIn, e.amounts)
		}
	}
	if e.cq != nil {
		e.cq.counts.remove(e.counted)
	}
	e.where, e.cq, e.usage, e.amounts, e.admittedIn = unplaced, nil, nil, nil, ""
	e.countsInLQ, e.counted, e.lqCounted = false, countNone, countNone
	shrink.Delete(&s.messages, e.key)
}

// replace re-places every workload in entries (after a queue changed).
func (s *Scheduler) replace(entries map[types.NamespacedName]*entry) {
	for _, e := range entries {
		s.place(e)
	}
}

func stopped(p *v1alpha1.StopPolicy) bool { return p != nil && *p != v1alpha1.None }

func draining(p *v1alpha1.StopPolicy) bool { return p != nil && *p == v1alpha1.HoldAndDrain }
