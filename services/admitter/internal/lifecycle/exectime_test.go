package lifecycle

import (
	"math"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/services/admitter/internal/workload"
)

// running is a workload admitted at since, with a maximum execution time
// of limit seconds (nil: none) and past seconds accumulated before.
func running(limit, past *int32, since time.Time, conds ...metav1.Condition) *v1alpha1.Workload {
	return &v1alpha1.Workload{
		Spec: v1alpha1.WorkloadSpec{MaximumExecutionTimeSeconds: limit},
		Status: v1alpha1.WorkloadStatus{
			Admission:                           &v1alpha1.Admission{ClusterQueue: "cq", ReservationID: "r1"},
			AccumulatedPastExecutionTimeSeconds: past,
			Conditions: append([]metav1.Condition{{Type: v1alpha1.WorkloadAdmitted, Status: metav1.ConditionTrue,
				Reason: v1alpha1.ReasonAdmitted, LastTransitionTime: metav1.NewTime(since)}}, conds...),
		},
	}
}

func TestRemainingExecutionTime(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	trueCond := func(typ string) metav1.Condition { return metav1.Condition{Type: typ, Status: metav1.ConditionTrue} }
	tests := []struct {
		name   string
		wl     *v1alpha1.Workload
		want   time.Duration
		wantOK bool
	}{
		{"no maximum: nothing to keep", running(nil, nil, ago(time.Hour)), 0, false},
		{"fresh admission", running(ptr.To[int32](60), nil, ago(10*time.Second)), 50 * time.Second, true},
		{"past admissions count", running(ptr.To[int32](60), ptr.To[int32](45), ago(10*time.Second)), 5 * time.Second, true},
		{"ran out", running(ptr.To[int32](60), ptr.To[int32](45), ago(20*time.Second)), -5 * time.Second, true},
		{"spent before this admission", running(ptr.To[int32](60), ptr.To[int32](90), now), -30 * time.Second, true},
		{"evicted: the clock stopped", running(ptr.To[int32](60), nil, ago(time.Hour), trueCond(v1alpha1.WorkloadEvicted)), 0, false},
		{"finished", running(ptr.To[int32](60), nil, ago(time.Hour), trueCond(v1alpha1.WorkloadFinished)), 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := RemainingExecutionTime(tt.wl, now)
			if got != tt.want || ok != tt.wantOK {
				t.Fatalf("remaining = %s, %v; want %s, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}

	t.Run("not admitted", func(t *testing.T) {
		wl := running(ptr.To[int32](60), nil, ago(time.Hour))
		wl.Status.Conditions[0].Status = metav1.ConditionFalse
		if _, ok := RemainingExecutionTime(wl, now); ok {
			t.Fatal("a maximum in force for a workload that is not admitted")
		}
	})
	t.Run("being deleted", func(t *testing.T) {
		wl := running(ptr.To[int32](60), nil, ago(time.Hour))
		wl.DeletionTimestamp = ptr.To(metav1.NewTime(now))
		if _, ok := RemainingExecutionTime(wl, now); ok {
			t.Fatal("a maximum in force for a workload being deleted")
		}
	})
	t.Run("inactive: still in force", func(t *testing.T) {
		wl := running(ptr.To[int32](60), nil, ago(time.Minute))
		wl.Spec.Active = ptr.To(false)
		if got, ok := RemainingExecutionTime(wl, now); !ok || got != 0 {
			t.Fatalf("remaining = %s, %v; want 0s in force: the deactivation may await its eviction", got, ok)
		}
	})
}

func TestSetNotAdmittedAccumulates(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name     string
		limit    *int32
		past     *int32
		admitted metav1.ConditionStatus
		since    time.Duration // how long before now the condition turned
		want     *int32
	}{
		{"first run", ptr.To[int32](60), nil, metav1.ConditionTrue, 30 * time.Second, ptr.To[int32](30)},
		{"added to past runs", ptr.To[int32](60), ptr.To[int32](10), metav1.ConditionTrue, 30 * time.Second, ptr.To[int32](40)},
		{"a part of a second does not count", ptr.To[int32](60), nil, metav1.ConditionTrue, 1900 * time.Millisecond, ptr.To[int32](1)},
		{"already False: nothing ran", ptr.To[int32](60), ptr.To[int32](10), metav1.ConditionFalse, time.Hour, ptr.To[int32](10)},
		{"no maximum: no account kept", nil, nil, metav1.ConditionTrue, time.Hour, nil},
		{"a clock that went back adds nothing", ptr.To[int32](60), ptr.To[int32](10), metav1.ConditionTrue, -time.Minute, ptr.To[int32](10)},
		{"kept within int32", ptr.To[int32](60), ptr.To[int32](math.MaxInt32 - 5), metav1.ConditionTrue, time.Hour, ptr.To[int32](math.MaxInt32)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wl := running(tt.limit, tt.past, now.Add(-tt.since))
			wl.Status.Conditions[0].Status = tt.admitted
			SetNotAdmitted(wl, v1alpha1.ReasonInactive, "deactivated", now)

			if got := wl.Status.AccumulatedPastExecutionTimeSeconds; !ptr.Equal(got, tt.want) {
				t.Fatalf("accumulated = %v, want %v", ptr.Deref(got, -1), ptr.Deref(tt.want, -1))
			}
			c := workload.Condition(wl, v1alpha1.WorkloadAdmitted)
			if c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonInactive || c.Message != "deactivated" {
				t.Fatalf("Admitted = %+v, want False, Inactive", c)
			}
			if tt.admitted == metav1.ConditionTrue && !c.LastTransitionTime.Time.Equal(now) {
				t.Fatalf("Admitted turned False at %s, want %s", c.LastTransitionTime, now)
			}
		})
	}
}

// The budget carries over: what one admission accumulated is what the
// next one has less of.
func TestExecutionBudgetCarriesOver(t *testing.T) {
	start := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	wl := running(ptr.To[int32](60), nil, start)
	evictedAt := start.Add(25 * time.Second)
	SetNotAdmitted(wl, v1alpha1.ReasonClusterQueueStopped, "drained", evictedAt)

	readmitted := evictedAt.Add(time.Hour)
	wl.Status.Conditions[0].Status = metav1.ConditionTrue
	wl.Status.Conditions[0].LastTransitionTime = metav1.NewTime(readmitted)
	at, ok := ExecutionDeadline(wl)
	if want := readmitted.Add(35 * time.Second); !ok || !at.Equal(want) {
		t.Fatalf("deadline = %s, %v; want %s (60s less the 25s of the first admission)", at, ok, want)
	}
}

func TestExecutionEviction(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	group := func(wl *v1alpha1.Workload) *v1alpha1.Workload {
		wl.Labels = map[string]string{v1alpha1.PodGroupLabel: "g"}
		return wl
	}
	tests := []struct {
		name    string
		wl      *v1alpha1.Workload
		due     bool
		message []string
	}{
		{"time left", running(ptr.To[int32](60), nil, now.Add(-59*time.Second)), false, nil},
		{"no maximum", running(nil, nil, now.Add(-time.Hour)), false, nil},
		{"a single pod goes for good", running(ptr.To[int32](60), ptr.To[int32](20), now.Add(-41*time.Second)), true, []string{
			"ran admitted for 1m1s", "maximum execution time of 60s", "kueue.x-k8s.io/max-exec-time-seconds", "deactivated",
			"the pod is deleted and does not run again"}},
		{"a group may run again", group(running(ptr.To[int32](60), nil, now.Add(-60*time.Second))), true, []string{
			"ran admitted for 1m0s", "deactivated", "the group's pods are deleted", "set spec.active to true"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev, due := executionEviction(tt.wl, now)
			if due != tt.due {
				t.Fatalf("due = %v, want %v", due, tt.due)
			}
			if !due {
				return
			}
			if ev.Reason != v1alpha1.ReasonMaximumExecutionTimeExceeded || !ev.deactivate || !ev.resetExecutionTime || ev.RequeueAfter != 0 {
				t.Fatalf("eviction %+v: want reason %s, a deactivation, the account reset", ev, v1alpha1.ReasonMaximumExecutionTimeExceeded)
			}
			for _, part := range tt.message {
				if !strings.Contains(ev.Message, part) {
					t.Errorf("message %q lacks %q", ev.Message, part)
				}
			}
		})
	}
}

// An inactive workload whose time ran out was deactivated for it, even
// when the eviction is left to whoever evicts inactive workloads.
func TestInactiveCause(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	inactive := Eviction{Reason: v1alpha1.ReasonInactive, Message: "the workload was deactivated"}
	tests := []struct {
		name string
		wl   *v1alpha1.Workload
		want string
	}{
		{"out of time", running(ptr.To[int32](5), nil, now.Add(-time.Minute)), v1alpha1.ReasonMaximumExecutionTimeExceeded},
		{"time left: deactivated by someone", running(ptr.To[int32](3600), nil, now.Add(-time.Minute)), v1alpha1.ReasonInactive},
		{"no maximum", running(nil, nil, now.Add(-time.Minute)), v1alpha1.ReasonInactive},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.wl.Spec.Active = ptr.To(false)
			if got := inactiveCause(tt.wl, inactive, now); got.Reason != tt.want {
				t.Fatalf("reason = %s, want %s", got.Reason, tt.want)
			}
		})
	}
}
