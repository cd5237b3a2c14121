// Command admitter is sluice's admitter: it owns the queues and the quota,
// reserves quota for Workloads in batched scheduling cycles, asks the
// admission checks their ClusterQueue names, admits the workloads once
// every check is Ready, and streams its decisions to the grouper over
// sluice.admitter.v1. It is the only writer of Workload objects; one
// replica leads (Lease) and the others stand by.
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/sluice-dev/sluice/pkg/kube"
	"github.com/sluice-dev/sluice/pkg/mtls"
	"github.com/sluice-dev/sluice/pkg/serve"
	"github.com/sluice-dev/sluice/services/admitter/app"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const serviceName = "sluice-admitter"

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", serviceName, err)
		os.Exit(1)
	}
}

// inCluster reports whether the process runs in a Pod.
func inCluster() bool { return os.Getenv("KUBERNETES_SERVICE_HOST") != "" }

func run() error {
	fs := flag.CommandLine
	sf := serve.BindFlags(fs)
	if f := fs.Lookup("http-addr"); f != nil {
		f.DefValue = app.DefaultHTTPAddr
		if err := f.Value.Set(app.DefaultHTTPAddr); err != nil {
			return err
		}
	}
	kf := kube.BindClientFlags(fs)
	var cfg app.Config
	var namespace, trustDomain string
	var groupers mtls.IdentityList
	cfg.TLS = mtls.BindFlags(fs, "the grouper's client certificates")
	fs.Var(&groupers, "grouper-identity", "certificate identity (URI SAN) of the grouper, the only caller of the workload methods; repeat for more (default: spiffe://<trust domain>/ns/<namespace>/sa/sluice-grouper)")
	fs.StringVar(&trustDomain, "trust-domain", mtls.DefaultTrustDomain, "SPIFFE trust domain of the default --grouper-identity")
	fs.StringVar(&cfg.GRPCAddr, "grpc-addr", app.DefaultGRPCAddr, "address AdmitterService (gRPC) listens on")
	fs.StringVar(&namespace, "namespace", app.DefaultNamespace, "namespace sluice runs in (holds the leader Lease, and the Secrets AdmissionChecks' spec.tls names)")
	fs.BoolVar(&cfg.LeaderElect, "leader-elect", inCluster(), "run only while holding the leader Lease (default true in a cluster); standbys serve NOT_SERVING health")
	fs.StringVar(&cfg.LeaseNamespace, "lease-namespace", "", "namespace of the leader Lease (default: --namespace)")
	fs.StringVar(&cfg.LeaseName, "lease-name", app.DefaultLeaseName, "name of the leader Lease")
	fs.DurationVar(&cfg.ProbeInterval, "probe-interval", 30*time.Second, "how often admission-check providers are probed for the AdmissionCheck Active condition")
	fs.DurationVar(&cfg.StatusInterval, "queue-status-interval", time.Second, "least time between two status writes of one ClusterQueue or LocalQueue")
	fs.IntVar(&cfg.WriteConcurrency, "write-concurrency", 32, "concurrent Workload writes of one scheduling cycle")
	fs.IntVar(&cfg.CheckWorkers, "check-workers", 16, "workloads whose admission checks are evaluated at once")
	fs.IntVar(&cfg.ReleaseWorkers, "release-workers", 8, "Release calls to admission-check providers in flight at once")
	fs.DurationVar(&cfg.WaitForPodsReady.Timeout, "wait-for-pods-ready-timeout", 0,
		"start-up deadline of ClusterQueues without their own spec.waitForPodsReady: an admitted workload whose pods have not all started this long after its admission is evicted and requeued with backoff (0: no deadline)")
	fs.StringVar(&cfg.WaitForPodsReady.Condition, "wait-for-pods-ready-condition", "PodsReady",
		"what counts as a started pod for the default deadline: PodsReady (Ready condition True) or PodsScheduled (bound to a node)")
	fs.DurationVar(&cfg.WaitForPodsReady.BackoffBase, "requeuing-backoff-base", time.Minute,
		"wait before the first requeue after a missed default deadline; the n-th waits min(base*2^(n-1), --requeuing-backoff-max)")
	fs.DurationVar(&cfg.WaitForPodsReady.BackoffMax, "requeuing-backoff-max", time.Hour, "longest wait before a requeue after a missed default deadline")
	window := app.DefaultPodGroupReplacementWindow
	fs.DurationVar(&window, "pod-group-replacement-window", app.DefaultPodGroupReplacementWindow,
		"replacement window of ClusterQueues without their own spec.podGroupReplacementWindow: a pod group that holds quota and has no pod left keeps it this long for its pods to be created again, then its Workload is deleted and the quota given back (0: at once)")
	releaseWait := app.DefaultReleaseWait
	fs.DurationVar(&releaseWait, "release-wait", app.DefaultReleaseWait,
		"how long a deleted Workload waits, from its deletion, for an admission-check provider that fails its Release; then the Release is kept in the AdmissionCheck's status.owedReleases, delivered when the provider answers, and the Workload goes (0: at the first failure)")
	fs.BoolVar(&cfg.FairSharing.Enabled, "fair-sharing", false,
		"admit the workloads of a cohort tree in the order of their queues' weighted dominant resource shares (spec.fairSharing.weight); each ClusterQueue's and Cohort's share is in its status.fairSharing.weightedShare")
	strategies := app.DefaultFairSharingPreemptionStrategies
	fs.StringVar(&strategies, "fair-sharing-preemption-strategies", app.DefaultFairSharingPreemptionStrategies,
		"with --fair-sharing, the rules of preemption by share, in order: LessThanOrEqualToFinalShare, LessThanInitialShare, or LessThanOrEqualToFinalShare,LessThanInitialShare")
	var limit int
	fs.IntVar(&limit, "requeuing-backoff-limit-count", -1,
		"requeues allowed after missed default deadlines before the workload is deactivated (negative: no limit)")
	flag.Parse()
	if limit >= 0 {
		n := int32(min(limit, math.MaxInt32))
		cfg.WaitForPodsReady.BackoffLimitCount = &n
	}
	if err := cfg.WaitForPodsReady.Validate(); err != nil {
		return err
	}
	cfg.PodGroupReplacementWindow = &window
	if err := cfg.ValidateReplacementWindow(); err != nil {
		return err
	}
	cfg.ReleaseWait = &releaseWait
	if err := cfg.ValidateReleaseWait(); err != nil {
		return err
	}
	cfg.FairSharing.PreemptionStrategies = strings.Split(strategies, ",")
	if err := cfg.FairSharing.Validate(); err != nil {
		return err
	}
	cfg.Namespace = namespace
	if cfg.LeaseNamespace == "" {
		cfg.LeaseNamespace = namespace
	}
	cfg.Groupers = groupers
	if len(cfg.Groupers) == 0 {
		cfg.Groupers = []string{mtls.ServiceIdentity(trustDomain, namespace, "sluice-grouper")}
	}
	if cfg.TLS.Enabled() {
		if err := cfg.TLS.Validate(); err != nil {
			return err
		}
	}

	return serve.Main(context.Background(), os.Stderr, serviceName, version, sf, func(ctx context.Context, log logr.Logger) error {
		ctrl.SetLogger(log)
		var err error
		if cfg.REST, err = kf.RESTConfig(serviceName + "/" + version); err != nil {
			return err
		}
		cfg.HTTPAddr = sf.HTTPAddr
		cfg.Pprof = sf.Pprof
		log.Info("starting", "version", version, "grpcAddr", cfg.GRPCAddr, "httpAddr", cfg.HTTPAddr,
			"leaderElect", cfg.LeaderElect, "lease", cfg.LeaseNamespace+"/"+cfg.LeaseName,
			"mutualTLS", cfg.TLS.Enabled(), "groupers", cfg.Groupers,
			"fairSharing", cfg.FairSharing.Enabled, "fairSharingPreemptionStrategies", cfg.FairSharing.PreemptionStrategies)
		return app.Run(ctx, log, cfg)
	})
}
