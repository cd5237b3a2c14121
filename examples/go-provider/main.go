// Command go-provider is a complete admission-check provider: it sends
// every pod of a workload to the node pool its AdmissionCheck names.
package main

import (
	"context"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/services/checks/sdk"
)

func evaluate(_ context.Context, req *checksv1.EvaluateRequest) (*checksv1.EvaluateResponse, error) {
	params := struct{ Pool string }{Pool: "general"} // spec.parameters: {"pool": "a100"}
	if err := sdk.DecodeParameters(req, &params); err != nil {
		return nil, err // INVALID_ARGUMENT, naming the field
	}
	update := &checksv1.PodSetUpdate{NodeSelector: map[string]string{"example.com/pool": params.Pool}}
	return sdk.Ready(sdk.UpdateEveryPodSet(req, update)...), nil
}

func main() {
	sdk.Main(sdk.Info{
		Name:         "pool.checks.example.com",
		Capabilities: []checksv1.Capability{checksv1.Capability_CAPABILITY_POD_SET_UPDATES},
	}, sdk.EvaluateFunc(evaluate))
}
