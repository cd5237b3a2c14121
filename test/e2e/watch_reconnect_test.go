package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/test/fakecheck"
)

// TestWatchReconnectCatchesUp: a provider declaring WatchChanges admits a
// pod, which runs. Its WatchChanges streams are then dropped and new ones
// refused, and while no stream is open its answer turns to Retry. Nothing
// is pushed: once streams are accepted again, the admitter's reopened
// stream makes it ask again, and the workload is evicted by the check and
// its pod deleted.
func TestWatchReconnectCatchesUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	prov := fakecheck.StartT(t,
		fakecheck.WithCapabilities(checksv1.Capability_CAPABILITY_WATCH_CHANGES),
		fakecheck.WithDefaultAnswer(&checksv1.EvaluateResponse{State: checksv1.State_STATE_READY, Reason: "Granted", Message: "granted by test"}))
	ns := createNamespace(ctx, t, "watch-reconnect")
	const check = "watch-reconnect"
	ac := faultCheck(check, prov.Target(), sluicev1alpha1.FailClosed)
	ac.Spec.Timeout = &metav1.Duration{Duration: 5 * time.Second}
	mustCreate(ctx, t, ac)
	t.Cleanup(func() {
		if err := k8s.Delete(context.Background(), ac); client.IgnoreNotFound(err) != nil {
			t.Errorf("deleting AdmissionCheck %s: %v", check, err)
		}
	})
	jsWaitAdmissionCheck(ctx, t, check, "active with the WatchChanges capability", func(ac *sluicev1alpha1.AdmissionCheck) bool {
		return meta.IsStatusConditionTrue(ac.Status.Conditions, sluicev1alpha1.AdmissionCheckActive) &&
			ac.Status.Provider != nil &&
			slices.ContainsFunc(ac.Status.Provider.Capabilities, func(c string) bool { return strings.Contains(strings.ToUpper(c), "WATCH") })
	})
	createQueues(ctx, t, ns, "watch-reconnect", "10", check)
	rec := recordEvents(ctx, t, ns, "watch-reconnect")
	defer rec.stop()

	pod := newPod(ns, "reconnect", "1", "10m")
	createFaultPod(ctx, t, pod)
	wl := waitWorkloadOf(ctx, t, pod, "Admitted", admitted)
	if st := checkState(wl, check); st == nil || st.State != sluicev1alpha1.CheckStateReady {
		t.Fatalf("workload %s admitted with check state %+v, want Ready", wl.Name, st)
	}
	waitPod(ctx, t, pod, "running", running)

	waitCtx, waitCancel := context.WithTimeout(ctx, time.Minute)
	defer waitCancel()
	if err := prov.WaitWatchOpens(waitCtx, 1); err != nil {
		t.Fatalf("the admitter opened no WatchChanges stream to the provider: %v", err)
	}
	opens := prov.WatchOpens()

	// The stream goes down and stays down until the admitter was refused
	// at least once; the answer changes only then.
	prov.SetWatchRefusal(codes.Unavailable)
	prov.DropWatches()
	if err := prov.WaitWatchRefusals(waitCtx, 1); err != nil {
		t.Fatalf("the admitter did not try to open the stream again: %v", err)
	}
	prov.SetDefaultAnswer(&checksv1.EvaluateResponse{State: checksv1.State_STATE_RETRY, Reason: "BudgetCut",
		Message: "the team's budget was cut", RetryAfter: durationpb.New(time.Hour)})
	if n := prov.OpenWatches(); n != 0 {
		t.Fatalf("%d WatchChanges streams open while the provider refuses them", n)
	}
	if cur := getWorkload(ctx, t, ns, wl.Name); !admitted(cur) {
		t.Fatalf("the admission changed while no stream could tell the admitter: %s", describe(cur))
	}

	// Accept streams again; no Push is ever made.
	prov.SetWatchRefusal(codes.OK)
	waitGone(ctx, t, pod)
	waitEvictedBy(ctx, t, rec, wl.Name, check, "BudgetCut")
	for _, c := range rec.conditionsSeen(wl.Name, sluicev1alpha1.WorkloadEvicted) {
		t.Logf("Evicted condition: %s %s %q", c.Status, c.Reason, c.Message)
	}
	if got := prov.WatchOpens(); got <= opens {
		t.Errorf("WatchChanges streams opened: %d, want more than the %d before the drop", got, opens)
	}
	t.Logf("WatchChanges streams: %d opened before the drop, %d in all; %d refused", opens, prov.WatchOpens(), prov.WatchRefusals())
}
