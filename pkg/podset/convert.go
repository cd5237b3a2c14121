package podset

import (
	"maps"

	corev1 "k8s.io/api/core/v1"

	sluicev1 "github.com/sluice-dev/sluice/gen/sluice/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

// ToProto converts an info for the WatchAdmissions stream. Tolerations keep
// their order.
func ToProto(info v1alpha1.PodSetInfo) *sluicev1.PodSetInfo {
	return &sluicev1.PodSetInfo{
		Name:         info.Name,
		NodeSelector: cloneMap(info.NodeSelector),
		Tolerations:  TolerationsToProto(info.Tolerations),
		Labels:       cloneMap(info.Labels),
		Annotations:  cloneMap(info.Annotations),
	}
}

// FromProto converts an info received on the WatchAdmissions stream. A nil
// message gives the zero info; empty maps and lists become nil.
func FromProto(p *sluicev1.PodSetInfo) v1alpha1.PodSetInfo {
	if p == nil {
		return v1alpha1.PodSetInfo{}
	}
	return v1alpha1.PodSetInfo{
		Name:         p.GetName(),
		Labels:       cloneMap(p.GetLabels()),
		Annotations:  cloneMap(p.GetAnnotations()),
		NodeSelector: cloneMap(p.GetNodeSelector()),
		Tolerations:  TolerationsFromProto(p.GetTolerations()),
	}
}

// TolerationToProto converts one toleration; operator and effect keep
// Kubernetes' strings (an empty operator stays empty).
func TolerationToProto(t corev1.Toleration) *sluicev1.Toleration {
	p := &sluicev1.Toleration{
		Key:      t.Key,
		Operator: string(t.Operator),
		Value:    t.Value,
		Effect:   string(t.Effect),
	}
	if t.TolerationSeconds != nil {
		s := *t.TolerationSeconds
		p.TolerationSeconds = &s
	}
	return p
}

// TolerationFromProto converts one toleration; nil gives the zero one.
func TolerationFromProto(p *sluicev1.Toleration) corev1.Toleration {
	if p == nil {
		return corev1.Toleration{}
	}
	t := corev1.Toleration{
		Key:      p.GetKey(),
		Operator: corev1.TolerationOperator(p.GetOperator()),
		Value:    p.GetValue(),
		Effect:   corev1.TaintEffect(p.GetEffect()),
	}
	if p.TolerationSeconds != nil {
		s := p.GetTolerationSeconds()
		t.TolerationSeconds = &s
	}
	return t
}

// TolerationsToProto converts a list in order; empty gives nil.
func TolerationsToProto(ts []corev1.Toleration) []*sluicev1.Toleration {
	if len(ts) == 0 {
		return nil
	}
	out := make([]*sluicev1.Toleration, len(ts))
	for i, t := range ts {
		out[i] = TolerationToProto(t)
	}
	return out
}

// TolerationsFromProto converts a list in order; empty gives nil.
func TolerationsFromProto(ps []*sluicev1.Toleration) []corev1.Toleration {
	if len(ps) == 0 {
		return nil
	}
	out := make([]corev1.Toleration, len(ps))
	for i, p := range ps {
		out[i] = TolerationFromProto(p)
	}
	return out
}

// cloneMap copies m, giving nil for an empty map so that converted infos
// compare equal to ones built by Merge.
func cloneMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return maps.Clone(m)
}
