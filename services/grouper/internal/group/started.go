package group

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/sluice-dev/sluice/services/grouper/internal/podpatch"
)

// Started counts an admission's started pods per pod set: Scheduled the
// pods bound to a node, Ready those whose Ready condition is True. A pod
// that succeeded counts as both.
type Started struct {
	Scheduled, Ready map[string]int32
}

// CountStarted counts the started pods of run among pods. roleOf names a pod's pod set, so the counting does
// not depend on how a kind of workload names them. Pods that hold no
// place in the admission are left out: gated pods, failed pods, pods
// being deleted (unless they succeeded), and pods of another run.
func CountStarted(run Run, pods []*corev1.Pod, roleOf func(*corev1.Pod) (string, error)) (Started, error) {
	st := Started{Scheduled: map[string]int32{}, Ready: map[string]int32{}}
	for _, p := range pods {
		if !run.Owns(p) {
			continue
		}
		succeeded := p.Status.Phase == corev1.PodSucceeded
		if !succeeded && (p.Status.Phase == corev1.PodFailed || p.DeletionTimestamp != nil || podpatch.HasGate(p)) {
			continue
		}
		scheduled, ready := succeeded || p.Spec.NodeName != "", succeeded || podReady(p)
		if !scheduled && !ready {
			continue
		}
		role, err := roleOf(p)
		if err != nil {
			return Started{}, err
		}
		if scheduled {
			st.Scheduled[role]++
		}
		if ready {
			st.Ready[role]++
		}
	}
	return st, nil
}

// AllReady reports whether every pod set of podSets (name → count) has all
// its pods ready (and so scheduled): nothing more can start.
func (s Started) AllReady(podSets map[string]int32) bool {
	for name, n := range podSets {
		if s.Ready[name] < n {
			return false
		}
	}
	return true
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
