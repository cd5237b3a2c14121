// Package nodepool is the built-in admission check for workloads that must
// run on a pool of prepared nodes (KEP-1145 Story 1): something outside
// sluice labels and taints the nodes, and the check steers every pod of an
// admitted workload onto them with a node selector, a toleration for the
// pool's taint and labels that mark the pods as the pool's.
//
// Parameters (the AdmissionCheck's spec.parameters):
//
//	nodeLabels  map, required: node labels of the pool; become the pods' nodeSelector.
//	taint       object, optional: {key, value, effect} of the pool's taint;
//	            the pods get a toleration with operator Equal and the same effect.
//	            effect is NoSchedule (default), PreferNoSchedule or NoExecute.
//	podLabels   map, optional: labels for the pods; when absent the pods get
//	            nodepool.sluice.dev/pool=<value of the first node label by key>.
//
// The answer depends on the request alone, so it is deterministic, and the
// check holds nothing between calls.
package nodepool

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/pkg/checkvalidate"
	"github.com/sluice-dev/sluice/services/checks/sdk"
)

const (
	// ProviderName is the provider's name in GetProviderInfo.
	ProviderName = "nodepool.checks.sluice.dev"
	// PoolLabel is the pod label added when podLabels is not given.
	PoolLabel = "nodepool.sluice.dev/pool"
	// ReasonAssigned is the reason of every READY answer.
	ReasonAssigned = "NodePoolAssigned"
)

// Taint is the taint the pool's nodes carry.
type Taint struct {
	Key    string `json:"key"`
	Value  string `json:"value,omitempty"`
	Effect string `json:"effect,omitempty"`
}

// Params are the check's parameters.
type Params struct {
	NodeLabels map[string]string `json:"nodeLabels"`
	Taint      *Taint            `json:"taint,omitempty"`
	PodLabels  map[string]string `json:"podLabels,omitempty"`
}

// taintEffect maps the Kubernetes name of a taint effect to the
// contract's; empty means NoSchedule.
func taintEffect(name string) (checksv1.TaintEffect, bool) {
	switch name {
	case "", "NoSchedule":
		return checksv1.TaintEffect_TAINT_EFFECT_NO_SCHEDULE, true
	case "PreferNoSchedule":
		return checksv1.TaintEffect_TAINT_EFFECT_PREFER_NO_SCHEDULE, true
	case "NoExecute":
		return checksv1.TaintEffect_TAINT_EFFECT_NO_EXECUTE, true
	}
	return checksv1.TaintEffect_TAINT_EFFECT_UNSPECIFIED, false
}

// Info describes the provider; version is the build's version.
func Info(version string) sdk.Info {
	return sdk.Info{
		Name:          ProviderName,
		VendorVersion: version,
		Capabilities:  []checksv1.Capability{checksv1.Capability_CAPABILITY_POD_SET_UPDATES},
	}
}

// Checker is the nodepool check. Its zero value is ready to use.
type Checker struct{}

var _ sdk.Checker = Checker{}

// Evaluate answers READY with one update per pod set that sends the pods
// to the pool, or INVALID_ARGUMENT naming the parameter that is wrong.
func (Checker) Evaluate(_ context.Context, req *checksv1.EvaluateRequest) (*checksv1.EvaluateResponse, error) {
	p, err := ParseParameters(req)
	if err != nil {
		return nil, err
	}
	resp := sdk.Ready(sdk.UpdateEveryPodSet(req, p.update())...)
	resp.Reason = ReasonAssigned
	resp.Message = sdk.TruncateMessage("pods go to nodes with " + formatLabels(p.NodeLabels))
	return resp, nil
}

// Release has nothing to free.
func (Checker) Release(context.Context, *checksv1.ReleaseRequest) error { return nil }

// ParseParameters decodes and validates the request's parameters. Errors
// are INVALID_ARGUMENT and name the parameter.
func ParseParameters(req interface{ GetParameters() *structpb.Struct }) (*Params, error) {
	var p Params
	if err := sdk.DecodeParameters(req, &p); err != nil {
		return nil, err
	}
	if err := p.validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

func (p *Params) validate() error {
	if len(p.NodeLabels) == 0 {
		return sdk.InvalidParameter("nodeLabels", "required: the node labels of the pool, such as {\"pool\": \"a100\"}")
	}
	for _, k := range slices.Sorted(maps.Keys(p.NodeLabels)) {
		if err := labelEntry(k, p.NodeLabels[k]); err != nil {
			return sdk.InvalidParameter(fmt.Sprintf("nodeLabels[%q]", k), "%v", err)
		}
	}
	if t := p.Taint; t != nil {
		if t.Key == "" {
			return sdk.InvalidParameter("taint.key", "required when taint is given")
		}
		if err := checkvalidate.QualifiedName(t.Key); err != nil {
			return sdk.InvalidParameter("taint.key", "invalid key: %v", err)
		}
		if err := checkvalidate.LabelValue(t.Value); err != nil {
			return sdk.InvalidParameter("taint.value", "invalid value: %v", err)
		}
		if _, ok := taintEffect(t.Effect); !ok {
			return sdk.InvalidParameter("taint.effect", "%q is not one of NoSchedule, PreferNoSchedule, NoExecute", t.Effect)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(p.PodLabels)) {
		if err := labelEntry(k, p.PodLabels[k]); err != nil {
			return sdk.InvalidParameter(fmt.Sprintf("podLabels[%q]", k), "%v", err)
		}
		if checkvalidate.IsReserved(k) {
			return sdk.InvalidParameter(fmt.Sprintf("podLabels[%q]", k), "key is under a reserved prefix (%s)", strings.Join(checkvalidate.ReservedPrefixes(), ", "))
		}
	}
	return nil
}

func labelEntry(k, v string) error {
	if err := checkvalidate.QualifiedName(k); err != nil {
		return fmt.Errorf("invalid key: %w", err)
	}
	if err := checkvalidate.LabelValue(v); err != nil {
		return fmt.Errorf("invalid value: %w", err)
	}
	return nil
}

// update is what every pod set gets.
func (p *Params) update() *checksv1.PodSetUpdate {
	u := &checksv1.PodSetUpdate{NodeSelector: p.NodeLabels, Labels: p.PodLabels}
	if p.PodLabels == nil {
		first := slices.Sorted(maps.Keys(p.NodeLabels))[0]
		u.Labels = map[string]string{PoolLabel: p.NodeLabels[first]}
	}
	if t := p.Taint; t != nil {
		effect, _ := taintEffect(t.Effect) // validated
		u.Tolerations = []*checksv1.Toleration{{
			Key:      t.Key,
			Operator: checksv1.TolerationOperator_TOLERATION_OPERATOR_EQUAL,
			Value:    t.Value,
			Effect:   effect,
		}}
	}
	return u
}

func formatLabels(m map[string]string) string {
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ",")
}
