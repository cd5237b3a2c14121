package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/crashpoint"
	"github.com/sluice-dev/sluice/pkg/podset"
	"github.com/sluice-dev/sluice/services/admitter/internal/checks"
	"github.com/sluice-dev/sluice/services/admitter/internal/queue"
	"github.com/sluice-dev/sluice/services/admitter/internal/quota"
	"github.com/sluice-dev/sluice/services/admitter/internal/workload"
)

func clientKey(name string) client.ObjectKey { return client.ObjectKey{Name: name} }

// catalog is the ResourceFlavors and AdmissionChecks by name.
type catalog struct {
	flavors map[string]*v1alpha1.ResourceFlavor
	checks  map[string]*v1alpha1.AdmissionCheck
}

func (a *Admitter) loadCatalog(ctx context.Context) (*catalog, error) {
	c := &catalog{flavors: map[string]*v1alpha1.ResourceFlavor{}, checks: map[string]*v1alpha1.AdmissionCheck{}}
	var rfs v1alpha1.ResourceFlavorList
	if err := a.cfg.Cache.List(ctx, &rfs); err != nil {
		return nil, fmt.Errorf("list resource flavors: %w", err)
	}
	for i := range rfs.Items {
		c.flavors[rfs.Items[i].Name] = &rfs.Items[i]
	}
	var acs v1alpha1.AdmissionCheckList
	if err := a.cfg.Cache.List(ctx, &acs); err != nil {
		return nil, fmt.Errorf("list admission checks: %w", err)
	}
	for i := range acs.Items {
		c.checks[acs.Items[i].Name] = &acs.Items[i]
	}
	return c, nil
}

// world is the cluster-scoped state a cycle works from.
type world struct {
	*catalog
	queues     map[string]*cqState
	localQs    map[types.NamespacedName]*lqState
	namespaces map[string]labels.Set
}

// cqState is one ClusterQueue as a cycle sees it.
type cqState struct {
	cq       *v1alpha1.ClusterQueue
	active   bool
	reason   string
	message  string
	selector labels.Selector
	used     quota.Usage
	pending  []*v1alpha1.Workload
	counts   queueCounts
}

type lqState struct {
	lq     *v1alpha1.LocalQueue
	counts queueCounts
}

type queueCounts struct{ pending, reserving, admitted int32 }

func (c *queueCounts) count(wl *v1alpha1.Workload) {
	switch {
	case isAdmitted(wl):
		c.admitted++
		c.reserving++
	case wl.Status.Admission != nil:
		c.reserving++
	default:
		c.pending++
	}
}

func (a *Admitter) loadWorld(ctx context.Context) (*world, error) {
	cat, err := a.loadCatalog(ctx)
	if err != nil {
		return nil, err
	}
	w := &world{
		catalog:    cat,
		queues:     map[string]*cqState{},
		localQs:    map[types.NamespacedName]*lqState{},
		namespaces: map[string]labels.Set{},
	}
	var cqs v1alpha1.ClusterQueueList
	if err := a.cfg.Cache.List(ctx, &cqs); err != nil {
		return nil, fmt.Errorf("list cluster queues: %w", err)
	}
	needNamespaces := false
	for i := range cqs.Items {
		cq := &cqs.Items[i]
		st := &cqState{cq: cq, used: quota.Usage{}, selector: labels.Everything()}
		st.active, st.reason, st.message = queueActivity(cq, w.flavors, w.checks)
		if cq.Spec.NamespaceSelector != nil {
			sel, err := metav1.LabelSelectorAsSelector(cq.Spec.NamespaceSelector)
			if err != nil {
				st.active, st.reason, st.message = false, "InvalidNamespaceSelector", fmt.Sprintf("spec.namespaceSelector: %v", err)
			} else {
				st.selector = sel
				needNamespaces = needNamespaces || !sel.Empty()
			}
		}
		w.queues[cq.Name] = st
	}
	var lqs v1alpha1.LocalQueueList
	if err := a.cfg.Cache.List(ctx, &lqs); err != nil {
		return nil, fmt.Errorf("list local queues: %w", err)
	}
	for i := range lqs.Items {
		lq := &lqs.Items[i]
		w.localQs[types.NamespacedName{Namespace: lq.Namespace, Name: lq.Name}] = &lqState{lq: lq}
	}
	if needNamespaces {
		var nss corev1.NamespaceList
		if err := a.cfg.Cache.List(ctx, &nss); err != nil {
			return nil, fmt.Errorf("list namespaces: %w", err)
		}
		for _, ns := range nss.Items {
			w.namespaces[ns.Name] = labels.Set(ns.Labels)
		}
	}
	return w, nil
}

// queueActivity says whether cq can admit: it must not be stopped, its
// quotas must not be negative (the schema cannot refuse those), and every
// flavor and admission check it names must exist (and the checks be
// active).
func queueActivity(cq *v1alpha1.ClusterQueue, flavors map[string]*v1alpha1.ResourceFlavor, checks map[string]*v1alpha1.AdmissionCheck) (bool, string, string) {
	if cq.Spec.StopPolicy != nil && *cq.Spec.StopPolicy != v1alpha1.None {
		return false, "Stopped", fmt.Sprintf("the ClusterQueue is stopped (stopPolicy %s)", *cq.Spec.StopPolicy)
	}
	var reason string
	var problems []string
	note := func(r, msg string) {
		if reason == "" {
			reason = r
		}
		problems = append(problems, msg)
	}
	seen := map[string]bool{}
	for i, rg := range cq.Spec.ResourceGroups {
		for j, f := range rg.Flavors {
			if flavors[f.Name] == nil && !seen[f.Name] {
				seen[f.Name] = true
				note("FlavorNotFound", fmt.Sprintf("resource flavor %s doesn't exist", f.Name))
			}
			for k, r := range f.Resources {
				if r.NominalQuota.Sign() < 0 {
					note("NegativeQuota", fmt.Sprintf("spec.resourceGroups[%d].flavors[%d].resources[%d].nominalQuota: %s must not be negative",
						i, j, k, r.NominalQuota.String()))
				}
			}
		}
	}
	if s := cq.Spec.AdmissionChecksStrategy; s != nil {
		for _, rule := range s.AdmissionChecks {
			ac := checks[rule.Name]
			switch {
			case ac == nil:
				note("AdmissionCheckNotFound", fmt.Sprintf("admission check %s doesn't exist", rule.Name))
			case !checkActive(ac):
				msg := "no answer from its provider yet"
				if c := findCondition(ac.Status.Conditions, v1alpha1.AdmissionCheckActive); c != nil && c.Message != "" {
					msg = c.Message
				}
				note("AdmissionCheckInactive", fmt.Sprintf("admission check %s is not active: %s", rule.Name, msg))
			}
		}
	}
	if len(problems) > 0 {
		return false, reason, strings.Join(problems, "; ")
	}
	return true, "Ready", "Can admit new workloads"
}

func checkActive(ac *v1alpha1.AdmissionCheck) bool {
	c := findCondition(ac.Status.Conditions, v1alpha1.AdmissionCheckActive)
	return c != nil && c.Status == metav1.ConditionTrue
}

func findCondition(conds []metav1.Condition, t string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}

// reservation is one workload a cycle decided to reserve quota for.
type reservation struct {
	wl      *v1alpha1.Workload
	cq      *v1alpha1.ClusterQueue
	assign  quota.Assignment
	checks  []string
	flavors map[string]*v1alpha1.ResourceFlavor
}

// waiting is a workload a cycle could not reserve for, and why.
type waiting struct {
	wl      *v1alpha1.Workload
	message string
}

// cycle is one scheduling pass: count what every ClusterQueue holds,
// order each queue's pending workloads, reserve quota for every one that
// fits, tell the others why they wait, and write all of it concurrently.
func (a *Admitter) cycle(ctx context.Context) {
	start := time.Now()
	w, err := a.loadWorld(ctx)
	if err != nil {
		a.log.Error(err, "scheduling cycle")
		return
	}
	now := time.Now()
	var waits []waiting
	var nextRequeue time.Time
	for _, wl := range a.store.list() {
		if isFinished(wl) {
			continue
		}
		lqKey := types.NamespacedName{Namespace: wl.Namespace, Name: wl.Spec.QueueName}
		lq := w.localQs[lqKey]
		if wl.Status.Admission != nil {
			if cq := w.queues[wl.Status.Admission.ClusterQueue]; cq != nil {
				cq.used.Add(quota.WorkloadUsage(wl))
				cq.counts.count(wl)
			}
			if lq != nil {
				lq.counts.count(wl)
			}
			continue
		}
		if !workload.IsActive(wl) || isDeleting(wl) {
			continue
		}
		if lq == nil {
			waits = append(waits, waiting{wl, fmt.Sprintf("LocalQueue %s doesn't exist", wl.Spec.QueueName)})
			continue
		}
		lq.counts.count(wl)
		cq := w.queues[lq.lq.Spec.ClusterQueue]
		switch {
		case cq == nil:
			waits = append(waits, waiting{wl, fmt.Sprintf("ClusterQueue %s doesn't exist", lq.lq.Spec.ClusterQueue)})
			continue
		case lq.lq.Spec.StopPolicy != nil && *lq.lq.Spec.StopPolicy != v1alpha1.None:
			waits = append(waits, waiting{wl, fmt.Sprintf("LocalQueue %s is stopped (stopPolicy %s)", lq.lq.Name, *lq.lq.Spec.StopPolicy)})
			continue
		case !cq.selector.Empty() && !cq.selector.Matches(w.namespaces[wl.Namespace]):
			waits = append(waits, waiting{wl, fmt.Sprintf("namespace %s doesn't match the namespaceSelector of ClusterQueue %s", wl.Namespace, cq.cq.Name)})
			continue
		}
		cq.counts.count(wl)
		if at := queue.ReadyAt(wl, now); !at.IsZero() {
			if nextRequeue.IsZero() || at.Before(nextRequeue) {
				nextRequeue = at
			}
			continue
		}
		cq.pending = append(cq.pending, wl)
	}
	if !nextRequeue.IsZero() {
		a.triggerCycleAt(nextRequeue)
	}

	var reserve []reservation
	names := make([]string, 0, len(w.queues))
	for name := range w.queues {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		cq := w.queues[name]
		if !cq.active {
			for _, wl := range cq.pending {
				waits = append(waits, waiting{wl, fmt.Sprintf("ClusterQueue %s is inactive: %s", name, cq.message)})
			}
			continue
		}
		queue.Sort(cq.pending)
		var blockedBy *v1alpha1.Workload
		for _, wl := range cq.pending {
			if blockedBy != nil {
				waits = append(waits, waiting{wl, fmt.Sprintf("waiting behind %s/%s in StrictFIFO ClusterQueue %s", blockedBy.Namespace, blockedBy.Name, name)})
				continue
			}
			asg, err := quota.Assign(cq.cq, wl.Spec.PodSets, w.flavors, cq.used)
			if err != nil {
				waits = append(waits, waiting{wl, err.Error()})
				var unfit *quota.UnfitError
				if cq.cq.Spec.QueueingStrategy == v1alpha1.StrictFIFO && errors.As(err, &unfit) && !unfit.Permanent {
					blockedBy = wl
				}
				continue
			}
			cq.used.Add(asg.Usage)
			cq.counts.pending--
			cq.counts.reserving++
			if lq := w.localQs[types.NamespacedName{Namespace: wl.Namespace, Name: wl.Spec.QueueName}]; lq != nil {
				lq.counts.pending--
				lq.counts.reserving++
			}
			reserve = append(reserve, reservation{wl: wl, cq: cq.cq, assign: asg, checks: checksFor(cq.cq, asg), flavors: w.flavors})
		}
	}

	a.writeCycle(ctx, reserve, waits)
	a.queues.update(w)
	for name, cq := range w.queues {
		a.cfg.Metrics.PendingWorkloads.WithLabelValues(name).Set(float64(cq.counts.pending))
		a.cfg.Metrics.ReservingWorkloads.WithLabelValues(name).Set(float64(cq.counts.reserving))
		a.cfg.Metrics.AdmittedWorkloads.WithLabelValues(name).Set(float64(cq.counts.admitted))
	}
	a.cfg.Metrics.CycleDuration.Observe(time.Since(start).Seconds())
}

// checksFor lists, sorted, the checks cq asks of a workload with asg: those
// without onFlavors, and those naming one of its flavors.
func checksFor(cq *v1alpha1.ClusterQueue, asg quota.Assignment) []string {
	s := cq.Spec.AdmissionChecksStrategy
	if s == nil {
		return nil
	}
	flavors := asg.Flavors()
	var out []string
	for _, rule := range s.AdmissionChecks {
		if len(rule.OnFlavors) == 0 || slices.ContainsFunc(rule.OnFlavors, func(f string) bool { return slices.Contains(flavors, f) }) {
			out = append(out, rule.Name)
		}
	}
	sort.Strings(out)
	return out
}

// writeCycle writes a cycle's reservations and waiting messages with
// bounded concurrency.
func (a *Admitter) writeCycle(ctx context.Context, reserve []reservation, waits []waiting) {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(a.cfg.WriteConcurrency)
	for _, r := range reserve {
		g.Go(func() error {
			if err := a.reserve(ctx, r); err != nil && !errors.Is(err, ErrStale) {
				a.log.Error(err, "reserve quota", "workload", r.wl.Namespace+"/"+r.wl.Name)
			}
			return nil
		})
	}
	now := time.Now()
	for _, wt := range waits {
		if !a.pendingMessageDue(wt.wl, wt.message, now) {
			continue
		}
		g.Go(func() error {
			if err := a.markWaiting(ctx, wt); err != nil && !errors.Is(err, ErrStale) {
				a.log.Error(err, "write waiting message", "workload", wt.wl.Namespace+"/"+wt.wl.Name)
			}
			return nil
		})
	}
	_ = g.Wait()
}

// pendingMessageDue reports whether wl's QuotaReserved condition should be
// rewritten to say message: when it says something else, and, if only the
// message changed, not more often than pendingMessageInterval.
func (a *Admitter) pendingMessageDue(wl *v1alpha1.Workload, message string, now time.Time) bool {
	c := workload.Condition(wl, v1alpha1.WorkloadQuotaReserved)
	if c != nil && c.Status == metav1.ConditionFalse && c.Reason == v1alpha1.ReasonPending && c.Message == message {
		return false
	}
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonPending {
		return true
	}
	key := workload.Key(wl)
	a.pendingMu.Lock()
	defer a.pendingMu.Unlock()
	last, ok := a.pendingWrites[key]
	if ok && now.Sub(last) < pendingMessageInterval {
		a.triggerCycleAt(last.Add(pendingMessageInterval))
		return false
	}
	return true
}

// unchanged returns the store's version of wl and whether it is still the
// version the cycle decided on. Call it under the workload's lock.
func (a *Admitter) unchanged(wl *v1alpha1.Workload) (*v1alpha1.Workload, bool) {
	cur := a.store.get(workload.Key(wl))
	return cur, cur != nil && cur.UID == wl.UID && cur.ResourceVersion == wl.ResourceVersion
}

// reserve writes a reservation in one status patch: status.admission with
// a new reservation id, QuotaReserved=True, a Pending entry per check, and
// — when there are no checks — Admitted=True with the merged pod set infos.
func (a *Admitter) reserve(ctx context.Context, r reservation) error {
	unlock := a.locks.lock(workload.Key(r.wl))
	defer unlock()
	orig, ok := a.unchanged(r.wl)
	if !ok {
		a.triggerCycle() // the workload moved on; the next cycle looks again
		return nil
	}
	wl := orig.DeepCopy()
	now := metav1.Now()
	wl.Status.Admission = &v1alpha1.Admission{
		ClusterQueue:      r.cq.Name,
		ReservationID:     workload.NewReservationID(),
		PodSetAssignments: r.assign.PodSets,
	}
	gen := wl.Generation
	workload.SetCondition(&wl.Status.Conditions, v1alpha1.WorkloadQuotaReserved, metav1.ConditionTrue, v1alpha1.ReasonQuotaReserved,
		"Quota reserved in ClusterQueue "+r.cq.Name, gen)
	if c := workload.Condition(wl, v1alpha1.WorkloadEvicted); c != nil && c.Status == metav1.ConditionTrue {
		workload.SetCondition(&wl.Status.Conditions, v1alpha1.WorkloadEvicted, metav1.ConditionFalse, v1alpha1.ReasonQuotaReserved,
			"Quota reserved again after the eviction", gen)
	}
	wl.Status.AdmissionChecks = pendingChecks(orig, r.checks, now)
	wl.Status.PodSetInfos = nil
	admitted := false
	if len(r.checks) == 0 {
		infos, err := podset.MergeWorkload(wl, r.flavors)
		if err != nil {
			// The flavors contradict the pods: no quota is held for a
			// workload that cannot start. Look again after a backoff, in
			// case a flavor changes.
			return a.refuseConflict(ctx, orig, err)
		}
		wl.Status.PodSetInfos = infos
		workload.SetCondition(&wl.Status.Conditions, v1alpha1.WorkloadAdmitted, metav1.ConditionTrue, v1alpha1.ReasonAdmitted,
			"Admitted in ClusterQueue "+r.cq.Name, gen)
		admitted = true
	} else {
		workload.SetCondition(&wl.Status.Conditions, v1alpha1.WorkloadAdmitted, metav1.ConditionFalse, v1alpha1.ReasonWaitingForChecks,
			waitingForChecksMessage(wl), gen)
	}
	if err := a.patchStatus(ctx, orig, wl, "reserve"); err != nil {
		return err
	}
	if admitted {
		crashpoint.Hit("admitter/admit")
	} else {
		crashpoint.Hit("admitter/reserve")
	}
	a.cfg.Metrics.CycleReserved.Inc()
	a.forgetPendingWrite(workload.Key(wl))
	a.summaries.add(r.cq.Name, admitted)
	return nil
}

// pendingChecks is a fresh Pending entry for every check, keeping the
// retry counts of earlier reservations.
func pendingChecks(orig *v1alpha1.Workload, names []string, now metav1.Time) []v1alpha1.AdmissionCheckState {
	if len(names) == 0 {
		return nil
	}
	out := make([]v1alpha1.AdmissionCheckState, 0, len(names))
	for _, name := range names {
		st := v1alpha1.AdmissionCheckState{Name: name, State: v1alpha1.CheckStatePending, LastTransitionTime: now}
		if prev := workload.CheckState(orig, name); prev != nil {
			st.RetryCount = prev.RetryCount
			if prev.State == v1alpha1.CheckStatePending {
				st.LastTransitionTime = prev.LastTransitionTime
			}
		}
		out = append(out, st)
	}
	return out
}

// refuseConflict leaves a workload whose flavors contradict its pods
// waiting, with the conflict in its conditions and a requeue backoff.
func (a *Admitter) refuseConflict(ctx context.Context, orig *v1alpha1.Workload, cause error) error {
	wl := orig.DeepCopy()
	msg := conflictMessage(cause)
	gen := wl.Generation
	workload.SetCondition(&wl.Status.Conditions, v1alpha1.WorkloadQuotaReserved, metav1.ConditionFalse, v1alpha1.ReasonPending,
		"cannot start: "+msg, gen)
	workload.SetCondition(&wl.Status.Conditions, v1alpha1.WorkloadAdmitted, metav1.ConditionFalse, v1alpha1.ReasonPodSetUpdateConflict, msg, gen)
	setRequeue(wl, checks.Backoff(&v1alpha1.AdmissionCheck{}, int(requeueCount(orig))))
	if err := a.patchStatus(ctx, orig, wl, "conflict"); err != nil {
		return err
	}
	a.cfg.Recorder.Eventf(wl, nil, "Warning", v1alpha1.ReasonPodSetUpdateConflict, "Admit", "not admitted: %s", msg)
	return nil
}

func requeueCount(wl *v1alpha1.Workload) int32 {
	if rs := wl.Status.RequeueState; rs != nil && rs.Count != nil {
		return *rs.Count
	}
	return 0
}

// markWaiting records why wl waits in its QuotaReserved condition.
func (a *Admitter) markWaiting(ctx context.Context, wt waiting) error {
	key := workload.Key(wt.wl)
	unlock := a.locks.lock(key)
	defer unlock()
	orig, ok := a.unchanged(wt.wl)
	if !ok {
		return nil
	}
	wl := orig.DeepCopy()
	workload.SetCondition(&wl.Status.Conditions, v1alpha1.WorkloadQuotaReserved, metav1.ConditionFalse, v1alpha1.ReasonPending, wt.message, wl.Generation)
	if err := a.patchStatus(ctx, orig, wl, "pending-message"); err != nil {
		return err
	}
	a.pendingMu.Lock()
	a.pendingWrites[key] = time.Now()
	a.pendingMu.Unlock()
	return nil
}

// patchStatus writes wl's status as a merge patch from orig, guarded by
// orig's resourceVersion, and records the answer. A conflict means the
// store was behind: the informer brings the newer version, which triggers
// the next look; it is not an error.
func (a *Admitter) patchStatus(ctx context.Context, orig, wl *v1alpha1.Workload, op string) error {
	if equality.Semantic.DeepEqual(orig.Status, wl.Status) {
		return nil
	}
	// Acknowledged Releases ride out with whatever this write changes.
	a.releases.prune(&wl.Status, wl)
	patch := client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})
	if err := a.cfg.Client.Status().Patch(ctx, wl, patch, client.FieldOwner(FieldOwner)); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			a.log.V(1).Info("workload changed under a write; waiting for the newer version", "workload", wl.Namespace+"/"+wl.Name, "operation", op)
			return ErrStale
		}
		return fmt.Errorf("%s: patch status of workload %s/%s: %w", op, wl.Namespace, wl.Name, err)
	}
	a.cfg.Metrics.WorkloadWrites.WithLabelValues(op).Inc()
	a.record(wl)
	return nil
}

// ErrStale reports a write lost to a newer version of the workload; the
// caller may retry.
var ErrStale = errors.New("the workload changed; will retry from the newer version")
