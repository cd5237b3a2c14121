// Package stops reports workloads under an EVICT or DELETE decision as
// stopped, once none of their pods runs, so the admitter gives their quota
// back: a queue of stop checks, each made again after a failure and every
// few seconds while the decision is in force.
package stops

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	sluicev1 "github.com/sluice-dev/sluice/gen/sluice/v1"
	"github.com/sluice-dev/sluice/pkg/crashpoint"
	"github.com/sluice-dev/sluice/pkg/podgroup"
	"github.com/sluice-dev/sluice/services/grouper/internal/act"
	"github.com/sluice-dev/sluice/services/grouper/internal/decisions"
	"github.com/sluice-dev/sluice/services/grouper/internal/keyqueue"
	"github.com/sluice-dev/sluice/services/grouper/internal/podpatch"
	"github.com/sluice-dev/sluice/services/grouper/internal/podstate"
	"github.com/sluice-dev/sluice/services/grouper/internal/roster"
	"github.com/sluice-dev/sluice/services/grouper/internal/shard"
	"github.com/sluice-dev/sluice/services/grouper/internal/workload"
)

const (
	// workers bounds the concurrent stop checks; evictions are rare.
	workers = 4
	// sweep is how often every EVICT and DELETE decision in force is
	// checked again, whatever events were missed.
	sweep = 10 * time.Second
)

// Config is what the stop checks work with.
type Config struct {
	Decisions *decisions.Store
	// Ungates are the ungates in flight, which a stop report waits for.
	Ungates *decisions.Ungates
	// Reports tells which stop decisions were reported already.
	Reports *decisions.Reports
	// PodStates tells the pods this grouper ungated while the cache lags.
	PodStates *podstate.Store
	Roster    *roster.Roster
	// APIReader confirms with the API server that pods are gated.
	APIReader client.Reader
	Admitter  act.Admitter
	// Wake has a pod reconciled.
	Wake  func(*corev1.Pod)
	Shard shard.Shard
	Log   logr.Logger
}

// Checks is the queue of stop checks.
type Checks struct {
	Config
	q *keyqueue.Queue
}

// New returns an empty queue of stop checks; Run serves it.
func New(cfg Config) *Checks {
	return &Checks{Config: cfg, q: keyqueue.New()}
}

// Add has the stop check of workload key look again.
func (c *Checks) Add(key workload.Key) { c.q.Add(key) }

// Run serves the stop queue until ctx ends.
func (c *Checks) Run(ctx context.Context) error {
	c.q.ShutDownOn(ctx)
	for range workers {
		go c.q.Work(ctx, c.check, c.Log, "stop report failed; retrying")
	}
	ticker := time.NewTicker(sweep)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
			for _, k := range c.Decisions.Keys(decisions.Stopping) {
				if c.Shard.Owns(k.Namespace, k.Name) {
					c.q.Add(k)
				}
			}
		}
	}
}

// check reports a workload under an EVICT or DELETE decision as stopped
// once none of its pods runs: for an eviction gated pods may stay (they
// wait for the next admission); for a deletion no pod may hold sluice's
// finalizer any more, so the Workload never goes before its pods. A pod
// that ended but still carries the finalizer is left to its finish report
// first. The report gives the workload's quota back, so it is made only
// when no ungate of the workload is in flight, and a pod the cache shows
// gated is taken for gated only once the API server says so.
func (c *Checks) check(ctx context.Context, key workload.Key) error {
	entry, ok := c.Decisions.Get(key)
	if !ok || !decisions.Stopping(entry.Decision) || c.Reports.Stopped(key, entry.Decision) {
		return nil
	}
	if c.Ungates.Busy(key) {
		return nil // the ungate's end wakes this check again
	}
	d := entry.Decision
	var gated []*corev1.Pod
	for _, pod := range c.Roster.Pods(key) {
		if !stoppedFor(pod, d) || (podpatch.HasGate(pod) && c.PodStates.AlreadyUngated(pod)) {
			return nil // its own reconcile wakes this check again
		}
		if podpatch.HasGate(pod) && !podgroup.Ended(pod) {
			gated = append(gated, pod)
		}
	}
	if err := c.confirmGated(ctx, gated); err != nil {
		return err
	}
	ref := &sluicev1.WorkloadRef{Namespace: key.Namespace, Name: key.Name, Uid: d.GetWorkload().GetUid()}
	cctx, cancel := c.Admitter.Call(ctx)
	defer cancel()
	_, err := c.Admitter.Client.ReportProgress(cctx, &admitterv1.ReportProgressRequest{
		Workload: ref,
		Stopped:  &admitterv1.Stopped{ReservationId: d.GetReservationId()},
	})
	if err != nil {
		return fmt.Errorf("report workload %s stopped: %w", key, err)
	}
	crashpoint.Hit("grouper/report-stopped")
	c.Reports.MarkStopped(key, d)
	c.Log.V(1).Info("workload reported stopped", "workload", key.String(), "decision", d.GetAction().String())
	return nil
}

// confirmGated checks with the API server that the pods the cache shows
// gated still are: an ungate whose answer was lost (a timeout, a dropped
// connection) may have landed, and the cache may not have seen an ungate
// yet. A pod found ungated fails the check; it is woken, to be stopped.
func (c *Checks) confirmGated(ctx context.Context, pods []*corev1.Pod) error {
	for _, pod := range pods {
		live := &corev1.Pod{}
		err := c.APIReader.Get(ctx, client.ObjectKeyFromObject(pod), live)
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return fmt.Errorf("read pod %s/%s: %w", pod.Namespace, pod.Name, err)
		case live.UID == pod.UID && !podpatch.HasGate(live):
			c.Wake(pod)
			return fmt.Errorf("pod %s/%s is ungated, the cache shows it gated yet", pod.Namespace, pod.Name)
		}
	}
	return nil
}

// stoppedFor reports whether pod no longer stands in the way of the stop
// decision d asks for. Gated pods wait out an eviction, and the deletion
// of a pod group's finished workload (they are a later run of the group).
func stoppedFor(pod *corev1.Pod, d *admitterv1.Decision) bool {
	if podgroup.Ended(pod) {
		return !podpatch.HasFinalizer(pod)
	}
	if d.GetAction() == admitterv1.Decision_ACTION_EVICT || (d.GetFinished() && workload.IsGroupMember(pod)) {
		return podpatch.HasGate(pod)
	}
	return !podpatch.HasFinalizer(pod)
}
