package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/go-logr/logr"

	"github.com/sluice-dev/sluice/services/checks/providers/budget"
	"github.com/sluice-dev/sluice/services/checks/providers/nodepool"
	"github.com/sluice-dev/sluice/services/checks/sdk"
)

// Provider names --provider accepts.
const (
	providerNodepool = "nodepool"
	providerBudget   = "budget"
	providerApproval = "approval"
)

// providerFlags choose the provider the process serves. nodepool keeps no
// state and scales out; budget keeps its accounting in memory, so it runs
// as one replica of its own.
type providerFlags struct {
	name           string
	budgetConfig   string
	reloadInterval time.Duration
	restartGrace   time.Duration
	approval       *approvalFlags
}

func bindProviderFlags(fs *flag.FlagSet) *providerFlags {
	f := &providerFlags{}
	fs.StringVar(&f.name, "provider", providerNodepool, "the provider to serve: nodepool (stateless, any number of replicas), budget (one replica, needs --budget-config) or approval (reads Workloads through --kubeconfig)")
	fs.StringVar(&f.budgetConfig, "budget-config", "", "with --provider=budget: YAML file of the namespaces' budgets, read again when it changes")
	fs.DurationVar(&f.reloadInterval, "budget-reload-interval", 5*time.Second, "with --provider=budget: how often --budget-config is read again")
	fs.DurationVar(&f.restartGrace, "budget-restart-grace", budget.DefaultRestartGrace,
		fmt.Sprintf("with --provider=budget: after it starts, how long after sluice first watches it (WatchChanges) the check answers waiting workloads PENDING while sluice asks again about admitted ones (%s after the start when never watched; 0: no warm-up)", budget.MaxRestartWarmUp))
	f.approval = bindApprovalFlags(fs)
	return f
}

// provider is what serveChecks serves.
type provider struct {
	info    sdk.Info
	checker sdk.Checker
	// background runs beside the server until ctx ends; nil for none.
	background func(ctx context.Context, log logr.Logger) error
}

// load checks the flags and builds the provider; a budget config that
// does not parse stops the process here, before it serves.
func (f *providerFlags) load() (*provider, error) {
	switch f.name {
	case providerNodepool:
		if f.budgetConfig != "" {
			return nil, fmt.Errorf("--budget-config: only with --provider=%s", providerBudget)
		}
		return &provider{info: nodepool.Info(version), checker: nodepool.Checker{}}, nil
	case providerBudget:
		return f.loadBudget()
	case providerApproval:
		return f.approval.load()
	}
	return nil, fmt.Errorf("--provider: %q is not one of %s, %s, %s", f.name, providerNodepool, providerBudget, providerApproval)
}

func (f *providerFlags) loadBudget() (*provider, error) {
	if f.budgetConfig == "" {
		return nil, fmt.Errorf("--budget-config: required with --provider=%s", providerBudget)
	}
	if f.reloadInterval <= 0 {
		return nil, fmt.Errorf("--budget-reload-interval: %s is not positive", f.reloadInterval)
	}
	if f.restartGrace < 0 {
		return nil, fmt.Errorf("--budget-restart-grace: %s is negative", f.restartGrace)
	}
	cfg, data, err := budget.LoadFile(f.budgetConfig)
	if err != nil {
		return nil, fmt.Errorf("--budget-config: %w", err)
	}
	checker := budget.New(cfg, nil, budget.WithRestartGrace(f.restartGrace))
	return &provider{
		info:    budget.Info(version),
		checker: checker,
		background: func(ctx context.Context, log logr.Logger) error {
			return budget.NewReloader(f.budgetConfig, checker, data, log).Run(ctx, f.reloadInterval)
		},
	}, nil
}
