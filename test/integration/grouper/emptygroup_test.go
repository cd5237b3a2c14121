package grouper

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

// TestEmptyGroupReportedAgainAtItsWindowEnd: when the admitter answers a
// no_pods report with a replacement window, the grouper looks at the group
// again once the window ended and, the group still being empty, reports it
// again — that report is what gives the quota back — and not before.
func TestEmptyGroupReportedAgainAtItsWindowEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	k8s := s.k8s
	const name = "windowed-group"
	until := time.Now().Add(3 * time.Second)
	s.admitter.answerNoPodsUntil(name, until)
	wl := &v1alpha1.Workload{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{v1alpha1.PodGroupLabel: name}},
		Spec:       v1alpha1.WorkloadSpec{QueueName: "lq", PodSets: []v1alpha1.PodSet{{Name: "main", Count: 2}}},
	}
	if err := k8s.Create(ctx, wl); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), wl) })

	noPods := func() int {
		n := 0
		for _, r := range s.admitter.reportsFor(name) {
			if r.GetNoPods() && r.GetWorkload().GetUid() == string(wl.UID) {
				n++
			}
		}
		return n
	}
	waitFor(ctx, t, "the first no-pods report", func() error {
		if noPods() == 0 {
			return fmt.Errorf("reports %v", s.admitter.reportsFor(name))
		}
		return nil
	})
	first := noPods()
	waitFor(ctx, t, "the report at the window's end", func() error {
		if n := noPods(); n <= first {
			return fmt.Errorf("%d no-pods reports", n)
		}
		return nil
	})
	if seen := time.Now(); seen.Before(until) {
		t.Fatalf("the group was reported again at %s, before its window ended at %s", seen, until)
	}
}
