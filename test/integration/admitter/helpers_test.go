package admitter

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	sluicev1 "github.com/sluice-dev/sluice/gen/sluice/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

const pollTimeout = 30 * time.Second

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// unique returns prefix plus a random suffix, for cluster-scoped names.
func unique(prefix string) string { return prefix + "-" + rand.String(5) }

// setup is one test's queues: a namespace with a LocalQueue "lq" pointing
// at a ClusterQueue with one flavor.
type setup struct {
	ns, cq, flavor string
}

type queueOptions struct {
	cpu         string
	nodeLabels  map[string]string
	checks      []string
	queueingStr v1alpha1.QueueingStrategy
	startup     *v1alpha1.WaitForPodsReady
	// replacementWindow is the queue's podGroupReplacementWindow.
	replacementWindow *metav1.Duration
	preemption        *v1alpha1.ClusterQueuePreemption
}

func newSetup(ctx context.Context, t *testing.T, o queueOptions) setup {
	t.Helper()
	st := createQueues(ctx, t, o)
	waitFor(ctx, t, "ClusterQueue "+st.cq+" Active", func() (bool, string) {
		var got v1alpha1.ClusterQueue
		if err := s.k8s.Get(ctx, client.ObjectKey{Name: st.cq}, &got); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ClusterQueueActive)
		return c != nil && c.Status == metav1.ConditionTrue, fmt.Sprintf("%+v", c)
	})
	return st
}

// newSetupWithoutWaiting creates the queues without waiting for an
// admitter to report them active.
func newSetupWithoutWaiting(ctx context.Context, t *testing.T, cpu string) setup {
	t.Helper()
	return createQueues(ctx, t, queueOptions{cpu: cpu})
}

func createQueues(ctx context.Context, t *testing.T, o queueOptions) setup {
	t.Helper()
	st := setup{ns: unique("adm"), cq: unique("cq"), flavor: unique("flavor")}
	create(ctx, t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: st.ns}})
	create(ctx, t, &v1alpha1.ResourceFlavor{
		ObjectMeta: metav1.ObjectMeta{Name: st.flavor},
		Spec:       v1alpha1.ResourceFlavorSpec{NodeLabels: o.nodeLabels},
	})
	cq := &v1alpha1.ClusterQueue{
		ObjectMeta: metav1.ObjectMeta{Name: st.cq},
		Spec: v1alpha1.ClusterQueueSpec{
			QueueingStrategy:          o.queueingStr,
			WaitForPodsReady:          o.startup,
			PodGroupReplacementWindow: o.replacementWindow,
			Preemption:                o.preemption,
			ResourceGroups: []v1alpha1.ResourceGroup{{
				CoveredResources: []corev1.ResourceName{corev1.ResourceCPU},
				Flavors: []v1alpha1.FlavorQuotas{{Name: st.flavor, Resources: []v1alpha1.ResourceQuota{
					{Name: corev1.ResourceCPU, NominalQuota: resource.MustParse(o.cpu)},
				}}},
			}},
		},
	}
	if len(o.checks) > 0 {
		cq.Spec.AdmissionChecksStrategy = &v1alpha1.AdmissionChecksStrategy{}
		for _, c := range o.checks {
			cq.Spec.AdmissionChecksStrategy.AdmissionChecks = append(cq.Spec.AdmissionChecksStrategy.AdmissionChecks,
				v1alpha1.AdmissionCheckStrategyRule{Name: c})
		}
	}
	create(ctx, t, cq)
	create(ctx, t, &v1alpha1.LocalQueue{
		ObjectMeta: metav1.ObjectMeta{Namespace: st.ns, Name: "lq"},
		Spec:       v1alpha1.LocalQueueSpec{ClusterQueue: st.cq},
	})
	return st
}

// evaluationKey is the key the admitter sends a check's provider for one
// reservation of a workload: unique per check, so two checks on one
// provider never share one.
func evaluationKey(uid types.UID, reservationID, check string) string {
	return string(uid) + "/" + reservationID + "/" + check
}

// newCheck creates an AdmissionCheck served at target with a short retry
// backoff, and waits until the admitter reports it Active.
func newCheck(ctx context.Context, t *testing.T, target string) string {
	t.Helper()
	name := unique("check")
	create(ctx, t, &v1alpha1.AdmissionCheck{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.AdmissionCheckSpec{
			Endpoint: target,
			Timeout:  &metav1.Duration{Duration: 5 * time.Second},
			Retry: &v1alpha1.RetryPolicy{
				InitialBackoff: &metav1.Duration{Duration: 100 * time.Millisecond},
				MaxBackoff:     &metav1.Duration{Duration: 500 * time.Millisecond},
			},
		},
	})
	waitFor(ctx, t, "AdmissionCheck "+name+" Active", func() (bool, string) {
		var got v1alpha1.AdmissionCheck
		if err := s.k8s.Get(ctx, client.ObjectKey{Name: name}, &got); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.AdmissionCheckActive)
		return c != nil && c.Status == metav1.ConditionTrue, fmt.Sprintf("%+v", c)
	})
	return name
}

func create(ctx context.Context, t *testing.T, obj client.Object) {
	t.Helper()
	if err := s.k8s.Create(ctx, obj); err != nil {
		t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
	t.Cleanup(func() { _ = s.k8s.Delete(context.Background(), obj) })
}

// submit sends SubmitWorkload for a one-pod-set workload requesting cpu
// per pod.
func submit(ctx context.Context, t *testing.T, ns, name, cpu string, opts ...func(*sluicev1.Workload)) *admitterv1.SubmitWorkloadResponse {
	t.Helper()
	wl := &sluicev1.Workload{
		Ref:       &sluicev1.WorkloadRef{Namespace: ns, Name: name},
		QueueName: "lq",
		PodSets: []*sluicev1.PodSet{{
			Name: "main", Count: 1, RoleHash: "abc123",
			Requests: map[string]string{"cpu": cpu},
			Labels:   map[string]string{"app": name},
		}},
		Owners: []*sluicev1.OwnerReference{{Name: name, Uid: "uid-" + name, Controller: true}},
	}
	for _, o := range opts {
		o(wl)
	}
	resp, err := s.client.SubmitWorkload(ctx, &admitterv1.SubmitWorkloadRequest{Workload: wl})
	if err != nil {
		t.Fatalf("SubmitWorkload %s/%s: %v", ns, name, err)
	}
	return resp
}

func getWorkload(ctx context.Context, t *testing.T, ns, name string) *v1alpha1.Workload {
	t.Helper()
	var wl v1alpha1.Workload
	if err := s.k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &wl); err != nil {
		t.Fatalf("get workload %s/%s: %v", ns, name, err)
	}
	return &wl
}

// waitWorkload polls the workload until cond holds.
func waitWorkload(ctx context.Context, t *testing.T, ns, name, what string, cond func(*v1alpha1.Workload) bool) *v1alpha1.Workload {
	t.Helper()
	var last *v1alpha1.Workload
	waitFor(ctx, t, fmt.Sprintf("workload %s/%s %s", ns, name, what), func() (bool, string) {
		var wl v1alpha1.Workload
		if err := s.k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &wl); err != nil {
			return false, err.Error()
		}
		last = &wl
		return cond(&wl), fmt.Sprintf("conditions %+v checks %+v", wl.Status.Conditions, wl.Status.AdmissionChecks)
	})
	return last
}

func waitFor(ctx context.Context, t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, pollTimeout)
	defer cancel()
	var last string
	for {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s; last: %s", what, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func condition(wl *v1alpha1.Workload, typ string) *metav1.Condition {
	return meta.FindStatusCondition(wl.Status.Conditions, typ)
}

func isTrue(wl *v1alpha1.Workload, typ string) bool {
	return meta.IsStatusConditionTrue(wl.Status.Conditions, typ)
}

// watcher follows WatchAdmissions and keeps every decision it received.
type watcher struct {
	mu        sync.Mutex
	decisions []*admitterv1.Decision
	revision  string
	err       error
	changed   chan struct{}
}

func watchDecisions(t *testing.T, resume string) *watcher {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st, err := s.client.WatchAdmissions(ctx, &admitterv1.WatchAdmissionsRequest{ResumeRevision: resume})
	if err != nil {
		t.Fatalf("WatchAdmissions: %v", err)
	}
	w := &watcher{changed: make(chan struct{})}
	go func() {
		for {
			resp, err := st.Recv()
			w.mu.Lock()
			if err != nil {
				w.err = err
				close(w.changed)
				w.mu.Unlock()
				return
			}
			w.decisions = append(w.decisions, resp.GetDecisions()...)
			if resp.GetRevision() != "" {
				w.revision = resp.GetRevision()
			}
			close(w.changed)
			w.changed = make(chan struct{})
			w.mu.Unlock()
		}
	}()
	return w
}

// wait returns the first decision for ns/name with action, waiting for it.
func (w *watcher) wait(ctx context.Context, t *testing.T, ns, name string, action admitterv1.Decision_Action) *admitterv1.Decision {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, pollTimeout)
	defer cancel()
	for {
		w.mu.Lock()
		for _, d := range w.decisions {
			if d.GetWorkload().GetNamespace() == ns && d.GetWorkload().GetName() == name && d.GetAction() == action {
				w.mu.Unlock()
				return d
			}
		}
		changed, err := w.changed, w.err
		w.mu.Unlock()
		if err != nil {
			t.Fatalf("stream ended while waiting for %s of %s/%s: %v", action, ns, name, err)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatalf("no %s decision for %s/%s; got %s", action, ns, name, w.summary())
		}
	}
}

// count is the number of decisions for ns/name with action so far.
func (w *watcher) count(ns, name string, action admitterv1.Decision_Action) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, d := range w.decisions {
		if d.GetWorkload().GetNamespace() == ns && d.GetWorkload().GetName() == name && d.GetAction() == action {
			n++
		}
	}
	return n
}

func (w *watcher) summary() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var parts []string
	for _, d := range w.decisions {
		parts = append(parts, d.GetAction().String()+":"+d.GetWorkload().GetNamespace()+"/"+d.GetWorkload().GetName())
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func clientKey(name string) client.ObjectKey { return client.ObjectKey{Name: name} }

func stringify(v any) string { return fmt.Sprintf("%+v", v) }
