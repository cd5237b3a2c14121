// Package started counts the started pods of admissions with a start-up
// deadline and reports them to the admitter, which waits for them: a
// queue of workloads, each counted a few times a second at most, and
// reported only when its counts changed.
package started

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	sluicev1 "github.com/sluice-dev/sluice/gen/sluice/v1"
	"github.com/sluice-dev/sluice/pkg/crashpoint"
	"github.com/sluice-dev/sluice/services/grouper/internal/act"
	"github.com/sluice-dev/sluice/services/grouper/internal/decisions"
	"github.com/sluice-dev/sluice/services/grouper/internal/group"
	"github.com/sluice-dev/sluice/services/grouper/internal/keyqueue"
	"github.com/sluice-dev/sluice/services/grouper/internal/roster"
	"github.com/sluice-dev/sluice/services/grouper/internal/workload"
)

// coalesce is how long the started counts of an admission wait before
// they are counted: its pods start together, and one count covers all
// the changes of the wait, so a group of N pods is counted a few times a
// second, not once per pod event.
const coalesce = 200 * time.Millisecond

// Config is what the started counts work with.
type Config struct {
	Decisions *decisions.Store
	// Reports tells the started counts reported already.
	Reports  *decisions.Reports
	Roster   *roster.Roster
	Admitter act.Admitter
	Log      logr.Logger
}

// Counts is the queue of workloads whose started pods are to be counted.
type Counts struct {
	Config
	q *keyqueue.Queue
}

// New returns an empty queue; Run serves it.
func New(cfg Config) *Counts {
	return &Counts{Config: cfg, q: keyqueue.New()}
}

// Add has the started pods of workload key counted now.
func (c *Counts) Add(key workload.Key) { c.q.Add(key) }

// Note has the started pods of the admission entry of workload key
// counted soon, if it has a start-up deadline.
func (c *Counts) Note(key workload.Key, entry decisions.Entry) {
	if decisions.HasDeadline(entry.Decision) {
		c.q.AddAfter(key, coalesce)
	}
}

// Run serves the queue until ctx ends.
func (c *Counts) Run(ctx context.Context) error {
	c.q.ShutDownOn(ctx)
	c.q.Work(ctx, c.report, c.Log, "started report failed; retrying")
	return nil
}

// report reports the started pods of the admission in force for
// workload key, if it has a start-up deadline, per pod set, when the
// counts changed since the last report; nothing before any pod started,
// and nothing once a report that every pod is ready was taken (or the
// admitter dropped start_by: it recorded that every pod started).
func (c *Counts) report(ctx context.Context, key workload.Key) error {
	entry, ok := c.Decisions.Get(key)
	d := entry.Decision
	if !ok || !decisions.HasDeadline(d) {
		return nil
	}
	var roles group.Roles
	pods, _ := c.Roster.Snapshot(key, func(t *group.Tally) { roles = t.Roles() })
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
	if len(counts.Scheduled) == 0 && len(counts.Ready) == 0 || !c.Reports.StartedChanged(key, d, printed) {
		return nil
	}
	ref := &sluicev1.WorkloadRef{Namespace: key.Namespace, Name: key.Name, Uid: d.GetWorkload().GetUid()}
	req := &admitterv1.ReportProgressRequest{Workload: ref, ReservationId: run.Reservation,
		Started: &admitterv1.Started{Scheduled: counts.Scheduled, Ready: counts.Ready}}
	if _, err := c.Admitter.Progress(ctx, nil, req, "progress of group "+ref.GetName()); err != nil {
		return err
	}
	crashpoint.Hit("grouper/report-started")
	c.Reports.MarkStarted(key, d, printed, counts.AllReady(d.GetPodSetCounts()))
	return nil
}
