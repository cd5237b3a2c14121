package controller

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/services/admitter/internal/checks"
	"github.com/sluice-dev/sluice/services/admitter/internal/workload"
)

// probeAll queues every AdmissionCheck for a fresh probe of its provider.
func (a *Admitter) probeAll(ctx context.Context) {
	var acs v1alpha1.AdmissionCheckList
	if err := a.cfg.Cache.List(ctx, &acs); err != nil {
		return
	}
	for _, ac := range acs.Items {
		a.probeQ.Add(ac.Name)
	}
}

// probeWorker refreshes the status of the AdmissionChecks queued in probeQ,
// several at once so that one slow provider does not hold up the others.
func (a *Admitter) probeWorker(ctx context.Context) {
	const workers = 4
	done := make(chan struct{})
	for range workers {
		go func() {
			defer func() { done <- struct{}{} }()
			for {
				name, shutdown := a.probeQ.Get()
				if shutdown {
					return
				}
				if err := a.probe(ctx, name); err != nil && ctx.Err() == nil {
					a.log.V(1).Info("refresh admission check status", "check", name, "error", err.Error())
					a.probeQ.AddAfter(name, time.Second)
				}
				a.probeQ.Done(name)
			}
		}()
	}
	for range workers {
		<-done
	}
}

// probe asks ac's provider for its identity and readiness and writes ac's
// status (Active condition and provider) when it changed.
func (a *Admitter) probe(ctx context.Context, name string) error {
	var ac v1alpha1.AdmissionCheck
	if err := a.cfg.Cache.Get(ctx, client.ObjectKey{Name: name}, &ac); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	info, probe, err := a.cfg.Checks.Describe(ctx, &ac)
	active, reason, message := checks.Activity(info, probe, err)
	want := ac.DeepCopy()
	workload.SetCondition(&want.Status.Conditions, v1alpha1.AdmissionCheckActive, conditionStatus(active), reason, message, ac.Generation)
	if p := checks.ProviderStatus(info); p != nil {
		want.Status.Provider = p
	}
	if equality.Semantic.DeepEqual(ac.Status, want.Status) {
		return nil
	}
	if err := a.cfg.Client.Status().Patch(ctx, want, client.MergeFrom(&ac), client.FieldOwner(FieldOwner)); err != nil {
		return err
	}
	if !active {
		a.cfg.Recorder.Eventf(want, nil, "Warning", reason, "Probe", "%s", message)
	}
	return nil
}
