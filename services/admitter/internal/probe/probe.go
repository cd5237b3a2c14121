// Package probe keeps each AdmissionCheck's status true to its provider:
// it asks the provider for its identity and readiness (GetProviderInfo and
// Probe) when the check appears or changes and every interval, and writes
// the Active condition and the provider's identity when they changed.
package probe

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/services/admitter/internal/checks"
	"github.com/sluice-dev/sluice/services/admitter/internal/lifecycle"
	"github.com/sluice-dev/sluice/services/admitter/internal/workload"
)

// Defaults for Config.
const (
	DefaultInterval = 30 * time.Second
	// workers probe several checks at once, so one slow provider does not
	// hold up the others.
	workers = 4
)

// Config is what a Prober needs.
type Config struct {
	// Client writes AdmissionCheck status; Reader reads (the cache).
	Client   client.Client
	Reader   client.Reader
	Checks   *checks.Pool
	Recorder events.EventRecorder
	// Interval is how often every check is probed again.
	Interval time.Duration
}

// Prober refreshes AdmissionCheck status.
type Prober struct {
	cfg Config
	q   workqueue.TypedDelayingInterface[string]
}

// New returns a Prober that probes nothing until Run.
func New(cfg Config) *Prober {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	return &Prober{cfg: cfg, q: workqueue.NewTypedDelayingQueue[string]()}
}

// Enqueue asks for a probe of the named AdmissionCheck.
func (p *Prober) Enqueue(name string) { p.q.Add(name) }

// Run probes until ctx ends: every check now, then every interval, and
// whichever Enqueue asks for.
func (p *Prober) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() { p.work(ctx) })
	}
	p.enqueueAll(ctx)
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-t.C:
			p.enqueueAll(ctx)
		}
	}
	p.q.ShutDown()
	wg.Wait()
}

func (p *Prober) enqueueAll(ctx context.Context) {
	var acs v1alpha1.AdmissionCheckList
	if err := p.cfg.Reader.List(ctx, &acs); err != nil {
		return
	}
	for _, ac := range acs.Items {
		p.q.Add(ac.Name)
	}
}

func (p *Prober) work(ctx context.Context) {
	for {
		name, shutdown := p.q.Get()
		if shutdown {
			return
		}
		if err := p.probe(ctx, name); err != nil && ctx.Err() == nil {
			ctrl.LoggerFrom(ctx).V(1).Info("refresh admission check status", "check", name, "error", err.Error())
			p.q.AddAfter(name, time.Second)
		}
		p.q.Done(name)
	}
}

// probe asks the check's provider for its identity and readiness and
// writes the check's status when it changed.
func (p *Prober) probe(ctx context.Context, name string) error {
	var ac v1alpha1.AdmissionCheck
	if err := p.cfg.Reader.Get(ctx, client.ObjectKey{Name: name}, &ac); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	info, answer, err := p.cfg.Checks.Describe(ctx, &ac)
	want := statusFor(&ac, info, answer, err)
	if equality.Semantic.DeepEqual(ac.Status, want.Status) {
		return nil
	}
	if err := p.cfg.Client.Status().Patch(ctx, want, client.MergeFrom(&ac), client.FieldOwner(lifecycle.FieldOwner)); err != nil {
		return err
	}
	if c := findActive(want); c != nil && c.Status != metav1.ConditionTrue {
		p.cfg.Recorder.Eventf(want, nil, "Warning", c.Reason, "Probe", "%s", c.Message)
	}
	return nil
}

// statusFor returns ac with the status the provider's answers imply: the
// Active condition, and the provider's identity when it gave one (a
// provider that cannot be reached keeps the identity it last gave).
func statusFor(ac *v1alpha1.AdmissionCheck, info *checksv1.GetProviderInfoResponse, answer *checksv1.ProbeResponse, err error) *v1alpha1.AdmissionCheck {
	active, reason, message := checks.Activity(info, answer, err)
	want := ac.DeepCopy()
	status := metav1.ConditionFalse
	if active {
		status = metav1.ConditionTrue
	}
	workload.SetCondition(&want.Status.Conditions, v1alpha1.AdmissionCheckActive, status, reason, message, ac.Generation)
	if prov := checks.ProviderStatus(info); prov != nil {
		want.Status.Provider = prov
	}
	return want
}

func findActive(ac *v1alpha1.AdmissionCheck) *metav1.Condition {
	for i := range ac.Status.Conditions {
		if ac.Status.Conditions[i].Type == v1alpha1.AdmissionCheckActive {
			return &ac.Status.Conditions[i]
		}
	}
	return nil
}
