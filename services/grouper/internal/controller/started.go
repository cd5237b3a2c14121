package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	sluicev1 "github.com/sluice-dev/sluice/gen/sluice/v1"
	"github.com/sluice-dev/sluice/pkg/crashpoint"
	"github.com/sluice-dev/sluice/services/grouper/internal/group"
	"github.com/sluice-dev/sluice/services/grouper/internal/workload"
)

// startedReports remembers, per workload, the started counts last
// reported for its admission, so each change is reported once. It lives
// in memory only: after a restart, or a snapshot from a new leader, the
// counts are reported again (the admitter may have lost what it was told).
type startedReports struct {
	mu sync.Mutex
	m  map[workload.Key]startedReport
}

type startedReport struct {
	// admission is the workload uid and reservation the counts are of.
	admission string
	// counts is the last report, printed; done: it said every pod is
	// ready, and the admitter took it.
	counts string
	done   bool
}

func newStartedReports() *startedReports {
	return &startedReports{m: map[workload.Key]startedReport{}}
}

func admissionID(d *admitterv1.Decision) string {
	return d.GetWorkload().GetUid() + "/" + d.GetReservationId()
}

// changed reports whether counts differ from what was last reported for
// d's admission, and whether that admission's reports are over.
func (s *startedReports) changed(k workload.Key, d *admitterv1.Decision, counts string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	last, ok := s.m[k]
	if !ok || last.admission != admissionID(d) {
		return true
	}
	return !last.done && last.counts != counts
}

func (s *startedReports) record(k workload.Key, d *admitterv1.Decision, counts string, done bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[k] = startedReport{admission: admissionID(d), counts: counts, done: done}
}

func (s *startedReports) forget(k workload.Key) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, k)
}

func (s *startedReports) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m = map[workload.Key]startedReport{}
}

// hasDeadline reports whether d admits with a start-up deadline: the
// admitter then waits for started counts.
func hasDeadline(d *admitterv1.Decision) bool {
	return d.GetAction() == admitterv1.Decision_ACTION_ADMIT && d.GetStartBy() != nil
}

// startedCoalesce is how long the started counts of an admission wait
// before they are counted: its pods start together, and one count covers
// all the changes of the wait, so a group of N pods is counted a few times
// a second, not once per pod event.
const startedCoalesce = 200 * time.Millisecond

// noteStarted has the started pods of an admission with a start-up
// deadline counted soon (see reportStarted).
func (r *Reconciler) noteStarted(key workload.Key, entry decisionEntry) (reconcile.Result, error) {
	if hasDeadline(entry.decision) {
		r.startedQ.AddAfter(key, startedCoalesce)
	}
	return reconcile.Result{}, nil
}

// runStartedReports serves the started-count queue until ctx ends.
func (r *Reconciler) runStartedReports(ctx context.Context) error {
	go func() {
		<-ctx.Done()
		r.startedQ.ShutDown()
	}()
	for {
		key, shutdown := r.startedQ.Get()
		if shutdown {
			return nil
		}
		if err := r.reportStarted(ctx, key); err != nil {
			r.opts.Log.V(1).Info("started report failed; retrying", "workload", key.String(), "error", err.Error())
			r.startedQ.AddRateLimited(key)
		} else {
			r.startedQ.Forget(key)
		}
		r.startedQ.Done(key)
	}
}

// reportStarted reports the started pods of the admission in force for
// workload key, if it has a start-up deadline, per pod set, when the
// counts changed since the last report; nothing before any pod started,
// and nothing once a report that every pod is ready was taken (or the
// admitter dropped start_by: it recorded that every pod started).
func (r *Reconciler) reportStarted(ctx context.Context, key workload.Key) error {
	entry, ok := r.decisions.get(key)
	d := entry.decision
	if !ok || !hasDeadline(d) {
		return nil
	}
	var roles group.Roles
	pods, _ := r.roster.Snapshot(key, func(t *group.Tally) { roles = t.Roles() })
	roleOf := roles.Of
	if len(pods) > 0 && !workload.IsGroupMember(pods[0]) {
		roleOf = func(*corev1.Pod) (string, error) { return workload.SinglePodSetName, nil }
	}
	run := group.Run{UID: d.GetWorkload().GetUid(), Reservation: d.GetReservationId()}
	counts, err := group.CountStarted(run, pods, roleOf)
	if err != nil {
		return fmt.Errorf("count the started pods of workload %s: %w", key, err)
	}
	printed := fmt.Sprint(counts.Scheduled, counts.Ready)
	if len(counts.Scheduled) == 0 && len(counts.Ready) == 0 || !r.started.changed(key, d, printed) {
		return nil
	}
	ref := &sluicev1.WorkloadRef{Namespace: key.Namespace, Name: key.Name, Uid: d.GetWorkload().GetUid()}
	req := &admitterv1.ReportProgressRequest{Workload: ref, ReservationId: run.Reservation,
		Started: &admitterv1.Started{Scheduled: counts.Scheduled, Ready: counts.Ready}}
	if err := r.progress(ctx, nil, ref, req); err != nil {
		return err
	}
	crashpoint.Hit("grouper/report-started")
	r.started.record(key, d, printed, counts.AllReady(d.GetPodSetCounts()))
	return nil
}
