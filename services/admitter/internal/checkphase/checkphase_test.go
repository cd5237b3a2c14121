package checkphase

import (
	"testing"
	"time"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
