package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/test/fakecheck"
	"github.com/sluice-dev/sluice/test/harness"
)

// TestNamespaceDeletionWithProviderDown: a team's namespace is deleted
// while the provider of its admission check, which needs Release, is
// down. The deletion completes once the admitter's --release-wait (short
// in this suite) is over; the Release is kept in the AdmissionCheck's
// status.owedReleases, and when the provider comes back it receives the
// Release and the entry goes.
func TestNamespaceDeletionWithProviderDown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	prov := fakecheck.StartT(t,
		fakecheck.WithCapabilities(checksv1.Capability_CAPABILITY_RELEASE),
		fakecheck.WithDefaultAnswer(&checksv1.EvaluateResponse{State: checksv1.State_STATE_READY, Reason: "Granted", Message: "granted by test"}))
	ns := createNamespace(ctx, t, "owed-release")
	const check = "owed-release"
	mustCreate(ctx, t, faultCheck(check, prov.Target(), sluicev1alpha1.FailClosed))
	t.Cleanup(func() {
		ac := &sluicev1alpha1.AdmissionCheck{}
		ac.Name = check
		if err := k8s.Delete(context.Background(), ac); client.IgnoreNotFound(err) != nil {
			t.Errorf("deleting AdmissionCheck %s: %v", check, err)
		}
	})
	jsWaitAdmissionCheck(ctx, t, check, "active with the Release capability", func(ac *sluicev1alpha1.AdmissionCheck) bool {
		return meta.IsStatusConditionTrue(ac.Status.Conditions, sluicev1alpha1.AdmissionCheckActive) && ac.Status.Provider != nil &&
			slices.Contains(ac.Status.Provider.Capabilities, checksv1.Capability_CAPABILITY_RELEASE.String())
	})
	createQueues(ctx, t, ns, "owed-release", "10", check)
	pod := newPod(ns, "owed", "1", "10m")
	mustCreate(ctx, t, pod)
	wl := waitWorkloadOf(ctx, t, pod, "Admitted", admitted)
	waitPod(ctx, t, pod, "running", running)
	key := string(wl.UID) + "/" + wl.Status.Admission.ReservationID + "/" + check
	handoversBefore, err := sluice.Admitter.Counter(ctx, "sluice_admitter_release_wait_handovers_total", map[string]string{"check": check})
	if err != nil {
		t.Fatal(err)
	}

	// The provider goes down; the team's namespace is deleted, as an
	// admin does, and the deletion must complete.
	prov.Down()
	delCtx, delCancel := context.WithTimeout(ctx, 150*time.Second)
	defer delCancel()
	out, err := exec.CommandContext(delCtx, env.Kubectl(), "--kubeconfig", env.Kubeconfig,
		"delete", "namespace", ns, "--wait=true", "--timeout=2m").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl delete namespace %s: %v\n%s\nworkload: %s", ns, err, out, describe(currentWorkload(ctx, ns, wl.Name)))
	}
	if got := prov.Releases(); len(got) != 0 {
		t.Fatalf("the provider is down but recorded %d Releases", len(got))
	}
	ac := jsWaitAdmissionCheck(ctx, t, check, "holding the Release owed", func(ac *sluicev1alpha1.AdmissionCheck) bool {
		return len(ac.Status.OwedReleases) == 1
	})
	// The pod's deletion ends a single pod's workload as its finish
	// (reason Finished) unless the Workload's own deletion came first.
	owed := ac.Status.OwedReleases[0]
	if owed.Namespace != ns || owed.Name != wl.Name || owed.UID != wl.UID || owed.ReservationID != wl.Status.Admission.ReservationID ||
		(owed.Reason != sluicev1alpha1.ReleaseFinished && owed.Reason != sluicev1alpha1.ReleaseDeleted) {
		t.Fatalf("owedReleases = %+v, want the Release of %s/%s (uid %s, reservation %s), reason Finished or Deleted",
			ac.Status.OwedReleases, ns, wl.Name, wl.UID, wl.Status.Admission.ReservationID)
	}
	if n, err := sluice.Admitter.Counter(ctx, "sluice_admitter_release_wait_handovers_total", map[string]string{"check": check}); err != nil || n != handoversBefore+1 {
		t.Fatalf("release_wait_handovers_total{check=%s} = %v (%v), want %v", check, n, err, handoversBefore+1)
	}

	// The provider is back: it receives the Release, and the entry goes.
	if err := prov.Up(); err != nil {
		t.Fatal(err)
	}
	waitCtx, waitCancel := context.WithTimeout(ctx, time.Minute)
	defer waitCancel()
	if err := prov.WaitReleased(waitCtx, key); err != nil {
		t.Fatalf("the provider never received the Release owed: %v", err)
	}
	wantReason := map[sluicev1alpha1.ReleaseReason]checksv1.ReleaseReason{
		sluicev1alpha1.ReleaseFinished: checksv1.ReleaseReason_RELEASE_REASON_FINISHED,
		sluicev1alpha1.ReleaseDeleted:  checksv1.ReleaseReason_RELEASE_REASON_DELETED,
	}[owed.Reason]
	if r := prov.Releases()[0]; r.GetReason() != wantReason || r.GetNamespace() != ns || r.GetName() != wl.Name || r.GetUid() != string(wl.UID) {
		t.Fatalf("Release = %v, want reason %s for %s/%s (uid %s)", r, wantReason, ns, wl.Name, wl.UID)
	}
	jsWaitAdmissionCheck(ctx, t, check, "with its owedReleases emptied", func(ac *sluicev1alpha1.AdmissionCheck) bool {
		return len(ac.Status.OwedReleases) == 0
	})
	err = harness.Poll(waitCtx, func() error {
		text, err := sluice.Admitter.Metrics(waitCtx)
		if err != nil {
			return err
		}
		if want := fmt.Sprintf("sluice_admitter_owed_releases{check=%q} 0", check); !containsLine(text, want) {
			return fmt.Errorf("metrics lack %q", want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func currentWorkload(ctx context.Context, ns, name string) *sluicev1alpha1.Workload {
	var wl sluicev1alpha1.Workload
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &wl); err != nil {
		return nil
	}
	return &wl
}

func containsLine(text, line string) bool {
	return slices.Contains(strings.Split(text, "\n"), line)
}
