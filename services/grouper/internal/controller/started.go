package controller

import (
	"context"
	"fmt"
	"sync"

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

// singlePodRoles names the only pod set of a single pod's workload.
func singlePodRoles([]*corev1.Pod) func(*corev1.Pod) (string, error) {
	return func(*corev1.Pod) (string, error) { return workload.SinglePodSetName, nil }
}

// groupRoles names the pod sets of a group's pods the way the group does
// (by role hash, or by role label in a declared group).
func groupRoles(pods []*corev1.Pod) func(*corev1.Pod) (string, error) { return group.RolesOf(pods).Of }

// hasDeadline reports whether d admits with a start-up deadline: the
// admitter then waits for started counts.
func hasDeadline(d *admitterv1.Decision) bool {
	return d.GetAction() == admitterv1.Decision_ACTION_ADMIT && d.GetStartBy() != nil
}

// reportStarted reports the started pods of an admission with a start-up
// deadline, per pod set (rolesOf the workload's pods names each pod's),
// when the counts changed since the last report; nothing before any pod started, and nothing once a report
// that every pod is ready was taken (or the admitter dropped start_by:
// it recorded that every pod started).
func (r *Reconciler) reportStarted(ctx context.Context, key workload.Key, entry decisionEntry,
	rolesOf func([]*corev1.Pod) func(*corev1.Pod) (string, error)) (reconcile.Result, error) {
	d := entry.decision
	if !hasDeadline(d) {
		return reconcile.Result{}, nil
	}
	pods, err := r.groupPods(ctx, key)
	if err != nil {
		return reconcile.Result{}, err
	}
	run := group.Run{UID: d.GetWorkload().GetUid(), Reservation: d.GetReservationId()}
	counts, err := group.CountStarted(run, pods, rolesOf(pods))
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("count the started pods of workload %s: %w", key, err)
	}
	printed := fmt.Sprint(counts.Scheduled, counts.Ready)
	if len(counts.Scheduled) == 0 && len(counts.Ready) == 0 || !r.started.changed(key, d, printed) {
		return reconcile.Result{}, nil
	}
	ref := &sluicev1.WorkloadRef{Namespace: key.Namespace, Name: key.Name, Uid: d.GetWorkload().GetUid()}
	req := &admitterv1.ReportProgressRequest{Workload: ref, ReservationId: run.Reservation,
		Started: &admitterv1.Started{Scheduled: counts.Scheduled, Ready: counts.Ready}}
	if err := r.progress(ctx, nil, ref, req); err != nil {
		return reconcile.Result{}, err
	}
	crashpoint.Hit("grouper/report-started")
	r.started.record(key, d, printed, counts.AllReady(d.GetPodSetCounts()))
	return reconcile.Result{}, nil
}
