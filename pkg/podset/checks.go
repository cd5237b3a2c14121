package podset

import (
	corev1 "k8s.io/api/core/v1"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

// TolerationFromChecks converts a provider's toleration to Kubernetes' form.
func TolerationFromChecks(p *checksv1.Toleration) corev1.Toleration {
	t := corev1.Toleration{Key: p.GetKey(), Value: p.GetValue()}
	switch p.GetOperator() {
	case checksv1.TolerationOperator_TOLERATION_OPERATOR_EXISTS:
		t.Operator = corev1.TolerationOpExists
	default:
		t.Operator = corev1.TolerationOpEqual
	}
	switch p.GetEffect() {
	case checksv1.TaintEffect_TAINT_EFFECT_NO_SCHEDULE:
		t.Effect = corev1.TaintEffectNoSchedule
	case checksv1.TaintEffect_TAINT_EFFECT_PREFER_NO_SCHEDULE:
		t.Effect = corev1.TaintEffectPreferNoSchedule
	case checksv1.TaintEffect_TAINT_EFFECT_NO_EXECUTE:
		t.Effect = corev1.TaintEffectNoExecute
	}
	if p.TolerationSeconds != nil {
		s := p.GetTolerationSeconds()
		t.TolerationSeconds = &s
	}
	return t
}

// UpdatesFromChecks converts a provider's pod set updates.
func UpdatesFromChecks(ups []*checksv1.PodSetUpdate) []v1alpha1.PodSetUpdate {
	if len(ups) == 0 {
		return nil
	}
	out := make([]v1alpha1.PodSetUpdate, 0, len(ups))
	for _, u := range ups {
		psu := v1alpha1.PodSetUpdate{
			Name:         u.GetName(),
			Labels:       cloneMap(u.GetLabels()),
			Annotations:  cloneMap(u.GetAnnotations()),
			NodeSelector: cloneMap(u.GetNodeSelector()),
		}
		for _, t := range u.GetTolerations() {
			psu.Tolerations = append(psu.Tolerations, TolerationFromChecks(t))
		}
		out = append(out, psu)
	}
	return out
}
