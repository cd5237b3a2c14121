// Command grouper is sluice's pod lifecycle service. It watches the pods the
// webhook marked as managed, submits their workloads to the admitter,
// ungates them when the admitter's decision stream admits them, deletes
// them on eviction, reports how they ended and releases their finalizer.
//
//	grouper [flags]              run the service
//	grouper release-all [flags]  remove sluice's gate and finalizer from
//	                             every managed pod (emergency exit)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/sluice-dev/sluice/pkg/kube"
	"github.com/sluice-dev/sluice/pkg/mtls"
	"github.com/sluice-dev/sluice/pkg/serve"
	"github.com/sluice-dev/sluice/services/grouper/internal/app"
	"github.com/sluice-dev/sluice/services/grouper/internal/release"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const (
	serviceName     = "sluice-grouper"
	defaultHTTPAddr = ":8082"
	releaseCommand  = "release-all"
)

func main() {
	var err error
	if len(os.Args) > 1 && os.Args[1] == releaseCommand {
		err = runRelease(os.Args[2:])
	} else {
		err = run()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", serviceName, err)
		os.Exit(1)
	}
}

func run() error {
	fs := flag.CommandLine
	sf := serve.BindFlags(fs)
	setDefault(fs, "http-addr", defaultHTTPAddr)
	kf := kube.BindClientFlags(fs)
	var cfg app.Config
	var shardIndex, shardCount uint
	fs.StringVar(&cfg.AdmitterAddr, "admitter-addr", "127.0.0.1:9090", "gRPC target of the admitter (e.g. dns:///admitter.sluice-system:9090)")
	cfg.TLS = mtls.BindFlags(fs, "the admitter's serving certificate")
	fs.StringVar(&cfg.AdmitterServerName, "admitter-server-name", "", "name the admitter's certificate must hold (default: the host of --admitter-addr)")
	fs.IntVar(&cfg.Workers, "workers", 32, "pods handled at once (bounds concurrent ungate patches and admitter calls)")
	fs.UintVar(&shardIndex, "shard-index", 0, "index of this replica's shard, below --shard-count")
	fs.UintVar(&shardCount, "shard-count", 1, "number of shards the workloads are split into (fnv32a(namespace/workload) % count)")
	fs.DurationVar(&cfg.CallTimeout, "admitter-timeout", 10*time.Second, "deadline of each admitter call")
	fs.Usage = usage(fs)
	flag.Parse()
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (the only command is %s)", fs.Arg(0), releaseCommand)
	}
	if shardIndex > 1<<32-1 || shardCount > 1<<32-1 {
		return errors.New("--shard-index and --shard-count must fit in 32 bits")
	}
	cfg.Shard.Index, cfg.Shard.Count = uint32(shardIndex), uint32(shardCount)

	return serve.Main(context.Background(), os.Stderr, serviceName, version, sf, func(ctx context.Context, log logr.Logger) error {
		ctrl.SetLogger(log)
		var err error
		if cfg.REST, err = kf.RESTConfig(serviceName + "/" + version); err != nil {
			return err
		}
		cfg.HTTPAddr = sf.HTTPAddr
		cfg.Pprof = sf.Pprof
		log.Info("starting", "version", version, "admitter", cfg.AdmitterAddr, "mutualTLS", cfg.TLS.Enabled(), "workers", cfg.Workers,
			"shardIndex", cfg.Shard.Index, "shardCount", cfg.Shard.Count)
		return app.Run(ctx, log, cfg)
	})
}

func runRelease(args []string) error {
	fs := flag.NewFlagSet(releaseCommand, flag.ContinueOnError)
	kf := kube.BindClientFlags(fs)
	var opts release.Options
	fs.StringVar(&opts.Namespace, "namespace", "", "release only the pods of this namespace (default: all namespaces)")
	fs.BoolVar(&opts.DryRun, "dry-run", false, "print what would be released without changing anything")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: grouper %s [flags]\n\n"+
			"Removes sluice's scheduling gate (%s) and finalizer from every pod labelled as managed by sluice.\n"+
			"Released pods schedule without admission and are deleted without accounting. Stop the grouper\n"+
			"(and the webhook, or new pods come back gated) before using it.\n\nFlags:\n", releaseCommand, "kueue.x-k8s.io/admission")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := kf.RESTConfig(serviceName + "-release/" + version)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("create API client: %w", err)
	}
	ctx, stop := serve.SignalContext()
	defer stop()
	opts.Out = os.Stdout
	_, err = release.All(ctx, cs, opts)
	return err
}

// setDefault changes the default of an already defined flag.
func setDefault(fs *flag.FlagSet, name, value string) {
	f := fs.Lookup(name)
	if f == nil {
		return
	}
	f.DefValue = value
	_ = f.Value.Set(value) // a string flag accepts any value
}

func usage(fs *flag.FlagSet) func() {
	return func() {
		fmt.Fprintf(fs.Output(), "Usage:\n  grouper [flags]\n  grouper %s [flags]   (see grouper %s -h)\n\nFlags:\n",
			releaseCommand, releaseCommand)
		fs.PrintDefaults()
	}
}
