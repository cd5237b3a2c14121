package controller

import (
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/utils/ptr"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/podset"
	"github.com/sluice-dev/sluice/services/admitter/internal/workload"
)

// Short names for the workload predicates used in this file.
var (
	isFinished = workload.IsFinished
	isAdmitted = workload.IsAdmitted
	isEvicting = workload.IsEvicting
	isDeleting = workload.IsDeleting
)

// decisionFor is the decision in force for wl's pods, read from its
// persisted state: DELETE while the object is being deleted, finished or
// not (every pod must go, and the grouper confirms it before the object
// may), EVICT while an eviction holds the quota (running pods must stop),
// ADMIT while admitted (pods run with the pod set infos); nil when the
// pods need nothing (pending, or finished).
func decisionFor(wl *v1alpha1.Workload) *admitterv1.Decision {
	d := &admitterv1.Decision{Workload: workload.Ref(wl), ReservationId: workload.ReservationID(wl)}
	switch {
	case isDeleting(wl):
		d.Action = admitterv1.Decision_ACTION_DELETE
		d.Message = "the Workload was deleted"
		// A pod group's finished Workload: gated pods of its name are a
		// later run. (A single pod's Workload may finish while being
		// deleted, from its gated pod's deletion: that pod is its own.)
		d.Finished = isFinished(wl) && workload.PodGroup(wl) != ""
	case isFinished(wl):
		return nil
	case isEvicting(wl):
		d.Action = admitterv1.Decision_ACTION_EVICT
		d.Message = "evicted"
		if c := workload.Condition(wl, v1alpha1.WorkloadEvicted); c != nil && c.Message != "" {
			d.Message = "evicted: " + c.Message
		}
	case isAdmitted(wl) && wl.Status.Admission != nil:
		d.Action = admitterv1.Decision_ACTION_ADMIT
		d.ClusterQueue = wl.Status.Admission.ClusterQueue
		d.Message = "admitted in ClusterQueue " + wl.Status.Admission.ClusterQueue
		for _, info := range wl.Status.PodSetInfos {
			d.PodSetInfos = append(d.PodSetInfos, podset.ToProto(info))
		}
		if c := workload.Condition(wl, v1alpha1.WorkloadAdmitted); c != nil {
			d.AdmittedAt = timestamppb.New(c.LastTransitionTime.Time)
		}
		d.PodSetCounts = make(map[string]int32, len(wl.Spec.PodSets))
		for _, ps := range wl.Spec.PodSets {
			d.PodSetCounts[ps.Name] = ps.Count
		}
		// What the grouper checks each pod against before ungating it: a
		// pod changed since its pod set was built, or moved to another
		// queue, does not run on this admission.
		d.QueueName = wl.Spec.QueueName
		if workload.WorkloadPriorityClass(wl) == "" {
			// A WorkloadPriorityClass leaves the pods' own priority
			// alone: there is nothing of the pod to compare it with.
			d.Priority = ptr.To(workload.Priority(wl))
		}
		for _, ps := range wl.Spec.PodSets {
			if ps.Template.RoleHash == "" {
				continue
			}
			if d.PodSetRoleHashes == nil {
				d.PodSetRoleHashes = make(map[string]string, len(wl.Spec.PodSets))
			}
			d.PodSetRoleHashes[ps.Name] = ps.Template.RoleHash
		}
	default:
		return nil
	}
	return d
}

// syncDecision publishes the decision wl's persisted status implies, or
// FORGET when none is in force. The broadcaster drops decisions that
// change nothing, so repeating this for every version of a workload is
// safe.
func (a *Admitter) syncDecision(wl *v1alpha1.Workload) {
	a.leaderMu.Lock()
	defer a.leaderMu.Unlock()
	if !a.leading.Load() {
		return
	}
	d := a.withStartBy(decisionFor(wl), wl)
	if d == nil {
		d = &admitterv1.Decision{Workload: workload.Ref(wl), Action: admitterv1.Decision_ACTION_FORGET, Message: forgetMessage(wl)}
	}
	a.publish(d)
}

func forgetMessage(wl *v1alpha1.Workload) string {
	switch {
	case isFinished(wl):
		return "the workload finished"
	case wl.Status.Admission == nil:
		return "the workload holds no admission"
	default:
		return "no decision in force"
	}
}

// forgetDecision publishes FORGET for a Workload that is gone.
func (a *Admitter) forgetDecision(wl *v1alpha1.Workload) {
	a.leaderMu.Lock()
	defer a.leaderMu.Unlock()
	if !a.leading.Load() {
		return
	}
	a.publish(&admitterv1.Decision{
		Workload: workload.Ref(wl),
		Action:   admitterv1.Decision_ACTION_FORGET,
		Message:  "the Workload is gone",
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
	var inForce []*admitterv1.Decision
	for _, wl := range a.store.List() {
		if d := a.withStartBy(decisionFor(wl), wl); d != nil {
			inForce = append(inForce, d)
		}
	}
	a.cfg.Stream.Reset(inForce)
	a.leading.Store(true)
}
