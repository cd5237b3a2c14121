package lifecycle

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/services/admitter/internal/workload"
)

// TestWindowVerdict: a group holding quota and reported without pods
// opens a window unless one is open; the window is open until its
// condition's transition time plus the window, and a zero window gives the
// quota back at once.
func TestWindowVerdict(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 600_000_000, time.UTC)
	const window = 30 * time.Second
	cond := func(status metav1.ConditionStatus, reason string, since time.Duration) []metav1.Condition {
		return []metav1.Condition{{Type: v1alpha1.WorkloadWaitingForReplacementPods, Status: status, Reason: reason,
			LastTransitionTime: metav1.NewTime(now.Add(-since).Truncate(time.Second))}}
	}
	tests := []struct {
		name    string
		conds   []metav1.Condition
		window  time.Duration
		want    verdict
		wantEnd time.Time
	}{
		{"no condition opens a window from now, in whole seconds", nil, window, windowOpens, now.Truncate(time.Second).Add(window)},
		{"pods missing opens a new window", cond(metav1.ConditionTrue, v1alpha1.ReasonPodsMissing, time.Hour), window, windowOpens,
			now.Truncate(time.Second).Add(window)},
		{"all pods back before opens a new window", cond(metav1.ConditionFalse, v1alpha1.ReasonAllPodsPresent, time.Hour), window, windowOpens,
			now.Truncate(time.Second).Add(window)},
		{"inside the window nothing changes", cond(metav1.ConditionTrue, v1alpha1.ReasonNoPods, 10*time.Second), window, windowOpen,
			now.Add(-10 * time.Second).Truncate(time.Second).Add(window)},
		{"once it passed the quota goes", cond(metav1.ConditionTrue, v1alpha1.ReasonNoPods, 31*time.Second), window, windowPassed,
			now.Add(-31 * time.Second).Truncate(time.Second).Add(window)},
		{"a window shortened on the queue applies to an open one", cond(metav1.ConditionTrue, v1alpha1.ReasonNoPods, 10*time.Second), 5 * time.Second,
			windowPassed, now.Add(-10 * time.Second).Truncate(time.Second).Add(5 * time.Second)},
		{"a zero window gives the quota back at once", nil, 0, windowPassed, now},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wl := &v1alpha1.Workload{Status: v1alpha1.WorkloadStatus{Conditions: tt.conds}}
			got, end := windowVerdict(wl, tt.window, now)
			if got != tt.want || !end.Equal(tt.wantEnd) {
				t.Fatalf("verdict %d ending %s, want %d ending %s", got, end, tt.want, tt.wantEnd)
			}
		})
	}
}

// TestOpenWindowRestartsTheTransitionTime: the window counts from the
// condition's lastTransitionTime, so opening one over PodsMissing (True
// already, from long ago) must move it; the message says when the quota
// goes, and a report right after finds the window open, not passed.
func TestOpenWindowRestartsTheTransitionTime(t *testing.T) {
	now := time.Now()
	longAgo := metav1.NewTime(now.Add(-time.Hour).Truncate(time.Second))
	wl := &v1alpha1.Workload{
		Spec: v1alpha1.WorkloadSpec{PodSets: []v1alpha1.PodSet{{Name: "a", Count: 2}, {Name: "b", Count: 1}}},
		Status: v1alpha1.WorkloadStatus{Conditions: []metav1.Condition{{Type: v1alpha1.WorkloadWaitingForReplacementPods,
			Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonPodsMissing, LastTransitionTime: longAgo}}},
	}
	v, end := windowVerdict(wl, 30*time.Second, now)
	if v != windowOpens {
		t.Fatalf("verdict %d, want the window to open", v)
	}
	openWindow(wl, "cq", end.Add(-30*time.Second), end)
	c := workload.Condition(wl, v1alpha1.WorkloadWaitingForReplacementPods)
	if c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonNoPods || !c.LastTransitionTime.Time.Equal(now.Truncate(time.Second)) {
		t.Fatalf("condition %+v, want True, NoPods, since %s", c, now.Truncate(time.Second))
	}
	for _, part := range []string{"3 pods", end.UTC().Format(time.RFC3339), "ClusterQueue cq"} {
		if !strings.Contains(c.Message, part) {
			t.Errorf("message %q does not say %q", c.Message, part)
		}
	}
	if again, againEnd := windowVerdict(wl, 30*time.Second, now.Add(time.Second)); again != windowOpen || !againEnd.Equal(end) {
		t.Fatalf("a report a second later: verdict %d ending %s, want the same window open until %s", again, againEnd, end)
	}
	if after, _ := windowVerdict(wl, 30*time.Second, end); after != windowPassed {
		t.Fatalf("a report at the window's end: verdict %d, want it passed", after)
	}
}
