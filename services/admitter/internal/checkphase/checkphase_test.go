package checkphase

import (
	"testing"
	"time"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/services/admitter/internal/checks"
)

func TestTruncateKeepsUTF8(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"abcdef", 3, "abc"},
		{"aé", 2, "a"},  // é is two bytes: never cut in half
		{"日本", 4, "日"},  // three-byte characters
		{"日本", 2, ""},   // no whole character fits
		{"a😀b", 4, "a"}, // four-byte character
		{"a😀b", 5, "a😀"},
	}
	for _, tc := range tests {
		got := truncate(tc.in, tc.n)
		if got != tc.want || !utf8.ValidString(got) {
			t.Errorf("truncate(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

func TestNextAsk(t *testing.T) {
	ac := &v1alpha1.AdmissionCheck{Spec: v1alpha1.AdmissionCheckSpec{Retry: &v1alpha1.RetryPolicy{
		InitialBackoff: &metav1.Duration{Duration: time.Second}, MaxBackoff: &metav1.Duration{Duration: time.Minute},
	}}}
	tests := []struct {
		name    string
		ac      *v1alpha1.AdmissionCheck
		ans     checks.Answer
		attempt int
		want    time.Duration
	}{
		{"provider's retry_after", ac, checks.Answer{State: v1alpha1.CheckStatePending, RetryAfter: 7 * time.Second}, 3, 7 * time.Second},
		{"backoff without retry_after", ac, checks.Answer{State: v1alpha1.CheckStatePending}, 3, 8 * time.Second},
		{"no answer backs off", ac, checks.Answer{NoAnswer: true, RetryAfter: time.Hour}, 1, 2 * time.Second},
		{"final failure waits longest", ac, checks.Answer{NoAnswer: true, Final: true}, 0, time.Minute},
		{"missing check", nil, checks.Answer{}, 0, checks.DefaultInitialBackoff},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := nextAsk(tt.ac, tt.ans, tt.attempt); got != tt.want {
				t.Fatalf("nextAsk = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestApplyAnswer(t *testing.T) {
	then := metav1.NewTime(time.Now().Add(-time.Hour))
	now := metav1.Now()
	updates := []v1alpha1.PodSetUpdate{{Name: "main", Labels: map[string]string{"a": "b"}}}
	tests := []struct {
		name        string
		ans         checks.Answer
		moved       bool
		wantUpdates int
		wantRequeue *int32
	}{
		{"same state keeps the transition time", checks.Answer{State: v1alpha1.CheckStatePending}, false, 0, nil},
		{"ready keeps its updates", checks.Answer{State: v1alpha1.CheckStateReady, Updates: updates}, true, 1, nil},
		{"retry records its wait", checks.Answer{State: v1alpha1.CheckStateRetry, RetryAfter: 90 * time.Second, Updates: updates}, true, 0, ptr.To[int32](90)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := v1alpha1.AdmissionCheckState{Name: "c", State: v1alpha1.CheckStatePending, LastTransitionTime: then}
			applyAnswer(&st, tt.ans, now)
			if moved := !st.LastTransitionTime.Equal(&then); moved != tt.moved {
				t.Fatalf("transition time moved = %v, want %v", moved, tt.moved)
			}
			if len(st.PodSetUpdates) != tt.wantUpdates || ptr.Deref(st.RequeueAfterSeconds, -1) != ptr.Deref(tt.wantRequeue, -1) {
				t.Fatalf("state = %+v", st)
			}
		})
	}
}

func TestJudgeAnswersAfterAdmission(t *testing.T) {
	updates := func(pool string) []v1alpha1.PodSetUpdate {
		return []v1alpha1.PodSetUpdate{{Name: "main", Labels: map[string]string{"pool": pool}}}
	}
	ac := &v1alpha1.AdmissionCheck{Spec: v1alpha1.AdmissionCheckSpec{Retry: &v1alpha1.RetryPolicy{
		InitialBackoff: &metav1.Duration{Duration: time.Second}, MaxBackoff: &metav1.Duration{Duration: time.Minute},
	}}}
	tests := []struct {
		name        string
		ans         checks.Answer
		wantState   v1alpha1.CheckState
		revoked     bool
		rejected    bool
		retryAfter  time.Duration
		noAnswer    bool
		updatesDiff bool
	}{
		{name: "ready again", ans: checks.Answer{State: v1alpha1.CheckStateReady, Updates: updates("a")}, wantState: v1alpha1.CheckStateReady},
		{name: "ready with other updates is ignored", ans: checks.Answer{State: v1alpha1.CheckStateReady, Updates: updates("b")},
			wantState: v1alpha1.CheckStateReady, updatesDiff: true},
		{name: "pending revokes", ans: checks.Answer{State: v1alpha1.CheckStatePending, Reason: "Reclaimed"},
			wantState: v1alpha1.CheckStatePending, revoked: true},
		{name: "retry waits its retry_after", ans: checks.Answer{State: v1alpha1.CheckStateRetry, RetryAfter: time.Hour},
			wantState: v1alpha1.CheckStateRetry, revoked: true, retryAfter: time.Hour},
		{name: "retry without retry_after backs off by the retry count", ans: checks.Answer{State: v1alpha1.CheckStateRetry},
			wantState: v1alpha1.CheckStateRetry, revoked: true, retryAfter: 4 * time.Second},
		{name: "rejected", ans: checks.Answer{State: v1alpha1.CheckStateRejected},
			wantState: v1alpha1.CheckStateRejected, revoked: true, rejected: true},
		{name: "no answer is no no", ans: checks.Answer{State: v1alpha1.CheckStatePending, NoAnswer: true},
			wantState: v1alpha1.CheckStateReady, noAnswer: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wl := &v1alpha1.Workload{Status: v1alpha1.WorkloadStatus{AdmissionChecks: []v1alpha1.AdmissionCheckState{
				{Name: "c", State: v1alpha1.CheckStateReady, PodSetUpdates: updates("a"), RetryCount: ptr.To[int32](2)},
				{Name: "other", State: v1alpha1.CheckStateReady},
			}}}
			v, noAnswer := judge(wl, []string{"c"}, map[string]checks.Answer{"c": tt.ans},
				map[string]*v1alpha1.AdmissionCheck{"c": ac}, metav1.Now())
			st := wl.Status.AdmissionChecks[0]
			if st.State != tt.wantState {
				t.Errorf("state = %s, want %s", st.State, tt.wantState)
			}
			if got := len(v.revoked) == 1; got != tt.revoked {
				t.Errorf("revoked = %v, want %v", v.revoked, tt.revoked)
			}
			if got := len(v.rejected) == 1; got != tt.rejected {
				t.Errorf("rejected = %v, want %v", v.rejected, tt.rejected)
			}
			if v.retryAfter != tt.retryAfter {
				t.Errorf("retryAfter = %s, want %s", v.retryAfter, tt.retryAfter)
			}
			if got := len(noAnswer) == 1; got != tt.noAnswer {
				t.Errorf("noAnswer = %v, want %v", noAnswer, tt.noAnswer)
			}
			if got := len(v.updatesChanged) == 1; got != tt.updatesDiff {
				t.Errorf("updatesChanged = %v, want %v", v.updatesChanged, tt.updatesDiff)
			}
			if !tt.revoked && len(st.PodSetUpdates) != 1 {
				t.Errorf("pod set updates = %+v; a check that did not revoke keeps the admission's", st.PodSetUpdates)
			}
			if wl.Status.AdmissionChecks[1].State != v1alpha1.CheckStateReady {
				t.Errorf("a check not asked changed: %+v", wl.Status.AdmissionChecks[1])
			}
		})
	}
}

func TestRevokedMessageNamesTheCheckAndWhatItSaid(t *testing.T) {
	wl := &v1alpha1.Workload{Status: v1alpha1.WorkloadStatus{AdmissionChecks: []v1alpha1.AdmissionCheckState{
		{Name: "budget", State: v1alpha1.CheckStateRetry, Reason: "BudgetCut", Message: "the budget was cut"},
		{Name: "quiet", State: v1alpha1.CheckStatePending},
	}}}
	got := revokedMessage(wl, []string{"budget", "quiet"})
	want := "no longer admitted: admission check budget answered Retry (BudgetCut): the budget was cut; admission check quiet answered Pending"
	if got != want {
		t.Fatalf("revokedMessage = %q, want %q", got, want)
	}
}

func TestRechecks(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "w"}
	r := newRechecks()
	r.add(key, []string{"a"})
	r.add(key, []string{"b", "a"})
	if got := r.take(key); len(got) != 2 || !got["a"] || !got["b"] {
		t.Fatalf("take = %v, want a and b", got)
	}
	if got := r.take(key); len(got) != 0 {
		t.Fatalf("second take = %v, want nothing: take clears", got)
	}
	if n := r.failed(key, "a"); n != 0 {
		t.Fatalf("first failure counted %d before, want 0", n)
	}
	if n := r.failed(key, "a"); n != 1 {
		t.Fatalf("second failure counted %d before, want 1", n)
	}
	if got := r.take(key); !got["a"] {
		t.Fatalf("take after a failure = %v, want a asked again", got)
	}
	r.answered(key, "a")
	if n := r.failed(key, "a"); n != 0 {
		t.Fatalf("failure after an answer counted %d before, want 0", n)
	}
	r.forget(key)
	if got := r.take(key); len(got) != 0 {
		t.Fatalf("take after forget = %v, want nothing", got)
	}
}
