package startup

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

func TestBackoff(t *testing.T) {
	p := Policy{BackoffBase: 10 * time.Second, BackoffMax: 60 * time.Second}
	tests := []struct {
		n    int32
		want time.Duration
	}{
		{0, 10 * time.Second},
		{1, 10 * time.Second},
		{2, 20 * time.Second},
		{3, 40 * time.Second},
		{4, 60 * time.Second},
		{40, 60 * time.Second},
	}
	for _, tt := range tests {
		if got := Backoff(p, tt.n); got != tt.want {
			t.Errorf("Backoff(n=%d) = %s, want %s", tt.n, got, tt.want)
		}
	}
}

func TestLimitExceeded(t *testing.T) {
	tests := []struct {
		name  string
		limit *int32
		n     int32
		want  bool
	}{
		{"no limit", nil, 100, false},
		{"within", ptr.To[int32](2), 2, false},
		{"beyond", ptr.To[int32](2), 3, true},
		{"zero allows none", ptr.To[int32](0), 1, true},
	}
	for _, tt := range tests {
		if got := LimitExceeded(Policy{LimitCount: tt.limit}, tt.n); got != tt.want {
			t.Errorf("%s: LimitExceeded = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestFromSpecAndFor(t *testing.T) {
	def := Policy{Timeout: time.Minute, Condition: v1alpha1.PodsReady, BackoffBase: time.Second, BackoffMax: time.Minute}
	tests := []struct {
		name string
		cq   *v1alpha1.ClusterQueue
		want Policy
	}{
		{"no queue", nil, def},
		{"queue without its own", &v1alpha1.ClusterQueue{}, def},
		{"own replaces the default whole", &v1alpha1.ClusterQueue{Spec: v1alpha1.ClusterQueueSpec{
			WaitForPodsReady: &v1alpha1.WaitForPodsReady{Timeout: metav1.Duration{Duration: 5 * time.Second}}}},
			Policy{Timeout: 5 * time.Second, Condition: v1alpha1.PodsReady, BackoffBase: DefaultBackoffBase, BackoffMax: DefaultBackoffMax}},
		{"own with a strategy", &v1alpha1.ClusterQueue{Spec: v1alpha1.ClusterQueueSpec{
			WaitForPodsReady: &v1alpha1.WaitForPodsReady{Condition: v1alpha1.PodsScheduled,
				RequeuingStrategy: &v1alpha1.RequeuingStrategy{BackoffBaseSeconds: ptr.To[int32](2), BackoffMaxSeconds: ptr.To[int32](8), BackoffLimitCount: ptr.To[int32](3)}}}},
			Policy{Condition: v1alpha1.PodsScheduled, BackoffBase: 2 * time.Second, BackoffMax: 8 * time.Second, LimitCount: ptr.To[int32](3)}},
	}
	for _, tt := range tests {
		got := For(tt.cq, def)
		if got.Timeout != tt.want.Timeout || got.Condition != tt.want.Condition || got.BackoffBase != tt.want.BackoffBase ||
			got.BackoffMax != tt.want.BackoffMax || ptr.Deref(got.LimitCount, -1) != ptr.Deref(tt.want.LimitCount, -1) {
			t.Errorf("%s: For = %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

func TestValidate(t *testing.T) {
	ok := Policy{Condition: v1alpha1.PodsReady, BackoffBase: time.Second, BackoffMax: time.Second}
	tests := []struct {
		name    string
		mutate  func(*Policy)
		wantErr bool
	}{
		{"valid", func(*Policy) {}, false},
		{"negative timeout", func(p *Policy) { p.Timeout = -time.Second }, true},
		{"unknown condition", func(p *Policy) { p.Condition = "Running" }, true},
		{"zero base", func(p *Policy) { p.BackoffBase = 0 }, true},
		{"max below base", func(p *Policy) { p.BackoffBase = time.Minute }, true},
		{"negative limit", func(p *Policy) { p.LimitCount = ptr.To[int32](-1) }, true},
	}
	for _, tt := range tests {
		p := ok
		tt.mutate(&p)
		if err := p.Validate(); (err != nil) != tt.wantErr {
			t.Errorf("%s: Validate() = %v, want error %v", tt.name, err, tt.wantErr)
		}
	}
}

func TestDeadline(t *testing.T) {
	admittedAt := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	cond := func(typ string, status metav1.ConditionStatus) metav1.Condition {
		return metav1.Condition{Type: typ, Status: status, LastTransitionTime: metav1.NewTime(admittedAt)}
	}
	wl := func(conds ...metav1.Condition) *v1alpha1.Workload {
		return &v1alpha1.Workload{Status: v1alpha1.WorkloadStatus{
			Admission: &v1alpha1.Admission{ClusterQueue: "cq"}, Conditions: conds}}
	}
	on := Policy{Timeout: 30 * time.Second}
	tests := []struct {
		name   string
		wl     *v1alpha1.Workload
		p      Policy
		wantOK bool
		due    bool
	}{
		{"admitted", wl(cond(v1alpha1.WorkloadAdmitted, metav1.ConditionTrue)), on, true, true},
		{"no deadline in the policy", wl(cond(v1alpha1.WorkloadAdmitted, metav1.ConditionTrue)), Policy{}, false, false},
		{"not admitted", wl(cond(v1alpha1.WorkloadAdmitted, metav1.ConditionFalse)), on, false, false},
		{"being evicted", wl(cond(v1alpha1.WorkloadAdmitted, metav1.ConditionTrue), cond(v1alpha1.WorkloadEvicted, metav1.ConditionTrue)), on, false, false},
		{"finished", wl(cond(v1alpha1.WorkloadAdmitted, metav1.ConditionTrue), cond(v1alpha1.WorkloadFinished, metav1.ConditionTrue)), on, false, false},
		{"started", wl(cond(v1alpha1.WorkloadAdmitted, metav1.ConditionTrue), cond(v1alpha1.WorkloadPodsReady, metav1.ConditionTrue)), on, true, false},
	}
	for _, tt := range tests {
		at, ok := Deadline(tt.wl, tt.p)
		if ok != tt.wantOK || (ok && !at.Equal(admittedAt.Add(30*time.Second))) {
			t.Errorf("%s: Deadline = %s, %v; want ok %v at %s", tt.name, at, ok, tt.wantOK, admittedAt.Add(30*time.Second))
		}
		if _, due := Due(tt.wl, tt.p); due != tt.due {
			t.Errorf("%s: Due = %v, want %v", tt.name, due, tt.due)
		}
	}
}

func TestAllStarted(t *testing.T) {
	podSets := []v1alpha1.PodSet{{Name: "a", Count: 2}, {Name: "b", Count: 1}}
	scheduled := Policy{Condition: v1alpha1.PodsScheduled}
	ready := Policy{Condition: v1alpha1.PodsReady}
	tests := []struct {
		name string
		p    Policy
		c    Counts
		want bool
	}{
		{"all scheduled", scheduled, Counts{Scheduled: map[string]int32{"a": 2, "b": 1}}, true},
		{"one pod set short", scheduled, Counts{Scheduled: map[string]int32{"a": 2}}, false},
		{"scheduled is not ready", ready, Counts{Scheduled: map[string]int32{"a": 2, "b": 1}, Ready: map[string]int32{"a": 2}}, false},
		{"all ready", ready, Counts{Ready: map[string]int32{"a": 2, "b": 1}}, true},
		{"nothing reported", ready, Counts{}, false},
	}
	for _, tt := range tests {
		if got := AllStarted(tt.p, podSets, tt.c); got != tt.want {
			t.Errorf("%s: AllStarted = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestDescribe(t *testing.T) {
	podSets := []v1alpha1.PodSet{{Name: "b", Count: 1}, {Name: "a", Count: 2}}
	p := Policy{Condition: v1alpha1.PodsScheduled}
	if got, want := Describe(p, podSets, Counts{Scheduled: map[string]int32{"a": 1}}, true),
		"pod set a 1/2 scheduled, pod set b 0/1 scheduled"; got != want {
		t.Errorf("Describe = %q, want %q", got, want)
	}
	if got, want := Describe(Policy{Condition: v1alpha1.PodsReady}, podSets, Counts{}, false), "no pod was reported ready"; got != want {
		t.Errorf("Describe = %q, want %q", got, want)
	}
}
