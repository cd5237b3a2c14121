// Command webhook is sluice's pod admission webhook. It marks new pods that
// sluice queues (scheduling gate, managed label, finalizer, role hash, trace
// context) and refuses pods whose queueing labels and annotations are wrong.
//
// In a cluster it serves with a mounted certificate behind a Service and the
// webhook configurations come from deploy/. With --self-register it runs
// anywhere the API server can reach it (a local control plane): it makes its
// own CA and certificate and applies the webhook configurations itself.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/sluice-dev/sluice/pkg/kube"
	"github.com/sluice-dev/sluice/pkg/serve"
	"github.com/sluice-dev/sluice/services/webhook/internal/app"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const serviceName = "sluice-webhook"

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", serviceName, err)
		os.Exit(1)
	}
}

func run() error {
	fs := flag.CommandLine
	sf := serve.BindFlags(fs)
	kf := kube.BindClientFlags(fs)
	var cfg app.Config
	fs.StringVar(&cfg.WebhookHost, "webhook-host", "", "address the HTTPS webhook listens on (empty: all; with --self-register: --advertise-host)")
	fs.IntVar(&cfg.WebhookPort, "webhook-port", 9443, "port the HTTPS webhook listens on")
	fs.StringVar(&cfg.CertDir, "cert-dir", "/etc/sluice/webhook-certs", "directory with tls.crt and tls.key (written there with --self-register)")
	fs.BoolVar(&cfg.SelfRegister, "self-register", false, "generate a CA and serving certificate and apply the webhook configurations pointing at https://<advertise-host>:<webhook-port> (for a local control plane)")
	fs.StringVar(&cfg.AdvertiseHost, "advertise-host", "127.0.0.1", "host the API server dials with --self-register")
	fs.BoolVar(&cfg.UnregisterOnExit, "unregister-on-exit", false, "with --self-register, delete the webhook configurations on shutdown (otherwise pod creation in managed namespaces fails while the webhook is down)")
	fs.StringVar(&cfg.ConfigName, "webhook-config-name", "sluice-webhook", "name of the MutatingWebhookConfiguration and ValidatingWebhookConfiguration")
	fs.StringVar(&cfg.SystemNamespace, "system-namespace", "sluice-system", "namespace sluice runs in: never managed, and its service accounts skip validation")
	fs.StringVar(&cfg.ManagedNamespaces, "managed-namespaces", "", "label selector of the namespaces whose pods sluice manages (default: kubernetes.io/metadata.name notin (kube-system,<system-namespace>))")
	fs.StringVar(&cfg.Owners, "owners", "auto", "which pods are queued by their controller: alone (every pod that names a queue, whatever controls it), beside-kueue (pods of the kinds Kueue queues whole are left to it), auto (beside-kueue while Kueue's CRD workloads.kueue.x-k8s.io exists, alone otherwise)")
	fs.StringVar(&cfg.KueueOwners, "kueue-owners", "", "with --owners beside-kueue or auto: the controller kinds left to Kueue, as group/Kind,... (e.g. batch/Job,apps/ReplicaSet; default: every kind Kueue integrates)")
	fs.BoolVar(&cfg.GangScheduling, "gang-scheduling", false, "set spec.schedulingGroup.podGroupName to the group's name on the pods of KEP-976 groups with a total-count annotation, so kube-scheduler binds each group all-or-nothing through the PodGroup the grouper creates (needs Kubernetes 1.36 with the GenericWorkload and GangScheduling feature gates)")
	fs.DurationVar(&cfg.ShutdownDelay, "shutdown-delay", 5*time.Second, "keep serving, not ready, this long after SIGTERM before stopping")
	flag.Parse()

	return serve.Main(context.Background(), os.Stderr, serviceName, version, sf, func(ctx context.Context, log logr.Logger) error {
		ctrl.SetLogger(log)
		var err error
		if cfg.REST, err = kf.RESTConfig(serviceName + "/" + version); err != nil {
			return err
		}
		cfg.HTTPAddr = sf.HTTPAddr
		cfg.Pprof = sf.Pprof
		log.Info("starting", "version", version, "selfRegister", cfg.SelfRegister, "webhookPort", cfg.WebhookPort, "gangScheduling", cfg.GangScheduling, "owners", cfg.Owners)
		return app.Run(ctx, log, cfg)
	})
}
