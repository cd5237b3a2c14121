package controller

import (
	"slices"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/services/admitter/internal/changewatch"
	"github.com/sluice-dev/sluice/services/admitter/internal/workload"
)

// recheckAll asks again every evaluation the admitter holds with the
// named checks: each check of every workload with a reservation, admitted
// or in the check phase. A WatchChanges stream serving them just opened,
// so a change the provider made while no stream was open (or before this
// admitter led) is found now.
func (a *Admitter) recheckAll(checks []string) {
	for _, wl := range changewatch.ReaskOrder(a.store.List()) {
		if !holdsEvaluations(wl) {
			continue
		}
		var due []string
		for _, st := range wl.Status.AdmissionChecks {
			if slices.Contains(checks, st.Name) {
				due = append(due, st.Name)
			}
		}
		if len(due) > 0 {
			a.phase.Recheck(workload.Key(wl), due...)
		}
	}
}

// recheckKey asks again the evaluation a provider pushed, and reports
// whether the admitter holds it: the workload of that uid, its current
// reservation, and a check it has. Anything else is an evaluation that is
// gone (the workload deleted, finished or evicted since) and is ignored.
func (a *Admitter) recheckKey(k changewatch.Key) bool {
	wl := a.store.GetByUID(k.UID)
	if wl == nil || !holdsEvaluations(wl) || workload.ReservationID(wl) != k.ReservationID || workload.CheckState(wl, k.Check) == nil {
		return false
	}
	a.phase.Recheck(workload.Key(wl), k.Check)
	return true
}

// holdsEvaluations reports whether wl's checks' answers still matter: it
// holds a reservation that is neither being evicted nor ending.
func holdsEvaluations(wl *v1alpha1.Workload) bool {
	return workload.HasReservation(wl) && !workload.IsEvicting(wl) && !workload.IsFinished(wl) && !workload.IsDeleting(wl)
}
