package grouper

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	sluicev1 "github.com/sluice-dev/sluice/gen/sluice/v1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/test/harness"
)

const (
	foreignGate = "example.com/other"
	traceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
	traceparent = "00-" + traceID + "-00f067aa0ba902b7-01"
	timeout     = 30 * time.Second

	alreadyUngatedMetric = "sluice_grouper_decision_pods_already_ungated_total"
)

// TestSinglePodLifecycle follows one pod from gated to finished: one
// submission, one ungate patch despite repeated decisions and a stream
// reconnect, a finish report, and the finalizer removed only after it.
func TestSinglePodLifecycle(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pod := createPod(ctx, t, "lifecycle")
	name := workloadName(pod)

	// One submission with the pod's shape.
	waitFor(ctx, t, "the workload submitted", func() error {
		if n := len(s.admitter.submissionsFor(name)); n != 1 {
			return fmt.Errorf("%d submissions of %s", n, name)
		}
		return nil
	})
	sub := s.admitter.submissionsFor(name)[0]
	want := &sluicev1.Workload{
		Ref:         &sluicev1.WorkloadRef{Namespace: namespace, Name: name},
		QueueName:   "user-queue",
		Owners:      []*sluicev1.OwnerReference{{Name: pod.Name, Uid: string(pod.UID), Controller: true}},
		Traceparent: traceparent,
		PodSets: []*sluicev1.PodSet{{
			Name:         "main",
			Count:        1,
			RoleHash:     "0123abcd",
			Requests:     map[string]string{"cpu": "1", "memory": "128Mi"}, // the init container's cpu wins
			NodeSelector: map[string]string{"disk": "ssd"},
			Labels:       pod.Labels,
			Annotations:  pod.Annotations,
		}},
	}
	got := proto.Clone(sub.req.GetWorkload()).(*sluicev1.Workload)
	got.GetPodSets()[0].Tolerations = nil // defaulted by the API server; checked below
	if !proto.Equal(got, want) {
		t.Errorf("submitted workload =\n%v\nwant\n%v", got, want)
	}
	if !strings.Contains(sub.traceparent, traceID) {
		t.Errorf("SubmitWorkload traceparent header = %q, want the pod's trace %s", sub.traceparent, traceID)
	}

	// ADMIT: one patch ungates the pod with the pod set info.
	before := podPatches(ctx, t)
	sec := int64(120)
	admit := &admitterv1.Decision{
		Workload:     &sluicev1.WorkloadRef{Namespace: namespace, Name: name, Uid: "wl-uid"},
		Action:       admitterv1.Decision_ACTION_ADMIT,
		ClusterQueue: "team-cq",
		PodSetInfos: []*sluicev1.PodSetInfo{{
			Name:         "main",
			NodeSelector: map[string]string{"zone": "a"},
			Tolerations: []*sluicev1.Toleration{
				{Key: "spot", Operator: "Exists", Effect: "NoSchedule"},
				{Key: "spot", Operator: "Exists", Effect: "NoSchedule"},
				{Key: "slow", Operator: "Exists", Effect: "NoExecute", TolerationSeconds: &sec},
			},
			Labels:      map[string]string{"flavor": "spot"},
			Annotations: map[string]string{"check.example.com/ok": "yes"},
		}},
	}
	s.admitter.push(admit)
	ungated := waitPod(ctx, t, pod.Name, "ungated", func(p *corev1.Pod) error {
		if hasGate(p, podkeys.AdmissionGate) {
			return errors.New("still gated")
		}
		return nil
	})
	if !hasGate(ungated, foreignGate) {
		t.Errorf("foreign gate removed: %v", ungated.Spec.SchedulingGates)
	}
	if want := map[string]string{"disk": "ssd", "zone": "a"}; !maps.Equal(ungated.Spec.NodeSelector, want) {
		t.Errorf("nodeSelector = %v, want %v", ungated.Spec.NodeSelector, want)
	}
	if n := countTolerations(ungated, "spot"); n != 1 {
		t.Errorf("%d spot tolerations, want 1 (de-duplicated): %v", n, ungated.Spec.Tolerations)
	}
	if n := countTolerations(ungated, "slow"); n != 1 {
		t.Errorf("%d slow tolerations, want 1: %v", n, ungated.Spec.Tolerations)
	}
	for k, v := range map[string]string{"flavor": "spot", podkeys.PodSetLabel: "main", "app": "demo"} {
		if ungated.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, ungated.Labels[k], v)
		}
	}
	for k, v := range map[string]string{"check.example.com/ok": "yes", podkeys.WorkloadAnnotation: name} {
		if ungated.Annotations[k] != v {
			t.Errorf("annotation %s = %q, want %q", k, ungated.Annotations[k], v)
		}
	}
	waitFor(ctx, t, "one ungate patch counted", func() error {
		if n := podPatches(ctx, t) - before; n != 1 {
			return fmt.Errorf("%v pod patches since the decision, want 1", n)
		}
		return nil
	})
	if err := findEvent(ctx, pod.Name, "Admitted", ""); err == nil {
		t.Errorf("the ungate wrote an Admitted event; the success path must not write one event per pod")
	}

	// The same decision again: no second patch.
	skipped := grouperMetric(ctx, t, alreadyUngatedMetric)
	lastRev := s.admitter.push(admit)
	waitMetricAbove(ctx, t, alreadyUngatedMetric, skipped)

	// A broken stream resumes from the last revision applied ...
	_, _, _, watches := s.admitter.snapshot()
	initial := len(watches)
	s.admitter.breakStream(false)
	waitFor(ctx, t, "a resumed stream", func() error {
		if _, _, _, w := s.admitter.snapshot(); len(w) <= initial {
			return errors.New("no new WatchAdmissions call")
		}
		return nil
	})
	// ... and after an admitter restart a snapshot repeats the admission:
	// still no second patch.
	skipped = grouperMetric(ctx, t, alreadyUngatedMetric)
	s.admitter.breakStream(true)
	waitMetricAbove(ctx, t, alreadyUngatedMetric, skipped)
	_, _, _, watches = s.admitter.snapshot()
	if len(watches) < initial+2 {
		t.Fatalf("%d WatchAdmissions calls, want at least %d", len(watches), initial+2)
	}
	for _, w := range watches[initial:] {
		if w.GetResumeRevision() != lastRev {
			t.Errorf("reconnect resumed from %q, want the last revision applied %q", w.GetResumeRevision(), lastRev)
		}
	}
	if n := podPatches(ctx, t) - before; n != 1 {
		t.Errorf("%v pod patches after repeated decisions and a snapshot, want 1", n)
	}
	if n := len(s.admitter.submissionsFor(name)); n != 1 {
		t.Errorf("%d submissions, want 1 (no resubmission of an unchanged pod)", n)
	}

	// Succeeded: the finish is reported, and only then the finalizer goes.
	s.admitter.setBlockReports(true)
	_, _, triesBefore, _ := s.admitter.snapshot()
	setPhase(ctx, t, pod.Name, corev1.PodSucceeded)
	waitFor(ctx, t, "report attempts while blocked", func() error {
		if _, _, tries, _ := s.admitter.snapshot(); tries < triesBefore+2 {
			return fmt.Errorf("%d report attempts", tries-triesBefore)
		}
		return nil
	})
	if p := getPod(ctx, t, pod.Name); !slices.Contains(p.Finalizers, podkeys.ManagedFinalizer) {
		t.Fatalf("finalizer removed although the report failed")
	}
	s.admitter.setBlockReports(false)
	waitPod(ctx, t, pod.Name, "finalizer removed", func(p *corev1.Pod) error {
		if slices.Contains(p.Finalizers, podkeys.ManagedFinalizer) {
			return errors.New("finalizer still there")
		}
		return nil
	})
	reports := s.admitter.reportsFor(name)
	if len(reports) != 1 || !reports[0].GetFinish().GetSucceeded() {
		t.Errorf("reports = %v, want one finish{succeeded: true}", reports)
	}
}

// TestGatedPodDeleted: a pod deleted before admission loses its finalizer
// and its submitted workload is reported finished so its quota is freed.
func TestGatedPodDeleted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pod := createPod(ctx, t, "deleted")
	name := workloadName(pod)
	waitFor(ctx, t, "the workload submitted", func() error {
		if len(s.admitter.submissionsFor(name)) == 0 {
			return errors.New("not submitted")
		}
		return nil
	})
	if err := s.cs.CoreV1().Pods(namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete pod: %v", err)
	}
	waitGone(ctx, t, pod.Name)
	reports := s.admitter.reportsFor(name)
	if len(reports) != 1 || reports[0].GetFinish() == nil || reports[0].GetFinish().GetSucceeded() {
		t.Errorf("reports = %v, want one finish{succeeded: false}", reports)
	}
}

// TestEvict: an evicted workload's ungated pod is marked and deleted, then
// released and reported failed; once no pod runs, the workload is reported
// stopped for the evicted reservation.
func TestEvict(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pod := createPod(ctx, t, "evicted")
	name := workloadName(pod)
	ref := &sluicev1.WorkloadRef{Namespace: namespace, Name: name}
	s.admitter.push(&admitterv1.Decision{Workload: ref, Action: admitterv1.Decision_ACTION_ADMIT, ClusterQueue: "cq", ReservationId: "r1"})
	waitPod(ctx, t, pod.Name, "ungated", func(p *corev1.Pod) error {
		if hasGate(p, podkeys.AdmissionGate) {
			return errors.New("still gated")
		}
		return nil
	})
	s.admitter.push(&admitterv1.Decision{Workload: ref, Action: admitterv1.Decision_ACTION_EVICT, ReservationId: "r1",
		Message: "preempted by a higher priority workload"})
	waitGone(ctx, t, pod.Name)
	waitFor(ctx, t, "a stop report", func() error { return stoppedReported(name, "r1") })
	var finishes []*admitterv1.ReportProgressRequest
	for _, r := range s.admitter.reportsFor(name) {
		if r.GetFinish() != nil {
			finishes = append(finishes, r)
		}
	}
	if len(finishes) != 1 || finishes[0].GetFinish().GetSucceeded() {
		t.Errorf("finish reports = %v, want one finish{succeeded: false}", finishes)
	}
	waitFor(ctx, t, "a Stopped event", func() error {
		return findEvent(ctx, pod.Name, "Stopped", "preempted")
	})
}

// stoppedReported says whether workload name was reported stopped for
// reservation, exactly once.
func stoppedReported(name, reservation string) error {
	n := 0
	for _, r := range s.admitter.reportsFor(name) {
		if r.GetStopped() != nil {
			if got := r.GetStopped().GetReservationId(); got != reservation {
				return fmt.Errorf("stopped reported for reservation %q, want %q", got, reservation)
			}
			n++
		}
	}
	if n != 1 {
		return fmt.Errorf("%d stop reports, want 1", n)
	}
	return nil
}

// TestEvictGatedPod: an eviction finds the pod still gated (the admission
// never reached it): nothing to stop, so the workload is reported stopped
// at once and the pod keeps waiting, gated, for the next admission.
func TestEvictGatedPod(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pod := createPod(ctx, t, "evicted-gated")
	name := workloadName(pod)
	waitFor(ctx, t, "the workload submitted", func() error {
		if len(s.admitter.submissionsFor(name)) == 0 {
			return errors.New("not submitted")
		}
		return nil
	})
	ref := &sluicev1.WorkloadRef{Namespace: namespace, Name: name, Uid: "wl-uid"}
	s.admitter.push(&admitterv1.Decision{Workload: ref, Action: admitterv1.Decision_ACTION_EVICT, ReservationId: "r7", Message: "deactivated"})
	waitFor(ctx, t, "a stop report", func() error { return stoppedReported(name, "r7") })
	p := getPod(ctx, t, pod.Name)
	if !hasGate(p, podkeys.AdmissionGate) || p.DeletionTimestamp != nil || !slices.Contains(p.Finalizers, podkeys.ManagedFinalizer) {
		t.Fatalf("pod after the eviction: gates %v, deleting %v, finalizers %v; want it untouched and gated",
			p.Spec.SchedulingGates, p.DeletionTimestamp != nil, p.Finalizers)
	}
	if got := s.admitter.reportsFor(name)[0].GetWorkload().GetUid(); got != "wl-uid" {
		t.Errorf("stop report names uid %q, want the decision's wl-uid", got)
	}
}

// TestDeleteDecision: a deleted Workload takes its gated pod with it; the
// pod is never submitted again, even after a new snapshot.
func TestDeleteDecision(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pod := createPod(ctx, t, "workload-deleted")
	name := workloadName(pod)
	waitFor(ctx, t, "the workload submitted", func() error {
		if len(s.admitter.submissionsFor(name)) == 0 {
			return errors.New("not submitted")
		}
		return nil
	})
	ref := &sluicev1.WorkloadRef{Namespace: namespace, Name: name}
	s.admitter.push(&admitterv1.Decision{Workload: ref, Action: admitterv1.Decision_ACTION_DELETE, Message: "the Workload was deleted"})
	waitGone(ctx, t, pod.Name)
	waitFor(ctx, t, "a stop report", func() error { return stoppedReported(name, "") })
	if err := findEvent(ctx, pod.Name, "Stopped", "the Workload was deleted"); err != nil {
		t.Error(err)
	}
	if n := len(s.admitter.submissionsFor(name)); n != 1 {
		t.Errorf("workload submitted %d times, want once: a deleted workload is never submitted again", n)
	}
	s.admitter.push(&admitterv1.Decision{Workload: ref, Action: admitterv1.Decision_ACTION_FORGET})
}

// TestQueueChange: moving a gated pod to another LocalQueue moves its
// workload there (UpdateWorkload), not a second submission path.
func TestQueueChange(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pod := createPod(ctx, t, "moved")
	name := workloadName(pod)
	waitFor(ctx, t, "the workload submitted", func() error {
		if len(s.admitter.submissionsFor(name)) == 0 {
			return errors.New("not submitted")
		}
		return nil
	})
	patch := []byte(`{"metadata":{"labels":{"` + podkeys.QueueNameLabel + `":"other-queue"}}}`)
	if _, err := s.cs.CoreV1().Pods(namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("change queue: %v", err)
	}
	waitFor(ctx, t, "the workload moved", func() error {
		ups := s.admitter.updatesFor(name)
		if len(ups) != 1 || ups[0].GetQueueName() != "other-queue" {
			return fmt.Errorf("updates = %v, want one to other-queue", ups)
		}
		return nil
	})
}

// TestSnapshotResubmits: after a snapshot (a new admitter epoch) every
// gated pod without a decision is submitted again, so a submission the
// admitter lost is never lost for good.
func TestSnapshotResubmits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pod := createPod(ctx, t, "resubmitted")
	name := workloadName(pod)
	waitFor(ctx, t, "the workload submitted", func() error {
		if len(s.admitter.submissionsFor(name)) == 0 {
			return errors.New("not submitted")
		}
		return nil
	})
	s.admitter.breakStream(true)
	waitFor(ctx, t, "the workload submitted again", func() error {
		if n := len(s.admitter.submissionsFor(name)); n < 2 {
			return fmt.Errorf("%d submissions", n)
		}
		return nil
	})
}

func createPod(ctx context.Context, t *testing.T, name string) *corev1.Pod {
	t.Helper()
	return createPodObject(ctx, t, newPod(name))
}

// newPod is a gated, managed pod as the webhook leaves it.
func newPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: namespace,
			Labels: map[string]string{
				podkeys.ManagedLabel:   podkeys.ManagedLabelValue,
				podkeys.QueueNameLabel: "user-queue",
				"app":                  "demo",
			},
			Annotations: map[string]string{
				podkeys.RoleHashAnnotation:    "0123abcd",
				podkeys.TraceparentAnnotation: traceparent,
			},
			Finalizers: []string{podkeys.ManagedFinalizer},
		},
		Spec: corev1.PodSpec{
			SchedulingGates: []corev1.PodSchedulingGate{{Name: podkeys.AdmissionGate}, {Name: foreignGate}},
			NodeSelector:    map[string]string{"disk": "ssd"},
			InitContainers: []corev1.Container{{Name: "init", Image: "busybox", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")},
			}}},
			Containers: []corev1.Container{{Name: "main", Image: "busybox", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
			}}},
		},
	}
}

func createPodObject(ctx context.Context, t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	created, err := s.cs.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s: %v", pod.Name, err)
	}
	t.Cleanup(func() { releasePod(t, pod.Namespace, pod.Name) })
	return created
}

// releasePod deletes a test pod and drops the finalizer should the
// grouper not have done so (on failure), so the namespace stays clean.
func releasePod(t *testing.T, ns, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pods := s.cs.CoreV1().Pods(ns)
	_ = pods.Delete(ctx, name, metav1.DeleteOptions{})
	p, err := pods.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return
	}
	if i := slices.Index(p.Finalizers, podkeys.ManagedFinalizer); i >= 0 {
		p.Finalizers = slices.Delete(p.Finalizers, i, i+1)
		if _, err := pods.Update(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Logf("release pod %s: %v", name, err)
		}
	}
}

// workloadName is the single-pod workload name, computed independently.
func workloadName(pod *corev1.Pod) string {
	sum := sha256.Sum256([]byte(pod.Name + "/" + string(pod.UID)))
	return "pod-" + pod.Name + "-" + hex.EncodeToString(sum[:])[:5]
}

// podPatches counts PATCH requests on pods (not their status) the API
// server has served.
func podPatches(ctx context.Context, t *testing.T) float64 {
	t.Helper()
	counts, err := s.env.RequestCounts(ctx)
	if err != nil {
		t.Fatalf("API server request counts: %v", err)
	}
	var n float64
	for _, c := range counts {
		if c.Verb == "PATCH" && c.Resource == "pods" && c.Group == "" && c.Subresource == "" {
			n += c.Count
		}
	}
	return n
}

func grouperMetric(ctx context.Context, t *testing.T, name string) float64 {
	t.Helper()
	v, err := metric(ctx, s.grouper, name)
	if err != nil {
		t.Fatalf("grouper metric %s: %v", name, err)
	}
	return v
}

func waitMetricAbove(ctx context.Context, t *testing.T, name string, above float64) {
	t.Helper()
	waitFor(ctx, t, name+" above "+fmt.Sprint(above), func() error {
		v, err := metric(ctx, s.grouper, name)
		if err != nil {
			return err
		}
		if v <= above {
			return fmt.Errorf("%s = %v", name, v)
		}
		return nil
	})
}

func getPod(ctx context.Context, t *testing.T, name string) *corev1.Pod {
	t.Helper()
	p, err := s.cs.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pod %s: %v", name, err)
	}
	return p
}

func waitPod(ctx context.Context, t *testing.T, name, what string, cond func(*corev1.Pod) error) *corev1.Pod {
	t.Helper()
	var last *corev1.Pod
	waitFor(ctx, t, "pod "+name+" "+what, func() error {
		p, err := s.cs.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		last = p
		return cond(p)
	})
	return last
}

func waitGone(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	waitFor(ctx, t, "pod "+name+" gone", func() error {
		_, err := s.cs.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return errors.New("pod still exists")
	})
}

func setPhase(ctx context.Context, t *testing.T, name string, phase corev1.PodPhase) {
	t.Helper()
	p := getPod(ctx, t, name)
	p.Status.Phase = phase
	if _, err := s.cs.CoreV1().Pods(namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("set phase of pod %s: %v", name, err)
	}
}

// findEvent looks for an event on pod with reason whose note contains text.
func findEvent(ctx context.Context, pod, reason, text string) error {
	list, err := s.cs.EventsV1().Events(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, e := range list.Items {
		if e.Regarding.Name == pod && e.Reason == reason && strings.Contains(e.Note, text) {
			return nil
		}
	}
	return fmt.Errorf("no %s event containing %q on pod %s among %d events", reason, text, pod, len(list.Items))
}

func hasGate(p *corev1.Pod, gate string) bool {
	return slices.ContainsFunc(p.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == gate })
}

func countTolerations(p *corev1.Pod, key string) int {
	n := 0
	for _, tol := range p.Spec.Tolerations {
		if tol.Key == key {
			n++
		}
	}
	return n
}

func waitFor(ctx context.Context, t *testing.T, what string, f func() error) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := harness.Poll(wctx, f); err != nil {
		t.Fatalf("waiting for %s: %v\ngrouper log:\n%s", what, err, s.grouper.Tail(40))
	}
}

// TestNotReadyWithoutAdmitter: a grouper whose admitter is unreachable is
// alive but not ready, says why, and stops cleanly on SIGTERM.
func TestNotReadyWithoutAdmitter(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admitterAddr, err := harness.FreeAddr() // nothing listens there
	if err != nil {
		t.Fatal(err)
	}
	p, err := startGrouper(filepath.Join(t.TempDir(), "grouper.log"),
		"--kubeconfig", s.env.Kubeconfig,
		"--admitter-addr", admitterAddr,
		"--shard-index", "1", "--shard-count", "2",
		"--log-format", "text")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := p.Stop(10 * time.Second); err != nil {
			t.Errorf("grouper did not stop cleanly on SIGTERM: %v\n%s", err, p.Tail(40))
		}
	}()
	waitFor(ctx, t, "healthz up and readyz failing on the stream only", func() error {
		if _, code, err := p.Get(ctx, "/healthz"); err != nil || code != http.StatusOK {
			return fmt.Errorf("/healthz %d %v", code, err)
		}
		body, code, err := p.Get(ctx, "/readyz")
		if err != nil {
			return err
		}
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "decision-stream") || strings.Contains(body, "pod cache not synced") {
			return fmt.Errorf("/readyz %d %q, want 503 naming only the decision stream", code, body)
		}
		return nil
	})
}

// TestBadFlags: invalid flags stop the grouper with an error naming them.
func TestBadFlags(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{args: []string{"--shard-index", "2", "--shard-count", "2"}, want: "--shard-index/--shard-count"},
		{args: []string{"--workers", "0"}, want: "--workers"},
	}
	for _, tt := range tests {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := exec.CommandContext(ctx, s.bin, append([]string{"--kubeconfig", s.env.Kubeconfig, "--http-addr", "127.0.0.1:0"}, tt.args...)...).CombinedOutput()
		cancel()
		if err == nil || !strings.Contains(string(out), tt.want) {
			t.Errorf("grouper %v: err %v, output %q; want a failure naming %s", tt.args, err, out, tt.want)
		}
	}
}

// TestReleaseAll: the emergency command removes sluice's gate and
// finalizer, and nothing else, from the managed pods of a namespace; a dry
// run changes nothing.
func TestReleaseAll(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pod := createPod(ctx, t, "stranded")
	run := func(extra ...string) string {
		t.Helper()
		args := append([]string{"release-all", "--kubeconfig", s.env.Kubeconfig, "--namespace", namespace}, extra...)
		out, err := exec.CommandContext(ctx, s.bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("grouper %v: %v\n%s", args, err, out)
		}
		return string(out)
	}

	if out := run("--dry-run"); !strings.Contains(out, "would release "+namespace+"/"+pod.Name) {
		t.Errorf("dry run output %q does not name the pod", out)
	}
	if p := getPod(ctx, t, pod.Name); !hasGate(p, podkeys.AdmissionGate) || !slices.Contains(p.Finalizers, podkeys.ManagedFinalizer) {
		t.Fatalf("dry run changed the pod: gates %v, finalizers %v", p.Spec.SchedulingGates, p.Finalizers)
	}

	out := run()
	if !strings.Contains(out, "released "+namespace+"/"+pod.Name) {
		t.Errorf("output %q does not name the pod", out)
	}
	p := getPod(ctx, t, pod.Name)
	if hasGate(p, podkeys.AdmissionGate) || slices.Contains(p.Finalizers, podkeys.ManagedFinalizer) {
		t.Errorf("after release: gates %v, finalizers %v", p.Spec.SchedulingGates, p.Finalizers)
	}
	if !hasGate(p, foreignGate) {
		t.Errorf("foreign gate removed: %v", p.Spec.SchedulingGates)
	}
	if out := run(); !strings.Contains(out, "released 0") {
		t.Errorf("second run output %q, want nothing released", out)
	}
}
