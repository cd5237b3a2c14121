package crash

import (
	"context"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/test/fakecheck"
)

// TestCrashReleaseHandOver kills the admitter between the two writes that
// let a deleted Workload stop waiting for a provider that is down: the
// Release written to the AdmissionCheck's status.owedReleases, the
// Workload's finalizer not yet removed. The restarted admitter tries the
// Release once more, finds it held by the check and lets the Workload go;
// the entry is there once, and when the provider answers again it gets
// the Release and the entry goes.
func TestCrashReleaseHandOver(t *testing.T) {
	const point = "admitter/hand-over-release"
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	defer cancel()

	// Scenario: a 1-cpu queue whose check holds the pod at Pending; the
	// provider goes down and the user deletes the reserved Workload.
	ns := createNamespace(ctx, t, "owed")
	prov := fakecheck.StartT(t)
	check := ns + "-check"
	createCheck(ctx, t, check, prov.Target())
	t.Cleanup(func() {
		ac := &sluicev1alpha1.AdmissionCheck{ObjectMeta: metav1.ObjectMeta{Name: check}}
		if err := k8s.Delete(context.Background(), ac); client.IgnoreNotFound(err) != nil {
			t.Errorf("deleting AdmissionCheck %s: %v", check, err)
		}
	})
	createQueues(ctx, t, ns, userQueue, ns, "1", check)
	pod := newPod(ns, "doomed", userQueue, "1", "2s")
	mustCreate(ctx, t, pod)
	wl := workloadOf(ctx, t, pod, "reserved", condIs(sluicev1alpha1.WorkloadQuotaReserved, metav1.ConditionTrue, ""))
	if err := prov.WaitEvaluated(ctx, ns, wl.Name, 1); err != nil {
		t.Fatalf("the check was never asked: %v", err)
	}
	key := evaluationKey(t, prov, wl)

	c := arm(ctx, t, point)
	prov.Down()
	if err := k8s.Delete(ctx, wl); err != nil {
		t.Fatalf("deleting workload %s: %v", wl.Name, err)
	}
	c.waitHit(ctx, t)

	// End state: the Workload gone with its quota, its Release held once
	// by the check.
	waitGone(ctx, t, pod)
	waitGone(ctx, t, wl)
	waitReserved(ctx, t, ns, "0")
	var ac sluicev1alpha1.AdmissionCheck
	if err := k8s.Get(ctx, client.ObjectKey{Name: check}, &ac); err != nil {
		t.Fatal(err)
	}
	// The deleted pod's finish and the Workload's deletion race to end
	// the reservation: the Release is owed as Finished or as Deleted.
	n := 0
	var reason sluicev1alpha1.ReleaseReason
	for _, o := range ac.Status.OwedReleases {
		if o.UID == wl.UID {
			n++
			reason = o.Reason
			if o.Namespace != ns || o.Name != wl.Name || o.ReservationID != wl.Status.Admission.ReservationID ||
				(o.Reason != sluicev1alpha1.ReleaseDeleted && o.Reason != sluicev1alpha1.ReleaseFinished) {
				t.Errorf("owed entry %+v, want %s/%s reservation %s reason Deleted or Finished", o, ns, wl.Name, wl.Status.Admission.ReservationID)
			}
		}
	}
	if n != 1 || len(ac.Status.OwedReleases) != 1 {
		t.Fatalf("owedReleases = %+v, want the deleted Workload's Release once", ac.Status.OwedReleases)
	}
	if len(prov.Releases()) != 0 {
		t.Fatalf("the provider is down but recorded Releases %v", prov.Releases())
	}

	// The provider answers again: it gets the Release, the entry goes.
	if err := prov.Up(); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, waitLimit)
	defer wcancel()
	if err := prov.WaitReleased(wctx, key); err != nil {
		t.Fatalf("the provider never got the Release owed: %v", err)
	}
	waitFor(ctx, t, "the check's owedReleases emptied", func() error {
		var cur sluicev1alpha1.AdmissionCheck
		if err := k8s.Get(ctx, client.ObjectKey{Name: check}, &cur); err != nil {
			return err
		}
		if len(cur.Status.OwedReleases) != 0 {
			return fmt.Errorf("owedReleases %+v", cur.Status.OwedReleases)
		}
		return nil
	})
	want := map[sluicev1alpha1.ReleaseReason]checksv1.ReleaseReason{
		sluicev1alpha1.ReleaseDeleted:  checksv1.ReleaseReason_RELEASE_REASON_DELETED,
		sluicev1alpha1.ReleaseFinished: checksv1.ReleaseReason_RELEASE_REASON_FINISHED,
	}[reason]
	if r := prov.Releases()[0]; r.GetReason() != want || r.GetUid() != string(wl.UID) {
		t.Errorf("Release = %v, want reason %s for uid %s", r, want, wl.UID)
	}
}
