package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/go-logr/logr"
	"k8s.io/client-go/metadata"

	"github.com/sluice-dev/sluice/pkg/kube"
	"github.com/sluice-dev/sluice/services/checks/providers/approval"
)

// approvalFlags are the Kubernetes client settings of --provider=approval,
// the only provider that reads the API: --kubeconfig, --kube-api-qps and
// --kube-api-burst.
type approvalFlags struct {
	client *kube.ClientFlags
}

func bindApprovalFlags(fs *flag.FlagSet) *approvalFlags {
	return &approvalFlags{client: kube.BindClientFlags(fs)}
}

// load builds the approval provider; its Workload cache fills in the
// background, and Probe answers not ready until it has synced.
func (f *approvalFlags) load() (*provider, error) {
	cfg, err := f.client.RESTConfig(serviceName + "-approval/" + version)
	if err != nil {
		return nil, fmt.Errorf("--provider=%s: %w", providerApproval, err)
	}
	client, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("--provider=%s: creating the metadata client: %w", providerApproval, err)
	}
	workloads, err := approval.NewInformer(client)
	if err != nil {
		return nil, fmt.Errorf("--provider=%s: %w", providerApproval, err)
	}
	return &provider{
		info:    approval.Info(version),
		checker: approval.New(workloads),
		background: func(ctx context.Context, log logr.Logger) error {
			workloads.Run(ctx, log.WithName("workloads"))
			return nil
		},
	}, nil
}
