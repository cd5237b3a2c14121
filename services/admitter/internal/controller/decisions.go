package controller

import (
	"context"
	"time"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/podset"
	"github.com/sluice-dev/sluice/services/admitter/internal/checks"
	"github.com/sluice-dev/sluice/services/admitter/internal/workload"
)

// Short names for the workload predicates used throughout the package.
var (
	isFinished = workload.IsFinished
	isAdmitted = workload.IsAdmitted
)

func reservationID(wl *v1alpha1.Workload) string {
	if wl.Status.Admission == nil {
		return ""
	}
	return wl.Status.Admission.ReservationID
}

// needsCheckPhase reports whether the check worker has something to do
// for wl: checks to ask, or an inactive workload still holding quota.
func needsCheckPhase(wl *v1alpha1.Workload) bool {
	return workload.InCheckPhase(wl) || (wl.Status.Admission != nil && !workload.IsActive(wl) && !isFinished(wl))
}

// decisionFor is the decision persisted in wl's status: ADMIT for an
// admitted, unfinished workload; FORGET for a finished one; EVICT for one
// that holds no admission any more; nil when there is nothing to say.
func decisionFor(wl *v1alpha1.Workload) *admitterv1.Decision {
	d := &admitterv1.Decision{Workload: workload.Ref(wl)}
	switch {
	case isFinished(wl):
		d.Action = admitterv1.Decision_ACTION_FORGET
		d.Message = "the workload finished"
	case isAdmitted(wl) && wl.Status.Admission != nil:
		d.Action = admitterv1.Decision_ACTION_ADMIT
		d.ClusterQueue = wl.Status.Admission.ClusterQueue
		d.Message = "admitted in ClusterQueue " + wl.Status.Admission.ClusterQueue
		for _, info := range wl.Status.PodSetInfos {
			d.PodSetInfos = append(d.PodSetInfos, podset.ToProto(info))
		}
	case wl.Status.Admission == nil:
		d.Action = admitterv1.Decision_ACTION_EVICT
		d.Message = "the workload was evicted"
		if c := workload.Condition(wl, v1alpha1.WorkloadEvicted); c != nil && c.Status == "True" {
			d.Message = "evicted: " + c.Message
		}
	default:
		return nil
	}
	return d
}

// syncDecision publishes the decision wl's persisted status implies. The
// broadcaster drops decisions that change nothing, so repeating this for
// every version of a workload is safe.
func (a *Admitter) syncDecision(wl *v1alpha1.Workload) {
	a.leaderMu.Lock()
	defer a.leaderMu.Unlock()
	if !a.leading.Load() {
		return
	}
	if d := decisionFor(wl); d != nil {
		a.publish(d)
	}
}

// forgetDecision publishes FORGET for a deleted workload.
func (a *Admitter) forgetDecision(wl *v1alpha1.Workload) {
	a.leaderMu.Lock()
	defer a.leaderMu.Unlock()
	if !a.leading.Load() {
		return
	}
	a.publish(&admitterv1.Decision{
		Workload: workload.Ref(wl),
		Action:   admitterv1.Decision_ACTION_FORGET,
		Message:  "the workload was deleted",
	})
}

func (a *Admitter) publish(d *admitterv1.Decision) {
	if a.cfg.Stream.Publish(d) > 0 {
		a.cfg.Metrics.DecisionsPublished.WithLabelValues(d.GetAction().String()).Inc()
	}
}

// becomeLeader starts a new stream epoch holding every decision in force
// and turns on decision publishing, atomically with respect to syncDecision.
func (a *Admitter) becomeLeader() {
	a.leaderMu.Lock()
	defer a.leaderMu.Unlock()
	var admits []*admitterv1.Decision
	for _, wl := range a.store.list() {
		if d := decisionFor(wl); d != nil && d.Action == admitterv1.Decision_ACTION_ADMIT {
			admits = append(admits, d)
		}
	}
	a.cfg.Stream.Reset(admits)
	a.leading.Store(true)
}

const (
	releaseFinished = checksv1.ReleaseReason_RELEASE_REASON_FINISHED
	releaseEvicted  = checksv1.ReleaseReason_RELEASE_REASON_EVICTED
	releaseDeleted  = checksv1.ReleaseReason_RELEASE_REASON_DELETED
)

// releaseTimeout bounds the Release calls made for one workload.
const releaseTimeout = 30 * time.Second

// releaseChecks tells every check of wl's reservation, in the background,
// that the reservation is gone. Failures are logged: providers must
// tolerate unknown keys, and a lost Release only keeps a provider's
// resource until its own expiry.
func (a *Admitter) releaseChecks(wl *v1alpha1.Workload, reason checksv1.ReleaseReason) {
	key := workload.EvaluationKey(wl)
	if key == "" || len(wl.Status.AdmissionChecks) == 0 {
		return
	}
	names := make([]string, 0, len(wl.Status.AdmissionChecks))
	for _, st := range wl.Status.AdmissionChecks {
		names = append(names, st.Name)
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		defer cancel()
		for _, name := range names {
			var ac v1alpha1.AdmissionCheck
			if err := a.cfg.Cache.Get(ctx, clientKey(name), &ac); err != nil {
				continue
			}
			if caps := checks.Capabilities(&ac); ac.Status.Provider != nil && !hasCapability(caps, checksv1.Capability_CAPABILITY_RELEASE) {
				continue
			}
			params, _ := checks.Parameters(&ac)
			err := a.cfg.Checks.Release(ctx, &ac, &checksv1.ReleaseRequest{
				CheckName: name, Parameters: params, EvaluationKey: key,
				Namespace: wl.Namespace, Name: wl.Name, Uid: string(wl.UID), Reason: reason,
			})
			if err != nil {
				a.log.V(1).Info("release failed", "check", name, "workload", wl.Namespace+"/"+wl.Name, "error", err.Error())
			}
		}
	}()
}

func hasCapability(caps []checksv1.Capability, c checksv1.Capability) bool {
	for _, x := range caps {
		if x == c {
			return true
		}
	}
	return false
}
