package releases

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

func TestOweAddsOneReleasePerCheckOnce(t *testing.T) {
	wl := &v1alpha1.Workload{Status: v1alpha1.WorkloadStatus{
		Admission:       &v1alpha1.Admission{ReservationID: "r2"},
		AdmissionChecks: []v1alpha1.AdmissionCheckState{{Name: "a"}, {Name: "b"}},
		PendingReleases: []v1alpha1.PendingRelease{{Name: "a", ReservationID: "r1", Reason: v1alpha1.ReleaseEvicted}},
	}}
	Owe(wl, v1alpha1.ReleaseFinished)
	Owe(wl, v1alpha1.ReleaseFinished)
	got := fmt.Sprint(wl.Status.PendingReleases)
	want := fmt.Sprint([]v1alpha1.PendingRelease{
		{Name: "a", ReservationID: "r1", Reason: v1alpha1.ReleaseEvicted},
		{Name: "a", ReservationID: "r2", Reason: v1alpha1.ReleaseFinished},
		{Name: "b", ReservationID: "r2", Reason: v1alpha1.ReleaseFinished},
	})
	if got != want {
		t.Fatalf("pendingReleases = %s, want %s", got, want)
	}
	noReservation := &v1alpha1.Workload{Status: v1alpha1.WorkloadStatus{AdmissionChecks: []v1alpha1.AdmissionCheckState{{Name: "a"}}}}
	Owe(noReservation, v1alpha1.ReleaseEvicted)
	if len(noReservation.Status.PendingReleases) != 0 {
		t.Fatalf("a workload without a reservation owes %v, want nothing", noReservation.Status.PendingReleases)
	}
}

func TestReleasesPruneOnlyAcknowledged(t *testing.T) {
	wl := &v1alpha1.Workload{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w", UID: "u"}, Status: v1alpha1.WorkloadStatus{
		PendingReleases: []v1alpha1.PendingRelease{
			{Name: "a", ReservationID: "r1", Reason: v1alpha1.ReleaseEvicted},
			{Name: "b", ReservationID: "r1", Reason: v1alpha1.ReleaseEvicted},
		},
	}}
	r := New(Config{})
	defer r.q.ShutDown()
	if !r.Outstanding(wl) {
		t.Fatal("nothing acknowledged yet, want outstanding")
	}
	items := []item{itemOf(wl, wl.Status.PendingReleases[0]), itemOf(wl, wl.Status.PendingReleases[1])}
	r.ack(items[0])
	status := wl.Status.DeepCopy()
	r.Prune(status, wl)
	if len(status.PendingReleases) != 1 || status.PendingReleases[0].Name != "b" {
		t.Fatalf("after acknowledging a: %v, want only b", status.PendingReleases)
	}
	r.ack(items[1])
	if r.Outstanding(wl) {
		t.Fatal("both acknowledged, want none outstanding")
	}
	r.Forget(types.NamespacedName{Namespace: "ns", Name: "w"})
	if !r.Outstanding(wl) {
		t.Fatal("after forget the acknowledgements are gone, want outstanding again")
	}
}
