package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/test/e2e/e2eutil"
	"github.com/sluice-dev/sluice/test/harness"
)

// faultCheck is an AdmissionCheck on a provider at target ("host:port")
// with short per-call timeout and backoffs, so that the fault tests see
// many calls in a few seconds.
func faultCheck(name, target string, policy sluicev1alpha1.FailurePolicy) *sluicev1alpha1.AdmissionCheck {
	return &sluicev1alpha1.AdmissionCheck{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: sluicev1alpha1.AdmissionCheckSpec{
			Endpoint:      "dns:///" + target,
			Timeout:       &metav1.Duration{Duration: time.Second},
			FailurePolicy: policy,
			Retry: &sluicev1alpha1.RetryPolicy{
				InitialBackoff: &metav1.Duration{Duration: 200 * time.Millisecond},
				MaxBackoff:     &metav1.Duration{Duration: time.Second},
			},
		},
	}
}

// createFaultPod creates pod and, when the test ends, deletes it and waits
// until it is gone, so that no pod of a fault test is still being ungated,
// run or released by sluice when the next test starts.
func createFaultPod(ctx context.Context, t *testing.T, pod *corev1.Pod) {
	t.Helper()
	mustCreate(ctx, t, pod)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := k8s.Delete(ctx, pod); client.IgnoreNotFound(err) != nil {
			t.Errorf("deleting pod %s/%s: %v", pod.Namespace, pod.Name, err)
			return
		}
		if err := e2eutil.WaitGone(ctx, k8s, pod.DeepCopy(), time.Minute); err != nil {
			t.Error(err)
		}
	})
}

// checkState is the named check's state on wl, or nil.
func checkState(wl *sluicev1alpha1.Workload, name string) *sluicev1alpha1.AdmissionCheckState {
	for i := range wl.Status.AdmissionChecks {
		if wl.Status.AdmissionChecks[i].Name == name {
			return &wl.Status.AdmissionChecks[i]
		}
	}
	return nil
}

// waitCheckState waits until the named check's state on the pod's
// Workload satisfies ok.
func waitCheckState(ctx context.Context, t *testing.T, pod *corev1.Pod, check, what string, ok func(*sluicev1alpha1.AdmissionCheckState) bool) *sluicev1alpha1.Workload {
	t.Helper()
	return waitWorkloadOf(ctx, t, pod, fmt.Sprintf("had check %s %s", check, what), func(w *sluicev1alpha1.Workload) bool {
		st := checkState(w, check)
		return st != nil && ok(st)
	})
}

// waitCheckActivity waits until the AdmissionCheck's Active condition
// satisfies ok.
func waitCheckActivity(ctx context.Context, t *testing.T, name, what string, ok func(*metav1.Condition) bool) {
	t.Helper()
	var ac sluicev1alpha1.AdmissionCheck
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := k8s.Get(ctx, client.ObjectKey{Name: name}, &ac); err != nil {
			return false, nil
		}
		c := meta.FindStatusCondition(ac.Status.Conditions, sluicev1alpha1.AdmissionCheckActive)
		return c != nil && ok(c), nil
	})
	if err != nil {
		t.Fatalf("AdmissionCheck %s never %s: conditions %v", name, what, ac.Status.Conditions)
	}
}

// checkCallErrors reads the admitter's count of failed Evaluate calls to
// the named check with the given gRPC code.
func checkCallErrors(ctx context.Context, check, code string) (float64, error) {
	return sluice.Admitter.Counter(ctx, "sluice_admitter_check_call_errors_total",
		map[string]string{"check": check, "code": code, "method": "Evaluate"})
}

// waitCheckCallErrors waits until the admitter counted at least n failed
// Evaluate calls to the check with the code.
func waitCheckCallErrors(ctx context.Context, t *testing.T, check, code string, n float64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err := harness.Poll(ctx, func() error {
		got, err := checkCallErrors(ctx, check, code)
		if err != nil {
			return err
		}
		if got < n {
			return fmt.Errorf("%v failed Evaluate calls to %s with %s, want %v", got, check, code, n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// gateWatch sees every version of one pod from when it starts, to tell
// whether the pod ever lost its admission gate — not just whether it has
// it when looked at.
type gateWatch struct {
	pod    *corev1.Pod
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	versions int
	ungated  string // resourceVersion of the first version without the gate
	stopped  bool   // stop was called
	ended    bool   // the watch ended before stop
}

// watchGate starts watching pod's gate.
func watchGate(ctx context.Context, t *testing.T, pod *corev1.Pod) *gateWatch {
	t.Helper()
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: k8s.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	w, err := wc.Watch(ctx, &corev1.PodList{}, client.InNamespace(pod.Namespace), client.MatchingFields{"metadata.name": pod.Name})
	if err != nil {
		cancel()
		t.Fatalf("watching pod %s/%s: %v", pod.Namespace, pod.Name, err)
	}
	g := &gateWatch{pod: pod, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(g.done)
		defer w.Stop()
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			g.mu.Lock()
			g.versions++
			if !hasGate(p) && g.ungated == "" {
				g.ungated = p.ResourceVersion
			}
			g.mu.Unlock()
		}
		g.mu.Lock()
		g.ended = !g.stopped
		g.mu.Unlock()
	}()
	t.Cleanup(g.stop)
	return g
}

func (g *gateWatch) stop() {
	g.mu.Lock()
	g.stopped = true
	g.mu.Unlock()
	g.cancel()
	<-g.done
}

// assertGatedThroughout stops the watch and fails the test unless the pod
// kept its gate in every version seen, and still has it.
func (g *gateWatch) assertGatedThroughout(ctx context.Context, t *testing.T) {
	t.Helper()
	g.stop()
	g.mu.Lock()
	versions, ungated, ended := g.versions, g.ungated, g.ended
	g.mu.Unlock()
	switch {
	case ended:
		t.Errorf("the watch of pod %s ended early, after %d versions: the observation is incomplete", g.pod.Name, versions)
	case versions == 0:
		t.Errorf("the watch of pod %s saw no version of it", g.pod.Name)
	case ungated != "":
		t.Errorf("pod %s lost its admission gate (resourceVersion %s)", g.pod.Name, ungated)
	}
	if !podGated(ctx, t, g.pod) {
		t.Errorf("pod %s is no longer gated", g.pod.Name)
	}
}

// conditionsSeen returns the named workload's condition of type condType
// in every version recorded, oldest first, dropping repeats.
func (r *recorder) conditionsSeen(name, condType string) []metav1.Condition {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []metav1.Condition
	for _, w := range r.workloads {
		if w.Name != name {
			continue
		}
		c := meta.FindStatusCondition(w.Status.Conditions, condType)
		if c == nil {
			continue
		}
		if n := len(out); n > 0 && out[n-1].Status == c.Status && out[n-1].Reason == c.Reason && out[n-1].Message == c.Message {
			continue
		}
		out = append(out, *c)
	}
	return out
}

// reasonChanges counts how often the named workload's condition took
// reason, from another reason or from not being there.
func (r *recorder) reasonChanges(name, condType, reason string) int {
	return r.became(name, condType, func(c *metav1.Condition) bool { return c != nil && c.Reason == reason })
}

// hasCondition reports whether conds holds one with the status, reason
// and message.
func hasCondition(conds []metav1.Condition, status metav1.ConditionStatus, reason, message string) bool {
	for _, c := range conds {
		if c.Status == status && c.Reason == reason && c.Message == message {
			return true
		}
	}
	return false
}

// versionsOf returns every recorded version of the named workload, oldest
// first.
func (r *recorder) versionsOf(name string) []*sluicev1alpha1.Workload {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*sluicev1alpha1.Workload
	for _, w := range r.workloads {
		if w.Name == name {
			out = append(out, w)
		}
	}
	return out
}
