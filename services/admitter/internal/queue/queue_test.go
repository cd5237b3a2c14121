package queue

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

var base = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func wl(name string, priority *int32, createdSec int, requeueSec ...int) *v1alpha1.Workload {
	w := &v1alpha1.Workload{ObjectMeta: metav1.ObjectMeta{
		Name: name, Namespace: "ns", CreationTimestamp: metav1.NewTime(base.Add(time.Duration(createdSec) * time.Second)),
	}}
	w.Spec.Priority = priority
	if len(requeueSec) > 0 {
		at := metav1.NewTime(base.Add(time.Duration(requeueSec[0]) * time.Second))
		w.Status.RequeueState = &v1alpha1.RequeueState{RequeueAt: &at}
	}
	return w
}

func prio(v int32) *int32 { return &v }

func TestSort(t *testing.T) {
	tests := []struct {
		name string
		in   []*v1alpha1.Workload
		want []string
	}{
		{"older first at equal priority",
			[]*v1alpha1.Workload{wl("b", nil, 2), wl("a", nil, 1), wl("c", nil, 3)},
			[]string{"a", "b", "c"}},
		{"higher priority first whatever its age",
			[]*v1alpha1.Workload{wl("old-low", prio(0), 0), wl("new-high", prio(100), 9), wl("mid", prio(50), 5)},
			[]string{"new-high", "mid", "old-low"}},
		{"unset priority counts as zero",
			[]*v1alpha1.Workload{wl("neg", prio(-1), 0), wl("unset", nil, 5), wl("zero", prio(0), 1)},
			[]string{"zero", "unset", "neg"}},
		{"requeued workload goes to the back of its priority",
			[]*v1alpha1.Workload{wl("requeued", nil, 0, 10), wl("later", nil, 5)},
			[]string{"later", "requeued"}},
		{"name breaks ties",
			[]*v1alpha1.Workload{wl("y", nil, 1), wl("x", nil, 1)},
			[]string{"x", "y"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			slices.SortFunc(tc.in, Compare)
			var got []string
			for _, w := range tc.in {
				got = append(got, w.Name)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("order = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestReadyAt(t *testing.T) {
	now := base.Add(5 * time.Second)
	tests := []struct {
		name string
		wl   *v1alpha1.Workload
		want time.Time
	}{
		{"never evicted", wl("a", nil, 0), time.Time{}},
		{"requeue time passed", wl("a", nil, 0, 3), time.Time{}},
		{"requeue time ahead", wl("a", nil, 0, 8), base.Add(8 * time.Second)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := ReadyAt(tc.wl, now); !got.Equal(tc.want) {
				t.Fatalf("ReadyAt = %v, want %v", got, tc.want)
			}
		})
	}
}
