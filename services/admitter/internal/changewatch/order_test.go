package changewatch

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

func TestReaskOrderAdmittedFirst(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	wl := func(name string, admittedAt, reservedAt time.Duration) *v1alpha1.Workload {
		w := &v1alpha1.Workload{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
		w.Status.Admission = &v1alpha1.Admission{ReservationID: "r-" + name}
		w.Status.Conditions = []metav1.Condition{{Type: v1alpha1.WorkloadQuotaReserved, Status: metav1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0.Add(reservedAt))}}
		if admittedAt > 0 {
			w.Status.Conditions = append(w.Status.Conditions, metav1.Condition{Type: v1alpha1.WorkloadAdmitted, Status: metav1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0.Add(admittedAt))})
		}
		return w
	}
	in := []*v1alpha1.Workload{
		wl("waiting-new", 0, 5*time.Minute),
		wl("admitted-late", 4*time.Minute, 3*time.Minute),
		wl("waiting-old", 0, time.Minute),
		wl("admitted-early", 2*time.Minute, time.Minute),
	}
	var got []string
	for _, w := range ReaskOrder(in) {
		got = append(got, w.Name)
	}
	if want := []string{"admitted-early", "admitted-late", "waiting-old", "waiting-new"}; !slices.Equal(got, want) {
		t.Errorf("ReaskOrder = %v, want %v", got, want)
	}
	if in[0].Name != "waiting-new" {
		t.Error("ReaskOrder reordered its input")
	}
}
