package admitter

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	sluicev1 "github.com/sluice-dev/sluice/gen/sluice/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

// withClass names a WorkloadPriorityClass, as the pods' label does.
func withClass(name string) func(*sluicev1.Workload) {
	return func(w *sluicev1.Workload) { w.WorkloadPriorityClass = name }
}

func newPriorityClass(ctx context.Context, t *testing.T, value int32) string {
	t.Helper()
	name := unique("class")
	create(ctx, t, &v1alpha1.WorkloadPriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value})
	return name
}

// TestWorkloadPriorityClassOrdersTheQueue: a workload is queued at the
// value of the class its pods name, read when its Workload is created, so
// one submitted later jumps the queue; the admission does not ask the
// pods for a priority of their own.
func TestWorkloadPriorityClassOrdersTheQueue(t *testing.T) {
	ctx := testContext(t)
	st := newSetup(ctx, t, queueOptions{cpu: "1"})
	low, high := newPriorityClass(ctx, t, 10), newPriorityClass(ctx, t, 1000)
	w := watchDecisions(t, "")

	submit(ctx, t, st.ns, "holder", "1")
	waitWorkload(ctx, t, st.ns, "holder", "admitted", func(wl *v1alpha1.Workload) bool { return isTrue(wl, v1alpha1.WorkloadAdmitted) })
	submit(ctx, t, st.ns, "routine", "1", withClass(low))
	submit(ctx, t, st.ns, "urgent", "1", withClass(high), func(w *sluicev1.Workload) { w.Priority = 5 })
	for name, want := range map[string]struct {
		class string
		value int32
	}{"routine": {low, 10}, "urgent": {high, 1000}} {
		wl := getWorkload(ctx, t, st.ns, name)
		ref := wl.Spec.PriorityClassRef
		if ref == nil || ref.Group != "sluice.dev" || ref.Kind != v1alpha1.WorkloadPriorityClassKind || ref.Name != want.class ||
			wl.Spec.Priority == nil || *wl.Spec.Priority != want.value {
			t.Fatalf("workload %s: priorityClassRef %+v, priority %v; want WorkloadPriorityClass %s at %d", name, ref, wl.Spec.Priority, want.class, want.value)
		}
	}

	// The value is read once: editing the class moves no Workload.
	var class v1alpha1.WorkloadPriorityClass
	if err := s.k8s.Get(ctx, client.ObjectKey{Name: high}, &class); err != nil {
		t.Fatal(err)
	}
	class.Value = 1
	if err := s.k8s.Update(ctx, &class); err != nil {
		t.Fatal(err)
	}

	if _, err := s.client.ReportProgress(ctx, &admitterv1.ReportProgressRequest{
		Workload: &sluicev1.WorkloadRef{Namespace: st.ns, Name: "holder"},
		Finish:   &admitterv1.Finish{Succeeded: true},
	}); err != nil {
		t.Fatalf("ReportProgress: %v", err)
	}
	d := w.wait(ctx, t, st.ns, "urgent", admitterv1.Decision_ACTION_ADMIT)
	if d.Priority != nil {
		t.Errorf("the admission of a workload queued at its WorkloadPriorityClass asks the pods for priority %d", d.GetPriority())
	}
	routine := getWorkload(ctx, t, st.ns, "routine")
	if c := condition(routine, v1alpha1.WorkloadQuotaReserved); c == nil || c.Status != metav1.ConditionFalse {
		t.Fatalf("routine workload holds quota ahead of the urgent one: %+v", c)
	}
	if got := getWorkload(ctx, t, st.ns, "urgent").Spec.Priority; *got != 1000 {
		t.Errorf("urgent workload's priority is %d after its class was edited, want 1000 as read at creation", *got)
	}
}

// TestMissingWorkloadPriorityClassIsRefused: a class that does not exist
// (deleted after the webhook let the pods in) refuses the submission and
// creates nothing; once the class exists the same submission queues, even
// before the admitter's cache has seen the class.
func TestMissingWorkloadPriorityClassIsRefused(t *testing.T) {
	ctx := testContext(t)
	st := newSetup(ctx, t, queueOptions{cpu: "1"})
	name := unique("class")
	wl := &sluicev1.Workload{
		Ref:       &sluicev1.WorkloadRef{Namespace: st.ns, Name: "classy"},
		QueueName: "lq",
		PodSets:   []*sluicev1.PodSet{{Name: "main", Count: 1, Requests: map[string]string{"cpu": "1"}}},
		Owners:    []*sluicev1.OwnerReference{{Name: "classy", Uid: "uid-classy", Controller: true}},
	}
	withClass(name)(wl)
	_, err := s.client.SubmitWorkload(ctx, &admitterv1.SubmitWorkloadRequest{Workload: wl})
	if status.Code(err) != codes.FailedPrecondition ||
		!strings.Contains(err.Error(), `kueue.x-k8s.io/priority-class names WorkloadPriorityClass "`+name+`", which does not exist`) {
		t.Fatalf("SubmitWorkload naming a missing class: %v, want FailedPrecondition naming the label and the class", err)
	}
	var got v1alpha1.Workload
	if err := s.k8s.Get(ctx, client.ObjectKey{Namespace: st.ns, Name: "classy"}, &got); !apierrors.IsNotFound(err) {
		t.Fatalf("a refused submission left a Workload behind: %v", err)
	}

	create(ctx, t, &v1alpha1.WorkloadPriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: 7})
	resp, err := s.client.SubmitWorkload(ctx, &admitterv1.SubmitWorkloadRequest{Workload: wl})
	if err != nil || !resp.GetCreated() {
		t.Fatalf("SubmitWorkload once the class exists: created %v, %v", resp.GetCreated(), err)
	}
	if p := getWorkload(ctx, t, st.ns, "classy").Spec.Priority; p == nil || *p != 7 {
		t.Fatalf("priority %v, want the class's 7", p)
	}
}
