// Package app wires the webhook service together: caches, admission
// handlers, the HTTPS webhook server, the probe and metrics server, and in
// local mode its own certificates and webhook configurations.
package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/sluice-dev/sluice/pkg/serve"
	"github.com/sluice-dev/sluice/services/webhook/internal/certs"
	"github.com/sluice-dev/sluice/services/webhook/internal/handler"
	"github.com/sluice-dev/sluice/services/webhook/internal/lookup"
	"github.com/sluice-dev/sluice/services/webhook/internal/metrics"
	"github.com/sluice-dev/sluice/services/webhook/internal/mutate"
	"github.com/sluice-dev/sluice/services/webhook/internal/registration"
)

// TracerName names the tracer the webhook's spans come from.
const TracerName = "github.com/sluice-dev/sluice/services/webhook"

// certValidity is how long a self-generated serving certificate lasts.
const certValidity = 365 * 24 * time.Hour

// Config is everything the service needs to run.
type Config struct {
	// REST reaches the API server.
	REST *rest.Config
	// HTTPAddr serves /healthz, /readyz and /metrics.
	HTTPAddr string
	// Pprof serves Go's profiles under /debug/pprof/ with the probes.
	Pprof bool
	// WebhookHost and WebhookPort are where the HTTPS webhook listens.
	WebhookHost string
	WebhookPort int
	// CertDir holds tls.crt and tls.key (mounted in a cluster, generated in
	// self-register mode).
	CertDir string
	// SelfRegister generates the certificates and applies the webhook
	// configurations pointing at AdvertiseHost:WebhookPort.
	SelfRegister bool
	// AdvertiseHost is the host the API server dials in self-register mode.
	AdvertiseHost string
	// UnregisterOnExit deletes the configurations at shutdown (self-register
	// mode only). Leaving them makes pod creation in managed namespaces fail
	// while the webhook is down, which is the safe default.
	UnregisterOnExit bool
	// ConfigName names both webhook configurations.
	ConfigName string
	// SystemNamespace is where sluice runs; it is never managed and its
	// service accounts skip validation.
	SystemNamespace string
	// ManagedNamespaces is a label selector over namespaces; empty means
	// every namespace but kube-system and SystemNamespace.
	ManagedNamespaces string
	// Owners is the --owners preset: which pods are queued by their
	// controller's kind (see mutate.Preset); empty means auto.
	Owners string
	// KueueOwners overrides mutate.KueueOwners, the kinds left to Kueue
	// beside it ("group/Kind,..."); empty keeps the built-in list.
	KueueOwners string
	// GangScheduling sets spec.schedulingGroup on the pods of KEP-976
	// groups created beforehand, naming the PodGroup the grouper creates
	// for the group.
	GangScheduling bool
	// ShutdownDelay keeps serving, reporting not ready, this long after the
	// stop signal so the Service stops routing to this replica first.
	ShutdownDelay time.Duration
}

// NamespaceSelector returns the managed-namespaces selector of c.
func (c Config) NamespaceSelector() (*metav1.LabelSelector, labels.Selector, error) {
	ls := registration.DefaultNamespaces(c.SystemNamespace)
	if c.ManagedNamespaces != "" {
		var err error
		ls, err = metav1.ParseToLabelSelector(c.ManagedNamespaces)
		if err != nil {
			return nil, nil, fmt.Errorf("--managed-namespaces %q: %w", c.ManagedNamespaces, err)
		}
	}
	sel, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		return nil, nil, fmt.Errorf("managed-namespaces selector: %w", err)
	}
	return ls, sel, nil
}

// owners returns the configured preset and the kinds left to Kueue beside
// it.
func (c Config) owners() (mutate.Preset, []schema.GroupKind, error) {
	preset := mutate.PresetAuto
	if c.Owners != "" {
		var err error
		if preset, err = mutate.ParsePreset(c.Owners); err != nil {
			return "", nil, err
		}
	}
	kinds := mutate.KueueOwners
	if c.KueueOwners != "" {
		var err error
		if kinds, err = mutate.ParseKinds(c.KueueOwners); err != nil {
			return "", nil, fmt.Errorf("--kueue-owners: %w", err)
		}
	}
	return preset, kinds, nil
}

// Run serves until ctx is done, then shuts down gracefully.
func Run(ctx context.Context, log logr.Logger, cfg Config) error {
	nsLabelSelector, nsSelector, err := cfg.NamespaceSelector()
	if err != nil {
		return err
	}
	preset, kueueKinds, err := cfg.owners()
	if err != nil {
		return err
	}
	host := cfg.WebhookHost
	var caBundle []byte
	if cfg.SelfRegister {
		if host == "" {
			host = cfg.AdvertiseHost
		}
		caBundle, err = certs.Generate(cfg.CertDir, []string{cfg.AdvertiseHost, "localhost"}, certValidity)
		if err != nil {
			return fmt.Errorf("self-register: %w", err)
		}
		log.Info("generated serving certificate", "dir", cfg.CertDir, "host", cfg.AdvertiseHost)
	}

	m, err := metrics.New(ctrlmetrics.Registry)
	if err != nil {
		return err
	}
	// The lookup reports Kueue's presence at sync and on each change, one
	// call at a time, so the gauge and the log follow it in order.
	ownersLog := log.WithName("owners")
	reportOwners := func(kueueInstalled bool, why string) {
		inEffect := preset.InEffect(kueueInstalled)
		m.SetOwnersPreset(string(inEffect))
		ownersLog.Info(why, "owners", preset, "inEffect", inEffect, "kueueInstalled", kueueInstalled,
			"leftToKueue", mutate.FormatKinds(leftToKueue(inEffect, kueueKinds)))
	}
	caches := lookup.New(cfg.REST, lookup.Options{
		Namespaces:      nsSelector,
		DefaultQueue:    mutate.DefaultQueue,
		DefaultingLabel: registration.DefaultingLabel,
		DefaultingValue: registration.DefaultingEnabled,
		AllGroupPods:    cfg.GangScheduling,
		WatchKueue:      preset == mutate.PresetAuto,
		OnKueue: func(installed, changed bool) {
			switch {
			case !changed:
				reportOwners(installed, "owners preset in effect")
			case installed:
				reportOwners(installed, "Kueue's Workload CRD appeared; owners preset changed")
			default:
				reportOwners(installed, "Kueue's Workload CRD disappeared; owners preset changed")
			}
		},
		Log: log.WithName("lookup"),
	})
	mutator, err := handler.NewMutator(caches, m, otel.Tracer(TracerName), otel.GetTextMapPropagator(),
		handler.WithGangScheduling(cfg.GangScheduling),
		handler.WithLeftToKueue(func() []schema.GroupKind {
			return leftToKueue(preset.InEffect(caches.KueueInstalled()), kueueKinds)
		}))
	if err != nil {
		return err
	}
	validator, err := handler.NewValidator(caches, m)
	if err != nil {
		return err
	}
	server := webhook.NewServer(webhook.Options{Host: host, Port: cfg.WebhookPort, CertDir: cfg.CertDir})
	server.Register(handler.MutatePath, mutator.Webhook())
	server.Register(handler.DefaultPath, mutator.DefaultingWebhook())
	server.Register(handler.ValidatePath, &admission.Webhook{Handler: validator})

	kube, err := client.New(cfg.REST, client.Options{})
	if err != nil {
		return fmt.Errorf("create API client: %w", err)
	}
	reg := registration.Options{
		Name:            cfg.ConfigName,
		URL:             "https://" + net.JoinHostPort(cfg.AdvertiseHost, strconv.Itoa(cfg.WebhookPort)),
		CABundle:        caBundle,
		MutatePath:      handler.MutatePath,
		DefaultPath:     handler.DefaultPath,
		ValidatePath:    handler.ValidatePath,
		Namespaces:      nsLabelSelector,
		SystemNamespace: cfg.SystemNamespace,
	}

	// Serving continues for ShutdownDelay after the stop signal, reporting
	// not ready, so that callers are routed elsewhere before it stops.
	serveCtx, stopServing := context.WithCancel(context.WithoutCancel(ctx))
	defer stopServing()
	go func() {
		<-ctx.Done()
		log.Info("stop requested; draining", "delay", cfg.ShutdownDelay)
		select {
		case <-time.After(cfg.ShutdownDelay):
		case <-serveCtx.Done():
		}
		stopServing()
	}()

	var registered atomic.Bool
	probes := serve.NewServer(ctrlmetrics.Registry)
	probes.EnablePprof(cfg.Pprof)
	probes.AddReadinessCheck("caches", caches.Ready)
	probes.AddReadinessCheck("webhook-server", func(context.Context) error {
		return server.StartedChecker()(&http.Request{})
	})
	if cfg.SelfRegister {
		probes.AddReadinessCheck("registration", func(context.Context) error {
			if !registered.Load() {
				return errors.New("webhook configurations not applied yet")
			}
			return nil
		})
	}
	probes.AddReadinessCheck("shutdown", func(context.Context) error {
		if ctx.Err() != nil {
			return errors.New("shutting down")
		}
		return nil
	})

	g, gctx := errgroup.WithContext(serveCtx)
	g.Go(func() error { return caches.Run(gctx) })
	g.Go(func() error { return probes.ListenAndRun(gctx, log, cfg.HTTPAddr) })
	g.Go(func() error {
		// Answer no admission request before the caches can answer it.
		select {
		case <-caches.Synced():
		case <-gctx.Done():
			return nil
		}
		wctx := logf.IntoContext(gctx, log.WithName("server"))
		if err := server.Start(wctx); err != nil {
			return fmt.Errorf("webhook server: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		warnAboutKueue(gctx, log, kube)
		if !cfg.SelfRegister {
			return nil
		}
		if err := waitServing(gctx, server); err != nil {
			return nil // stopping before the server came up
		}
		if err := registration.Apply(gctx, kube, reg); err != nil {
			return fmt.Errorf("self-register: %w", err)
		}
		registered.Store(true)
		log.Info("webhook configurations applied", "name", cfg.ConfigName, "url", reg.URL)
		return nil
	})
	err = g.Wait()

	if cfg.SelfRegister && cfg.UnregisterOnExit {
		rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if rerr := registration.Remove(rctx, kube, cfg.ConfigName); rerr != nil {
			err = errors.Join(err, rerr)
		} else {
			log.Info("webhook configurations removed", "name", cfg.ConfigName)
		}
	}
	return err
}

// leftToKueue returns the controller kinds whose pods sluice leaves to
// Kueue under the preset in effect.
func leftToKueue(inEffect mutate.Preset, kueueKinds []schema.GroupKind) []schema.GroupKind {
	if inEffect == mutate.PresetBesideKueue {
		return kueueKinds
	}
	return nil
}

// waitServing polls until the webhook server accepts TLS connections.
func waitServing(ctx context.Context, server webhook.Server) error {
	check := server.StartedChecker()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if check(&http.Request{}) == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// warnAboutKueue logs loudly when Kueue's pod webhook is installed: both
// read the same pod keys and must never manage the same namespaces.
func warnAboutKueue(ctx context.Context, log logr.Logger, c client.Client) {
	found, err := registration.ForeignPodWebhooks(ctx, c)
	if err != nil {
		log.Info("could not check for Kueue's pod webhook", "error", err.Error())
		return
	}
	if len(found) > 0 {
		log.Error(errors.New("kueue pod webhook present"),
			"Kueue's pod integration is registered; it reads the same pod keys as sluice. Make sure its namespace selector and sluice's --managed-namespaces never overlap",
			"webhooks", found)
	}
}
