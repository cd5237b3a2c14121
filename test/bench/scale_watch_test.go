package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
)

// scaleWatch follows a scale run from informers: when each pod was ungated
// and ended, when its Workload was admitted and how often, whether it was
// preempted; and it checks quota two ways. From the ClusterQueues' and
// Cohorts' status, every write of which the informers see: no queue
// reserves more than its nominal quota and borrowingLimit, no cohort more
// than its pooled quota. From the pods: the cpu of the pods that hold
// quota (ungated, not ended, and not deleted before they were bound: the
// API server binds no pod being deleted, so such a pod never runs) stays
// within the same limits at every pod event. A pod is ungated only after
// its admission is written, and quota comes free only after the pod that
// held it has ended or can no longer run (a finished Workload, or a
// preempted one whose pods have stopped), so in the order the API server
// stores pod changes, which one watch delivers, the two never overlap
// unless quota was handed out twice.
type scaleWatch struct {
	classes []scaleClass
	queues  []scaleQueue
	cohorts []string
	pods    []scalePod
	limits  scaleLimits
	// index finds a pod by namespace/name, queueIndex a ClusterQueue and
	// cohortIndex a Cohort by name. Read-only once made.
	index       map[string]int
	queueIndex  map[string]int
	cohortIndex map[string]int

	mu sync.Mutex
	// By pod: when first seen ungated and admitted, whether it has ended
	// (terminal or deleted), holds quota now, was preempted; whether its
	// Workload is admitted now, was evicted since its last admission, and
	// the reservation of each of its admissions; the reservation the pod
	// was released (ungated) under.
	ungated, admitted     []time.Time
	ended, holding        []bool
	preempted, admittedIs []bool
	evictedSince          []bool
	reservations          [][]string
	ungatedUnder          []string
	admittedWhileAdmitted []string
	// waitingIs: the pod's Workload exists, is neither admitted nor
	// finished; nWaiting counts them.
	waitingIs []bool
	nWaiting  int
	// history is each Workload's states as seen (its conditions in short),
	// a few at most, to say what happened to one admitted twice.
	history [][]string
	// stages dates each pod's workload's steps between its admission and
	// the release of its quota.
	stages            []holdTimes
	otherEvictions    []string
	nAdmitted, nEnded int
	lastAdmitted      time.Time
	// Quota, in millicpu: held by pods now and the most seen, by queue and
	// cohort; the most the statuses reported.
	queueHeld, cohortHeld       []int64
	queueHeldMax, cohortHeldMax []int64
	queueStatus, cohortStatus   []int64
	violations                  []string
	// Reserved quota integrated over time (millicpu·seconds), from the
	// queues' status, for Kueue's usage figure.
	queueNow           []int64
	usageFrom, usageAt time.Time
	usageSum           float64
	usageOn            bool
}

func newScaleWatch(classes []scaleClass, queues []scaleQueue, cohorts []string, pods []scalePod, limits scaleLimits) *scaleWatch {
	n := len(pods)
	w := &scaleWatch{
		classes: classes, queues: queues, cohorts: cohorts, pods: pods, limits: limits,
		index: make(map[string]int, n), queueIndex: map[string]int{}, cohortIndex: map[string]int{},
		ungated: make([]time.Time, n), admitted: make([]time.Time, n),
		ended: make([]bool, n), holding: make([]bool, n), preempted: make([]bool, n), admittedIs: make([]bool, n),
		evictedSince: make([]bool, n), reservations: make([][]string, n), ungatedUnder: make([]string, n),
		history: make([][]string, n), waitingIs: make([]bool, n), stages: make([]holdTimes, n),
		queueHeld: make([]int64, len(queues)), queueHeldMax: make([]int64, len(queues)), queueStatus: make([]int64, len(queues)),
		queueNow:   make([]int64, len(queues)),
		cohortHeld: make([]int64, len(cohorts)), cohortHeldMax: make([]int64, len(cohorts)), cohortStatus: make([]int64, len(cohorts)),
	}
	for i, p := range pods {
		w.index[queues[p.queue].name+"/"+p.name] = i
	}
	for q, queue := range queues {
		w.queueIndex[queue.name] = q
	}
	for c, name := range cohorts {
		w.cohortIndex[name] = c
	}
	return w
}

func (w *scaleWatch) observe(ctx context.Context, b *testing.B, informers cache.Cache) {
	observeAll(ctx, b, informers, &corev1.Pod{}, w.pod)
	observeAll(ctx, b, informers, &sluicev1alpha1.Workload{}, w.workload)
	observeAll(ctx, b, informers, &sluicev1alpha1.ClusterQueue{}, w.clusterQueue)
	observeAll(ctx, b, informers, &sluicev1alpha1.Cohort{}, w.cohort)
}

// deletedUnbound reports whether p is being deleted and was never bound:
// the API server refuses to bind a pod being deleted, so it will never run
// (sluice reports its workload finished at once, which frees the quota).
func deletedUnbound(p *corev1.Pod) bool {
	return p.DeletionTimestamp != nil && p.Spec.NodeName == ""
}

// unadmittedHolders lists, for a violation in cohort c, the pods that hold
// quota there (ungated, not ended) while their Workload is not admitted,
// with what happened to each: the quota given back too early. Call it
// under mu.
func (w *scaleWatch) unadmittedHolders(c int) string {
	if len(w.violations) >= 10 {
		return ""
	}
	var out []string
	for i, p := range w.pods {
		if w.holding[i] && !w.admittedIs[i] && w.queues[p.queue].cohort == c && len(out) < 5 {
			out = append(out, w.queues[p.queue].name+"/"+p.name+" ("+strings.Join(w.history[i], " -> ")+")")
		}
	}
	if len(out) == 0 {
		return ""
	}
	return "; running while their Workload is not admitted: " + strings.Join(out, "; ")
}

// violation records a broken rule; the first few are kept.
func (w *scaleWatch) violation(format string, args ...any) {
	if len(w.violations) < 10 {
		w.violations = append(w.violations, fmt.Sprintf(format, args...))
	}
}

// runPod is obj as one of a run's pods, with its index in the run's pods
// (index is by namespace/name).
func runPod(index map[string]int, obj any) (*corev1.Pod, int, bool) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, 0, false
	}
	i, ok := index[p.Namespace+"/"+p.Name]
	return p, i, ok
}

func (w *scaleWatch) pod(obj any, deleted bool) {
	p, i, ok := runPod(w.index, obj)
	if !ok {
		return
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if !deleted && !hasGate(p) && w.ungated[i].IsZero() {
		w.ungated[i] = now
		w.ungatedUnder[i] = p.Annotations[podkeys.ReservationAnnotation]
	}
	ended := deleted || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
	if !deleted {
		w.stages[i].seePod(p)
	}
	w.record(i, podState(p, deleted))
	if ended && !w.ended[i] {
		w.ended[i] = true
		w.nEnded++
	}
	hold := !w.ungated[i].IsZero() && !ended && !deletedUnbound(p)
	if hold == w.holding[i] {
		return
	}
	w.holding[i] = hold
	cpu := w.classes[w.pods[i].class].cpu * 1000
	if !hold {
		cpu = -cpu
	}
	q := w.pods[i].queue
	w.queueHeld[q] += cpu
	w.queueHeldMax[q] = max(w.queueHeldMax[q], w.queueHeld[q])
	if w.queueHeld[q] > w.limits.queue {
		w.violation("ClusterQueue %s: its running pods hold %s cpu, over its %s (at pod %s)", w.queues[q].name,
			milli(w.queueHeld[q]), milli(w.limits.queue), p.Name)
	}
	if c := w.queues[q].cohort; c >= 0 {
		w.cohortHeld[c] += cpu
		w.cohortHeldMax[c] = max(w.cohortHeldMax[c], w.cohortHeld[c])
		if w.cohortHeld[c] > w.limits.cohort {
			w.violation("cohort %s: its running pods hold %s cpu, over its pooled %s (at pod %s/%s)%s", w.cohorts[c],
				milli(w.cohortHeld[c]), milli(w.limits.cohort), p.Namespace, p.Name, w.unadmittedHolders(c))
		}
	}
}

func (w *scaleWatch) workload(obj any, deleted bool) {
	wl, ok := obj.(*sluicev1alpha1.Workload)
	if !ok {
		return
	}
	i := -1
	for _, o := range wl.OwnerReferences {
		if j, ok := w.index[wl.Namespace+"/"+o.Name]; ok && o.Kind == "Pod" {
			i = j
		}
	}
	if i < 0 {
		return
	}
	now := time.Now()
	admitted := meta.IsStatusConditionTrue(wl.Status.Conditions, sluicev1alpha1.WorkloadAdmitted)
	waiting := !deleted && !admitted && !meta.IsStatusConditionTrue(wl.Status.Conditions, sluicev1alpha1.WorkloadFinished)
	w.mu.Lock()
	defer w.mu.Unlock()
	if waiting != w.waitingIs[i] {
		w.waitingIs[i] = waiting
		if waiting {
			w.nWaiting++
		} else {
			w.nWaiting--
		}
	}
	if deleted {
		return
	}
	w.record(i, workloadState(wl))
	w.stages[i].seeWorkload(wl)
	if c := meta.FindStatusCondition(wl.Status.Conditions, sluicev1alpha1.WorkloadEvicted); c != nil && c.Status == metav1.ConditionTrue {
		w.evictedSince[i] = true
		if c.Reason == sluicev1alpha1.ReasonPreempted {
			w.preempted[i] = true
		} else if len(w.otherEvictions) < 10 {
			w.otherEvictions = append(w.otherEvictions, fmt.Sprintf("%s/%s: %s: %s", wl.Namespace, wl.Name, c.Reason, c.Message))
		}
	}
	if admitted && !w.admittedIs[i] {
		if len(w.reservations[i]) > 0 && !w.evictedSince[i] && len(w.admittedWhileAdmitted) < 10 {
			w.admittedWhileAdmitted = append(w.admittedWhileAdmitted, wl.Namespace+"/"+wl.Name)
		}
		id := "?"
		if wl.Status.Admission != nil {
			id = wl.Status.Admission.ReservationID
		}
		w.reservations[i] = append(w.reservations[i], id)
		w.evictedSince[i] = false
		if w.admitted[i].IsZero() {
			w.admitted[i] = now
			w.nAdmitted++
			w.lastAdmitted = now
		}
	}
	w.admittedIs[i] = admitted
}

// record adds a state of pod i or its Workload to its history, unless it
// is the last one recorded.
func (w *scaleWatch) record(i int, state string) {
	if h := w.history[i]; len(h) < 16 && (len(h) == 0 || h[len(h)-1] != state) {
		w.history[i] = append(h, state)
	}
}

// podState is a pod's state in short, for a history.
func podState(p *corev1.Pod, deleted bool) string {
	state := "pod " + string(p.Status.Phase)
	if hasGate(p) {
		state += " gated"
	}
	if p.DeletionTimestamp != nil {
		state += " deleting"
	}
	if deleted {
		state += " deleted"
	}
	return state
}

// workloadState is a Workload's conditions in short, for a history.
func workloadState(wl *sluicev1alpha1.Workload) string {
	var parts []string
	for _, c := range wl.Status.Conditions {
		part := c.Type + "=" + string(c.Status)
		if c.Reason != "" {
			part += "(" + c.Reason + ")"
		}
		parts = append(parts, part)
	}
	if wl.Status.Admission != nil {
		parts = append(parts, "admission="+wl.Status.Admission.ClusterQueue)
	}
	return "workload [" + strings.Join(parts, " ") + "]"
}

// reserved is the cpu (millicpu) a status reports reserved in the run's
// flavor.
func reserved(usage []sluicev1alpha1.FlavorUsage) int64 {
	for _, f := range usage {
		if f.Name != scaleFlavor {
			continue
		}
		for _, r := range f.Resources {
			if r.Name == corev1.ResourceCPU {
				return r.Total.MilliValue()
			}
		}
	}
	return 0
}

func (w *scaleWatch) clusterQueue(obj any, deleted bool) {
	cq, ok := obj.(*sluicev1alpha1.ClusterQueue)
	if !ok || deleted {
		return
	}
	q, ok := w.queueIndex[cq.Name]
	if !ok {
		return
	}
	v := reserved(cq.Status.FlavorsReservation)
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.integrateUsage(now)
	w.queueStatus[q] = max(w.queueStatus[q], v)
	w.queueNow[q] = v
	if v > w.limits.queue {
		w.violation("ClusterQueue %s: its status reports %s cpu reserved, over its %s", cq.Name, milli(v), milli(w.limits.queue))
	}
}

func (w *scaleWatch) cohort(obj any, deleted bool) {
	co, ok := obj.(*sluicev1alpha1.Cohort)
	if !ok || deleted {
		return
	}
	c, ok := w.cohortIndex[co.Name]
	if !ok {
		return
	}
	v := reserved(co.Status.FlavorsReservation)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cohortStatus[c] = max(w.cohortStatus[c], v)
	if v > w.limits.cohort {
		w.violation("cohort %s: its status reports %s cpu reserved, over its pooled %s", co.Name, milli(v), milli(w.limits.cohort))
	}
}

// integrateUsage adds the queues' reserved cpu, as their statuses last
// said (queueNow), over the time since the last status seen.
func (w *scaleWatch) integrateUsage(now time.Time) {
	if w.usageOn && now.After(w.usageAt) {
		var sum int64
		for _, v := range w.queueNow {
			sum += v
		}
		w.usageSum += float64(sum) * now.Sub(w.usageAt).Seconds()
	}
	w.usageAt = now
}

// startUsage starts integrating reserved quota at t.
func (w *scaleWatch) startUsage(t time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.usageOn, w.usageFrom, w.usageAt = true, t, t
}

// stopUsage stops integrating at t and returns the mean reserved quota
// since startUsage as a percentage of the queues' nominal quota (Kueue's
// usage figure; only the cohort shapes have a nominal to compare with).
func (w *scaleWatch) stopUsage(t time.Time) float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.integrateUsage(t)
	w.usageOn = false
	d := t.Sub(w.usageFrom).Seconds()
	if d <= 0 || len(w.cohorts) == 0 {
		return 0
	}
	return 100 * w.usageSum / (float64(len(w.queues)*scaleNominalCPU*1000) * d)
}

func (w *scaleWatch) admittedCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.nAdmitted
}

// waitingCount is the Workloads that exist and are neither admitted nor
// finished: the backlog as the Workloads say.
func (w *scaleWatch) waitingCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.nWaiting
}

func (w *scaleWatch) endedCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.nEnded
}

// admittedTimes is when each pod's Workload was first seen admitted.
func (w *scaleWatch) admittedTimes() []time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.admitted)
}

func (w *scaleWatch) lastAdmission() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastAdmitted
}

// maxStatus and maxHeld are the most cpu (millicpu) any ClusterQueue (or
// cohort) reserved by its status, or held by its running pods.
func (w *scaleWatch) maxStatus(cohorts bool) int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if cohorts {
		return maxOf(w.cohortStatus)
	}
	return maxOf(w.queueStatus)
}

func (w *scaleWatch) maxHeld(cohorts bool) int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if cohorts {
		return maxOf(w.cohortHeldMax)
	}
	return maxOf(w.queueHeldMax)
}

func maxOf(vs []int64) int64 {
	var m int64
	for _, v := range vs {
		m = max(m, v)
	}
	return m
}

// readmitted is how many workloads were admitted more than once, and
// their admissions in all.
func (w *scaleWatch) readmitted() (workloads, admissions int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range w.reservations {
		if len(r) > 1 {
			workloads++
			admissions += len(r)
		}
	}
	return workloads, admissions
}

// check returns what the run broke. Every workload must be admitted and
// its pod released (ungated) once, under its last admission. A workload
// is admitted again only after an eviction ended its admission, and only
// while its pod never ran: a workload preempted before its pod was
// released gives its quota back at once and is queued again with its pod
// still gated, while one preempted after loses its pod (a plain pod is
// not created again) and must never be admitted again. Nothing may be
// evicted for another reason than preemption, and no quota handed out
// beyond a limit.
func (w *scaleWatch) check() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var errs []string
	var never, gated, released []string
	few := func(list []string) string {
		if len(list) > 5 {
			return strings.Join(list[:5], "; ") + fmt.Sprintf("; and %d more", len(list)-5)
		}
		return strings.Join(list, "; ")
	}
	for i, p := range w.pods {
		name := w.queues[p.queue].name + "/" + p.name
		history := " (" + strings.Join(w.history[i], " -> ") + ")"
		r := w.reservations[i]
		switch {
		case len(r) == 0:
			never = append(never, name+history)
		case w.ungated[i].IsZero():
			gated = append(gated, name+history)
		case w.ungatedUnder[i] != r[len(r)-1]:
			released = append(released, fmt.Sprintf("%s released under reservation %q, admitted under %s%s",
				name, w.ungatedUnder[i], strings.Join(r, ", "), history))
		}
	}
	if len(never) > 0 {
		errs = append(errs, fmt.Sprintf("%d workloads never admitted: %s", len(never), few(never)))
	}
	if len(gated) > 0 {
		errs = append(errs, fmt.Sprintf("%d pods never ungated: %s", len(gated), few(gated)))
	}
	if len(released) > 0 {
		errs = append(errs, fmt.Sprintf("%d pods not released under their workload's last admission (admitted again after the pod was released?): %s",
			len(released), few(released)))
	}
	if len(w.admittedWhileAdmitted) > 0 {
		errs = append(errs, fmt.Sprintf("workloads admitted again with no eviction since their last admission: %s", few(w.admittedWhileAdmitted)))
	}
	if len(w.otherEvictions) > 0 {
		errs = append(errs, fmt.Sprintf("workloads evicted for another reason than preemption: %s", few(w.otherEvictions)))
	}
	errs = append(errs, w.violations...)
	return errs
}
