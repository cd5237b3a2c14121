package grouper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	sluicev1 "github.com/sluice-dev/sluice/gen/sluice/v1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
)

// startedReports returns the started counts reported for workload name,
// oldest first.
func startedReports(name string) []*admitterv1.Started {
	var out []*admitterv1.Started
	for _, r := range s.admitter.reportsFor(name) {
		if r.GetStarted() != nil {
			out = append(out, r.GetStarted())
		}
	}
	return out
}

// waitStarted waits until the n-th started report of name says scheduled
// and ready pods of pod set podSet.
func waitStarted(ctx context.Context, t *testing.T, name, podSet string, n int, scheduled, ready int32) {
	t.Helper()
	waitFor(ctx, t, fmt.Sprintf("started report %d of %s: %d scheduled, %d ready", n, name, scheduled, ready), func() error {
		reports := startedReports(name)
		if len(reports) < n {
			return fmt.Errorf("%d started reports: %v", len(reports), reports)
		}
		r := reports[n-1]
		if r.GetScheduled()[podSet] != scheduled || r.GetReady()[podSet] != ready {
			return fmt.Errorf("report %d is %v", n, r)
		}
		return nil
	})
}

// bindPod binds pod, which no gate may hold any more, to node-1 as
// kube-scheduler would, and returns it as bound.
func bindPod(ctx context.Context, t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	pods := s.cs.CoreV1().Pods(pod.Namespace)
	binding := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pod.Name}, Target: corev1.ObjectReference{Kind: "Node", Name: "node-1"}}
	if err := pods.Bind(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatalf("bind pod %s: %v", pod.Name, err)
	}
	bound, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pod %s: %v", pod.Name, err)
	}
	return bound
}

// setReady marks pod Ready, as the kubelet would, and returns it as
// updated.
func setReady(ctx context.Context, t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	pods := s.cs.CoreV1().Pods(pod.Namespace)
	cur, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pod %s: %v", pod.Name, err)
	}
	cur.Status.Conditions = append(cur.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue,
		LastTransitionTime: metav1.Now()})
	ready, err := pods.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("set pod %s ready: %v", pod.Name, err)
	}
	return ready
}

// TestStartedReported: for an admission with a start-up deadline the
// grouper reports the pods bound to a node and Ready as they change, again
// after a snapshot from a new admitter.
func TestStartedReported(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pod := createPod(ctx, t, "deadline")
	name := workloadName(pod)
	pods := s.cs.CoreV1().Pods(namespace)
	admit := &admitterv1.Decision{
		Workload: &sluicev1.WorkloadRef{Namespace: namespace, Name: name, Uid: "uid-1"}, Action: admitterv1.Decision_ACTION_ADMIT,
		ClusterQueue: "cq", ReservationId: "r1", PodSetCounts: map[string]int32{"main": 1},
		StartBy: timestamppb.New(time.Now().Add(time.Minute)),
	}
	s.admitter.push(admit)
	waitPod(ctx, t, pod.Name, "ungated", func(p *corev1.Pod) error {
		if hasGate(p, podkeys.AdmissionGate) {
			return errors.New("still gated")
		}
		return nil
	})
	if n := len(startedReports(name)); n != 0 {
		t.Fatalf("%d started reports before any pod started", n)
	}

	// Bound to a node (the other controller's gate goes first: a gated
	// pod cannot be bound).
	gates, _ := json.Marshal(map[string]any{"spec": map[string]any{"schedulingGates": []corev1.PodSchedulingGate{}}})
	if _, err := pods.Patch(ctx, pod.Name, types.MergePatchType, gates, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	bindPod(ctx, t, pod)
	waitStarted(ctx, t, name, "main", 1, 1, 0)

	// A new admitter's snapshot: the counts are reported again.
	s.admitter.breakStream(true)
	waitStarted(ctx, t, name, "main", 2, 1, 0)

	// Ready.
	setReady(ctx, t, pod)
	waitStarted(ctx, t, name, "main", 3, 1, 1)
}
