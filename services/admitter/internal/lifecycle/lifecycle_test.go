package lifecycle

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/services/admitter/internal/startup"
	"github.com/sluice-dev/sluice/services/admitter/internal/workload"
)

func TestRecordSucceededOnlyGrows(t *testing.T) {
	wl := &v1alpha1.Workload{Spec: v1alpha1.WorkloadSpec{PodSets: []v1alpha1.PodSet{{Name: "a", Count: 3}, {Name: "b", Count: 1}}}}
	recordSucceeded(wl, map[string]int32{"a": 2})
	recordSucceeded(wl, map[string]int32{"a": 1, "b": 5, "unknown": 4})
	got := map[string]int32{}
	for _, r := range wl.Status.ReclaimablePods {
		got[r.Name] = r.Count
	}
	if len(got) != 2 || got["a"] != 2 || got["b"] != 1 {
		t.Fatalf("reclaimablePods = %v, want a=2 (never lowered) b=1 (capped at count)", got)
	}
}

func TestWaitingForChecksMessage(t *testing.T) {
	wl := &v1alpha1.Workload{Status: v1alpha1.WorkloadStatus{AdmissionChecks: []v1alpha1.AdmissionCheckState{
		{Name: "budget", State: v1alpha1.CheckStatePending, Message: "over quota until 5pm"},
		{Name: "capacity", State: v1alpha1.CheckStateReady},
		{Name: "approval", State: v1alpha1.CheckStatePending},
		{Name: "vendor", State: v1alpha1.CheckStatePending, Reason: v1alpha1.ReasonTLSHandshakeFailed,
			Message: "TLS handshake with the provider failed: x509: certificate signed by unknown authority"},
	}}}
	want := "waiting for admission checks: approval (Pending: no answer yet); budget (Pending: over quota until 5pm); " +
		"vendor (Pending, TLSHandshakeFailed: TLS handshake with the provider failed: x509: certificate signed by unknown authority)"
	if got := WaitingForChecksMessage(wl); got != want {
		t.Fatalf("message = %q, want %q", got, want)
	}
}

func TestResetChecksForTheNextReservation(t *testing.T) {
	now := metav1.Now()
	tests := []struct {
		name      string
		in        v1alpha1.AdmissionCheckState
		wantRetry int32
		touched   bool
	}{
		{"pending stays as is", v1alpha1.AdmissionCheckState{Name: "c", State: v1alpha1.CheckStatePending, Message: "asking"}, 0, false},
		{"ready resets, updates dropped", v1alpha1.AdmissionCheckState{Name: "c", State: v1alpha1.CheckStateReady,
			PodSetUpdates: []v1alpha1.PodSetUpdate{{Name: "main"}}}, 0, true},
		{"retry resets and counts", v1alpha1.AdmissionCheckState{Name: "c", State: v1alpha1.CheckStateRetry, RetryCount: ptr.To[int32](2)}, 3, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wl := &v1alpha1.Workload{Status: v1alpha1.WorkloadStatus{AdmissionChecks: []v1alpha1.AdmissionCheckState{tt.in}}}
			resetChecks(wl, now)
			got := wl.Status.AdmissionChecks[0]
			if got.State != v1alpha1.CheckStatePending || len(got.PodSetUpdates) != 0 || ptr.Deref(got.RetryCount, 0) != tt.wantRetry {
				t.Fatalf("after reset: %+v, want Pending, no updates, retryCount %d", got, tt.wantRetry)
			}
			if touched := strings.HasPrefix(got.Message, "Reset to Pending"); touched != tt.touched {
				t.Fatalf("message %q: reset noted = %v, want %v", got.Message, touched, tt.touched)
			}
		})
	}
}

func TestSetRequeueCountsAndHoldsBack(t *testing.T) {
	tests := []struct {
		name  string
		after time.Duration
		held  bool
	}{
		{"at once", 0, false},
		{"after a backoff under a second", 200 * time.Millisecond, true},
		{"after a backoff of seconds and a fraction", 1500 * time.Millisecond, true},
		{"after a backoff", time.Minute, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wl := &v1alpha1.Workload{Status: v1alpha1.WorkloadStatus{RequeueState: &v1alpha1.RequeueState{
				Count: ptr.To[int32](4), RequeueAt: ptr.To(metav1.NewTime(time.Now().Add(time.Hour))),
			}}}
			before := time.Now()
			setRequeue(wl, tt.after)
			done := time.Now()
			rs := wl.Status.RequeueState
			if *rs.Count != 5 || (rs.RequeueAt != nil) != tt.held {
				t.Fatalf("requeueState = count %d, requeueAt %v; want count 5, held %v", *rs.Count, rs.RequeueAt, tt.held)
			}
			if !tt.held {
				return
			}
			// What the API server keeps: whole seconds.
			raw, err := json.Marshal(rs.RequeueAt)
			if err != nil {
				t.Fatal(err)
			}
			var stored metav1.Time
			if err := json.Unmarshal(raw, &stored); err != nil {
				t.Fatal(err)
			}
			if earliest := before.Add(tt.after); stored.Time.Before(earliest) {
				t.Fatalf("stored requeueAt %s is before the wait of %s ends (%s)", stored.Format(time.RFC3339Nano), tt.after, earliest.Format(time.RFC3339Nano))
			}
			if latest := done.Add(tt.after + time.Second); stored.Time.After(latest) {
				t.Fatalf("stored requeueAt %s holds the workload more than a second past the wait of %s", stored.Format(time.RFC3339Nano), tt.after)
			}
		})
	}
}

func TestPendingChecksKeepRetryCounts(t *testing.T) {
	then := metav1.NewTime(time.Now().Add(-time.Hour))
	orig := &v1alpha1.Workload{Status: v1alpha1.WorkloadStatus{AdmissionChecks: []v1alpha1.AdmissionCheckState{
		{Name: "a", State: v1alpha1.CheckStatePending, RetryCount: ptr.To[int32](2), LastTransitionTime: then},
		{Name: "gone", State: v1alpha1.CheckStateReady},
	}}}
	got := pendingChecks(orig, []string{"a", "b"}, metav1.Now())
	if len(got) != 2 || got[0].Name != "a" || ptr.Deref(got[0].RetryCount, 0) != 2 || !got[0].LastTransitionTime.Equal(&then) ||
		got[1].Name != "b" || got[1].RetryCount != nil || got[1].State != v1alpha1.CheckStatePending {
		t.Fatalf("pendingChecks = %+v", got)
	}
	if pendingChecks(orig, nil, metav1.Now()) != nil {
		t.Fatal("no checks, want nil")
	}
}

func TestRecordMissing(t *testing.T) {
	tests := []struct {
		name    string
		before  []metav1.Condition
		missing map[string]int32
		want    metav1.ConditionStatus // "" for no condition
		message string
	}{
		{"a group that never lost a pod: no condition", nil, map[string]int32{}, "", ""},
		{"pods missing", nil, map[string]int32{"bbbb": 2, "aaaa": 1, "cccc": 0}, metav1.ConditionTrue,
			"waiting for replacement pods: 1 of pod set aaaa, 2 of pod set bbbb"},
		{"replaced again", []metav1.Condition{{Type: v1alpha1.WorkloadWaitingForReplacementPods, Status: metav1.ConditionTrue}},
			map[string]int32{}, metav1.ConditionFalse, "every failed pod was replaced"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wl := &v1alpha1.Workload{Status: v1alpha1.WorkloadStatus{Conditions: tt.before}}
			recordMissing(wl, tt.missing)
			c := workload.Condition(wl, v1alpha1.WorkloadWaitingForReplacementPods)
			switch {
			case tt.want == "" && c != nil:
				t.Fatalf("condition %+v, want none", c)
			case tt.want != "" && (c == nil || c.Status != tt.want || c.Message != tt.message):
				t.Fatalf("condition %+v, want %s %q", c, tt.want, tt.message)
			}
		})
	}
}

func TestRecordStarted(t *testing.T) {
	admittedAt := metav1.NewTime(time.Now())
	base := func(conds ...metav1.Condition) *v1alpha1.Workload {
		return &v1alpha1.Workload{
			Spec: v1alpha1.WorkloadSpec{PodSets: []v1alpha1.PodSet{{Name: "a", Count: 2}}},
			Status: v1alpha1.WorkloadStatus{
				Admission: &v1alpha1.Admission{ClusterQueue: "cq", ReservationID: "r1"},
				Conditions: append([]metav1.Condition{{Type: v1alpha1.WorkloadAdmitted, Status: metav1.ConditionTrue,
					LastTransitionTime: admittedAt}}, conds...),
			},
		}
	}
	scheduled := startup.Policy{Timeout: time.Minute, Condition: v1alpha1.PodsScheduled}
	ready := startup.Policy{Timeout: time.Minute, Condition: v1alpha1.PodsReady}
	all := startup.Counts{Scheduled: map[string]int32{"a": 2}, Ready: map[string]int32{"a": 1}}
	tests := []struct {
		name   string
		wl     *v1alpha1.Workload
		policy startup.Policy
		want   bool
	}{
		{"every pod scheduled", base(), scheduled, true},
		{"scheduled is not ready", base(), ready, false},
		{"no deadline: no write", base(), startup.Policy{}, false},
		{"evicted: a late report changes nothing", base(metav1.Condition{Type: v1alpha1.WorkloadEvicted, Status: metav1.ConditionTrue}), scheduled, false},
	}
	for _, tt := range tests {
		w := New(Config{StartPolicy: func(string) startup.Policy { return tt.policy }})
		w.recordStarted(tt.wl, all)
		if got := meta.IsStatusConditionTrue(tt.wl.Status.Conditions, v1alpha1.WorkloadPodsReady); got != tt.want {
			t.Errorf("%s: PodsReady=True %v, want %v", tt.name, got, tt.want)
		}
	}
}
