package bench

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

// holdStage is a step of a workload's life between its admission and the
// release of its quota. Quota is held through all of them: how long the
// steps around the pod's run take is how long quota does no work.
//
// The times are those the objects record, not when the benchmark's
// informers saw them, which would add each watch's lag: the Workload's
// Admitted and Finished conditions (written by the admitter), the pod's
// PodScheduled condition (kube-scheduler), its start and its container's
// end (kwok). They have a resolution of one second, so a step's mean over
// many workloads is right and a single step is not. The ungate, which
// nothing on the pod dates, is the grouper's own measure (grouperTimes).
type holdStage int

const (
	stageAdmitted holdStage = iota // Workload Admitted
	stageBound                     // pod PodScheduled
	stageRunning                   // pod started
	stageEnded                     // pod's container terminated
	stageFinished                  // Workload Finished: quota free
	holdStages
)

var holdStageNames = [holdStages]string{"admitted", "bound", "running", "ended", "finished"}

// holdTimes is when each stage of one workload happened.
type holdTimes [holdStages]time.Time

// seePod records the stages a pod's status dates.
func (h *holdTimes) seePod(p *corev1.Pod) {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue {
			h[stageBound] = c.LastTransitionTime.Time
		}
	}
	if p.Status.StartTime != nil {
		h[stageRunning] = p.Status.StartTime.Time
	}
	for _, cs := range p.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil {
			h[stageEnded] = t.FinishedAt.Time
		}
	}
}

// seeWorkload records the stages a Workload's conditions date: its last
// admission, and its finish.
func (h *holdTimes) seeWorkload(wl *sluicev1alpha1.Workload) {
	if c := meta.FindStatusCondition(wl.Status.Conditions, sluicev1alpha1.WorkloadAdmitted); c != nil && c.Status == metav1.ConditionTrue {
		h[stageAdmitted] = c.LastTransitionTime.Time
	}
	if c := meta.FindStatusCondition(wl.Status.Conditions, sluicev1alpha1.WorkloadFinished); c != nil && c.Status == metav1.ConditionTrue {
		h[stageFinished] = c.LastTransitionTime.Time
	}
}

// holdBreakdown is the spread of each step's duration (from the stage
// before it) over the workloads that went through every stage once,
// never preempted.
type holdBreakdown struct {
	steps [holdStages]latencySpread // steps[s]: stage s-1 to s; steps[0] unused
	whole latencySpread             // admitted to finished
}

// holdBreakdown measures the steps of the workloads admitted once and
// dated in every stage in order.
func (w *scaleWatch) holdBreakdown() holdBreakdown {
	w.mu.Lock()
	defer w.mu.Unlock()
	var ds [holdStages][]time.Duration
	var whole []time.Duration
	for i, h := range w.stages {
		if w.preempted[i] || len(w.reservations[i]) != 1 || !inOrder(h) {
			continue
		}
		for s := stageBound; s < holdStages; s++ {
			ds[s] = append(ds[s], h[s].Sub(h[s-1]))
		}
		whole = append(whole, h[stageFinished].Sub(h[stageAdmitted]))
	}
	var b holdBreakdown
	for s := stageBound; s < holdStages; s++ {
		b.steps[s] = spread(ds[s])
	}
	b.whole = spread(whole)
	return b
}

// inOrder reports whether every stage is dated, none before the one
// ahead of it.
func inOrder(h holdTimes) bool {
	for s := stageAdmitted; s < holdStages; s++ {
		if h[s].IsZero() || (s > stageAdmitted && h[s].Before(h[s-1])) {
			return false
		}
	}
	return true
}

func (b holdBreakdown) String() string {
	var lines []string
	for s := stageBound; s < holdStages; s++ {
		lines = append(lines, fmt.Sprintf("  %-8s to %-8s  %s", holdStageNames[s-1], holdStageNames[s], b.steps[s]))
	}
	lines = append(lines, fmt.Sprintf("  %-8s to %-8s  %s", holdStageNames[stageAdmitted], holdStageNames[stageFinished], b.whole))
	return fmt.Sprintf("quota held, admission to release, as the objects date it (to the second), over the %d workloads admitted once:\n%s",
		b.whole.n, strings.Join(lines, "\n"))
}

// fields are b as key=value pairs for SCALE-RESULT.
func (b holdBreakdown) fields() string {
	var parts []string
	for s := stageBound; s < holdStages; s++ {
		l := b.steps[s]
		parts = append(parts, fmt.Sprintf("hold-%[1]s-p50-ms=%[2]d hold-%[1]s-p99-ms=%[3]d hold-%[1]s-mean-ms=%[4]d",
			holdStageNames[s], l.p50.Milliseconds(), l.p99.Milliseconds(), l.mean.Milliseconds()))
	}
	parts = append(parts, fmt.Sprintf("hold-p50-ms=%d hold-p99-ms=%d hold-mean-ms=%d",
		b.whole.p50.Milliseconds(), b.whole.p99.Milliseconds(), b.whole.mean.Milliseconds()))
	return strings.Join(parts, " ")
}
