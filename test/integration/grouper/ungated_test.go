package grouper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	watchtools "k8s.io/client-go/tools/watch"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	sluicev1 "github.com/sluice-dev/sluice/gen/sluice/v1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
)

// Pods ungated by someone else (docs/grouper.md). The API server of this
// suite runs without sluice's admission policies, so the admin client may
// remove sluice's gate as anyone who got past them would.

const (
	ungatedStoppedMetric  = `sluice_grouper_pods_ungated_without_admission_total{result="stopped"}`
	ungatedReleasedMetric = `sluice_grouper_pods_ungated_without_admission_total{result="released"}`
	podsEvictedMetric     = "sluice_grouper_pods_evicted_total"

	// roleHash is the pod set of the groups of newPod's pods.
	roleHash = "0123abcd"
	// kueueNamespace holds the pods of Kueue's pod integration.
	kueueNamespace = "kueue-pods"
)

// TestPodsUngatedWithoutAdmissionStopped: a managed pod someone else
// ungated, a single pod or a group member, with no decision or under an
// admission, is stopped as an evicted pod is (marked DisruptionTarget by
// sluice, then deleted) with one Warning event that says why and what to
// do instead, and counted as a stop, not as an eviction.
func TestPodsUngatedWithoutAdmissionStopped(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admit := func(p *corev1.Pod) *admitterv1.Decision { return decisionFor(p, admitterv1.Decision_ACTION_ADMIT) }
	tests := []struct {
		name   string
		ungate func() *corev1.Pod // returns the pod as ungated by someone else
	}{
		{"a single pod", func() *corev1.Pod {
			pod := createPodObject(ctx, t, ungatablePod("ungated-single"))
			waitSubmitted(ctx, t, workloadName(pod))
			return ungatedBySomeoneElse(ctx, t, pod)
		}},
		{"a single pod under an admission", func() *corev1.Pod {
			return ungatedUnder(ctx, t, ungatablePod("ungated-single-admitted"), admit)
		}},
		{"a group member", func() *corev1.Pod {
			return ungatedBySomeoneElse(ctx, t, createPodObject(ctx, t, inGroup(ungatablePod("ungated-member"), "ungated-group", 2)))
		}},
		{"a group member under an admission", func() *corev1.Pod {
			return ungatedUnder(ctx, t, inGroup(ungatablePod("ungated-member-admitted"), "ungated-group-admitted", 2), admit)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stopsBefore := grouperMetric(ctx, t, ungatedStoppedMetric)
			evictionsBefore := grouperMetric(ctx, t, podsEvictedMetric)
			ungated := tt.ungate()

			stopped := waitStopped(ctx, t, ungated)
			if c := disruption(stopped); c == nil || !strings.Contains(c.Message, podkeys.AdmissionGate+" was removed without an admission") {
				t.Errorf("pod deleted with conditions %v; want DisruptionTarget by sluice, saying the gate was removed without an admission",
					stopped.Status.Conditions)
			}
			oneEvent(ctx, t, ungated, corev1.EventTypeWarning, "UngatedWithoutAdmission",
				podkeys.AdmissionGate, "without an admission", "as it stops an evicted pod", "grouper release-all", podkeys.ManagedFinalizer)
			if stops, evictions := grouperMetric(ctx, t, ungatedStoppedMetric), grouperMetric(ctx, t, podsEvictedMetric); stops != stopsBefore+1 || evictions != evictionsBefore {
				t.Errorf("%v stops and %v evictions counted, want 1 and 0", stops-stopsBefore, evictions-evictionsBefore)
			}
		})
	}
}

// TestStopDecisionsGoFirst: an evicted or deleted workload's pod that
// someone else ungated is stopped the decision's way, with the Normal
// Stopped event, and counted as an eviction, not as a pod ungated without
// an admission.
func TestStopDecisionsGoFirst(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, action := range []admitterv1.Decision_Action{admitterv1.Decision_ACTION_EVICT, admitterv1.Decision_ACTION_DELETE} {
		t.Run(action.String(), func(t *testing.T) {
			stopsBefore := grouperMetric(ctx, t, ungatedStoppedMetric)
			evictionsBefore := grouperMetric(ctx, t, podsEvictedMetric)
			why := "stopped by the test's " + action.String()
			name := "ungated-" + strings.ToLower(strings.TrimPrefix(action.String(), "ACTION_"))
			ungated := ungatedUnder(ctx, t, ungatablePod(name), func(p *corev1.Pod) *admitterv1.Decision {
				d := decisionFor(p, action)
				d.Message = why
				return d
			})

			stopped := waitStopped(ctx, t, ungated)
			if c := disruption(stopped); c == nil || c.Message != why {
				t.Errorf("pod deleted with conditions %v; want DisruptionTarget by sluice, saying %q", stopped.Status.Conditions, why)
			}
			oneEvent(ctx, t, ungated, corev1.EventTypeNormal, "Stopped", why)
			if stops, evictions := grouperMetric(ctx, t, ungatedStoppedMetric), grouperMetric(ctx, t, podsEvictedMetric); stops != stopsBefore || evictions != evictionsBefore+1 {
				t.Errorf("%v stops and %v evictions counted, want 0 and 1", stops-stopsBefore, evictions-evictionsBefore)
			}
		})
	}
}

// TestReleasedPodsLeftAlone: a pod whose gate and finalizer someone else
// removed together, as grouper release-all does, is sluice's no more: it
// is counted once as released, however often the grouper looks at it,
// and never written.
func TestReleasedPodsLeftAlone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	t.Run("a single pod", func(t *testing.T) {
		releasesBefore := grouperMetric(ctx, t, ungatedReleasedMetric)
		stopsBefore := grouperMetric(ctx, t, ungatedStoppedMetric)
		pod := createPodObject(ctx, t, ungatablePod("released-single"))
		name := workloadName(pod)
		waitSubmitted(ctx, t, name)
		released := patchPod(ctx, t, pod, gateRemoval(t, pod), finalizerRemoval(t, pod))
		waitMetricAbove(ctx, t, ungatedReleasedMetric, releasesBefore)

		// The grouper looks again at each change of the pod. Under an
		// admission with a start-up deadline it reports the started pods
		// after each look that lets the pod run, which shows it looked.
		d := decisionFor(pod, admitterv1.Decision_ACTION_ADMIT)
		d.StartBy = timestamppb.New(time.Now().Add(10 * time.Minute))
		s.admitter.push(d)
		bindPod(ctx, t, released)
		waitStarted(ctx, t, name, "main", 1, 1, 0)
		last := setReady(ctx, t, released)
		waitStarted(ctx, t, name, "main", 2, 1, 1)

		leftAlone(ctx, t, last)
		if releases, stops := grouperMetric(ctx, t, ungatedReleasedMetric), grouperMetric(ctx, t, ungatedStoppedMetric); releases != releasesBefore+1 || stops != stopsBefore {
			t.Errorf("%v releases and %v stops counted, want 1 and 0", releases-releasesBefore, stops-stopsBefore)
		}
	})

	t.Run("a group member", func(t *testing.T) {
		releasesBefore := grouperMetric(ctx, t, ungatedReleasedMetric)
		stopsBefore := grouperMetric(ctx, t, ungatedStoppedMetric)
		pod := createPodObject(ctx, t, inGroup(ungatablePod("released-member"), "released-group", 2))
		released := patchPod(ctx, t, pod, gateRemoval(t, pod), finalizerRemoval(t, pod))
		// Counted in the look that would otherwise have stopped it.
		waitMetricAbove(ctx, t, ungatedReleasedMetric, releasesBefore)

		leftAlone(ctx, t, released)
		if releases, stops := grouperMetric(ctx, t, ungatedReleasedMetric), grouperMetric(ctx, t, ungatedStoppedMetric); releases != releasesBefore+1 || stops != stopsBefore {
			t.Errorf("%v releases and %v stops counted, want 1 and 0", releases-releasesBefore, stops-stopsBefore)
		}
	})
}

// TestKueuePodsNeverStopped: Kueue's pod integration, on a namespace of
// its own, labels, gates and finalizes its pods with the keys sluice
// shares with it, but not with sluice.dev/traceparent: a pod Kueue
// ungates is not one sluice gated, and it runs on.
func TestKueuePodsNeverStopped(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: kueueNamespace}}
	if _, err := s.cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create namespace: %v", err)
	}
	stopsBefore := grouperMetric(ctx, t, ungatedStoppedMetric)
	pod := ungatablePod("kueue-pod")
	pod.Namespace = kueueNamespace
	pod.Annotations = nil // sluice's webhook wrote none of them
	pod = createPodObject(ctx, t, pod)
	// The grouper takes a gated pod of Kueue's for its own (docs/grouper.md,
	// Not done yet) and submits it: it has seen the pod.
	name := workloadName(pod)
	waitSubmitted(ctx, t, name)

	// Kueue admits the pod and ungates it, and the scheduler binds it.
	bound := bindPod(ctx, t, ungatedBySomeoneElse(ctx, t, pod))
	// An admission with a start-up deadline of the workload the grouper
	// submitted makes it report the pod started, which it does only after
	// a look that lets the pod run.
	d := decisionFor(pod, admitterv1.Decision_ACTION_ADMIT)
	d.StartBy = timestamppb.New(time.Now().Add(10 * time.Minute))
	s.admitter.push(d)
	waitStarted(ctx, t, name, "main", 1, 1, 0)

	leftAlone(ctx, t, bound)
	if stops := grouperMetric(ctx, t, ungatedStoppedMetric); stops != stopsBefore {
		t.Errorf("%v stops counted, want 0", stops-stopsBefore)
	}
}

// TestUngatedBySluiceLeftAloneAfterRestart: a pod sluice ungated, a single
// pod or a group member, carries sluice.dev/workload, which tells a
// grouper that remembers nothing of it (a new process) that it was
// admitted: it runs on.
func TestUngatedBySluiceLeftAloneAfterRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	single := createPodObject(ctx, t, ungatablePod("sluice-ungated-single"))
	member := createPodObject(ctx, t, inGroup(ungatablePod("sluice-ungated-member"), "sluice-ungated-group", 1))
	workloads := []struct {
		pod          *corev1.Pod
		name, podSet string
	}{{single, workloadName(single), "main"}, {member, "sluice-ungated-group", roleHash}}

	startBy := timestamppb.New(time.Now().Add(10 * time.Minute))
	for _, w := range workloads {
		waitSubmitted(ctx, t, w.name)
		// The deadline makes the grouper report the pods started after
		// each look that lets them run, and again after a restart.
		d := decisionFor(w.pod, admitterv1.Decision_ACTION_ADMIT)
		d.StartBy = startBy
		s.admitter.push(d)
	}
	var running []*corev1.Pod
	for _, w := range workloads {
		ungated := waitPod(ctx, t, w.pod.Name, "ungated by sluice", func(p *corev1.Pod) error {
			if hasGate(p, podkeys.AdmissionGate) || p.Annotations[podkeys.WorkloadAnnotation] != w.name {
				return fmt.Errorf("gates %v, annotation %s %q", p.Spec.SchedulingGates, podkeys.WorkloadAnnotation, p.Annotations[podkeys.WorkloadAnnotation])
			}
			return nil
		})
		running = append(running, bindPod(ctx, t, ungated))
		waitStarted(ctx, t, w.name, w.podSet, 1, 1, 0)
	}

	restartGrouper(ctx, t)
	for _, w := range workloads {
		waitStarted(ctx, t, w.name, w.podSet, 2, 1, 0)
	}
	for _, p := range running {
		leftAlone(ctx, t, p)
	}
	if stops := grouperMetric(ctx, t, ungatedStoppedMetric); stops != 0 {
		t.Errorf("the restarted grouper counted %v stops, want 0", stops)
	}
}

// ungatablePod is a gated, managed pod as the webhook leaves it, held by
// sluice's gate alone: without it, it may be bound to a node.
func ungatablePod(name string) *corev1.Pod {
	pod := newPod(name)
	pod.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: podkeys.AdmissionGate}}
	return pod
}

// inGroup makes pod a member of pod group group of total pods.
func inGroup(pod *corev1.Pod, group string, total int) *corev1.Pod {
	pod.Labels[podkeys.PodGroupNameLabel] = group
	pod.Annotations[podkeys.PodGroupTotalCountAnnotation] = strconv.Itoa(total)
	return pod
}

// decisionFor is a decision with action on pod's workload: its own as a
// single pod, or its group's, with every pod the group wants.
func decisionFor(pod *corev1.Pod, action admitterv1.Decision_Action) *admitterv1.Decision {
	name, podSet, count := workloadName(pod), "main", int32(1)
	if group := pod.Labels[podkeys.PodGroupNameLabel]; group != "" {
		total, _ := strconv.Atoi(pod.Annotations[podkeys.PodGroupTotalCountAnnotation])
		name, podSet, count = group, pod.Annotations[podkeys.RoleHashAnnotation], int32(total)
	}
	return &admitterv1.Decision{
		Workload:      &sluicev1.WorkloadRef{Namespace: pod.Namespace, Name: name, Uid: "wl-uid"},
		Action:        action,
		ClusterQueue:  "cq",
		ReservationId: "r1",
		PodSetCounts:  map[string]int32{podSet: count},
	}
}

// pushApplied pushes d and returns once the grouper holds it. The grouper
// applies the stream's batches one at a time, in order, and counts each
// decision in sluice_grouper_decisions_total as it receives it: once it
// has counted d pushed a second time, it has applied d.
func pushApplied(ctx context.Context, t *testing.T, d *admitterv1.Decision) {
	t.Helper()
	series := fmt.Sprintf("sluice_grouper_decisions_total{action=%q}", d.GetAction().String())
	before := grouperMetric(ctx, t, series)
	s.admitter.push(d)
	s.admitter.push(d)
	waitMetricAbove(ctx, t, series, before+1)
}

// ungatedUnder shows the grouper pod ungated by someone else while the
// decision decide makes for the created pod is in force, and returns the
// pod as patched. Seen gated under an admission, or under a deleted
// Workload, pod would be ungated, or deleted, before anyone else could
// ungate it; so it is created without the managed label, which keeps it
// out of the grouper's cache (the cache holds managed pods only), and
// once the decision is in force one JSON patch labels it managed and
// removes sluice's gate.
func ungatedUnder(ctx context.Context, t *testing.T, pod *corev1.Pod, decide func(*corev1.Pod) *admitterv1.Decision) *corev1.Pod {
	t.Helper()
	delete(pod.Labels, podkeys.ManagedLabel)
	created := createPodObject(ctx, t, pod)
	pushApplied(ctx, t, decide(created))
	label := jsonOp{Op: "add", Path: "/metadata/labels/" + jsonPointerEscape(podkeys.ManagedLabel), Value: podkeys.ManagedLabelValue}
	return patchPod(ctx, t, created, []jsonOp{label}, gateRemoval(t, created))
}

// ungatedBySomeoneElse removes sluice's gate alone from pod, as a kubectl
// patch would, and returns the pod as patched.
func ungatedBySomeoneElse(ctx context.Context, t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	return patchPod(ctx, t, pod, gateRemoval(t, pod))
}

// jsonOp is one operation of a JSON patch (RFC 6902).
type jsonOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value string `json:"value,omitempty"`
}

func jsonPointerEscape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// gateRemoval removes sluice's gate from pod; the patch fails should the
// gates have changed since pod was read.
func gateRemoval(t *testing.T, pod *corev1.Pod) []jsonOp {
	t.Helper()
	i := slices.IndexFunc(pod.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == podkeys.AdmissionGate })
	if i < 0 {
		t.Fatalf("pod %s has no gate %s: %v", pod.Name, podkeys.AdmissionGate, pod.Spec.SchedulingGates)
	}
	path := fmt.Sprintf("/spec/schedulingGates/%d", i)
	return []jsonOp{{Op: "test", Path: path + "/name", Value: podkeys.AdmissionGate}, {Op: "remove", Path: path}}
}

// finalizerRemoval removes sluice's finalizer from pod; the patch fails
// should the finalizers have changed since pod was read.
func finalizerRemoval(t *testing.T, pod *corev1.Pod) []jsonOp {
	t.Helper()
	i := slices.Index(pod.Finalizers, podkeys.ManagedFinalizer)
	if i < 0 {
		t.Fatalf("pod %s has no finalizer %s: %v", pod.Name, podkeys.ManagedFinalizer, pod.Finalizers)
	}
	path := fmt.Sprintf("/metadata/finalizers/%d", i)
	return []jsonOp{{Op: "test", Path: path, Value: podkeys.ManagedFinalizer}, {Op: "remove", Path: path}}
}

// patchPod applies the operations to pod in one JSON patch with the admin
// client and returns the pod as patched.
func patchPod(ctx context.Context, t *testing.T, pod *corev1.Pod, ops ...[]jsonOp) *corev1.Pod {
	t.Helper()
	patch, err := json.Marshal(slices.Concat(ops...))
	if err != nil {
		t.Fatal(err)
	}
	patched, err := s.cs.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.JSONPatchType, patch, metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("patch pod %s with %s: %v", pod.Name, patch, err)
	}
	return patched
}

// waitStopped watches pod from the version given until it is being
// deleted, and returns it as it was then: the grouper may release it, and
// the pod go, right after.
func waitStopped(ctx context.Context, t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	w, err := s.cs.CoreV1().Pods(pod.Namespace).Watch(wctx, metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", pod.Name).String(),
		ResourceVersion: pod.ResourceVersion,
	})
	if err != nil {
		t.Fatalf("watch pod %s: %v", pod.Name, err)
	}
	var deleting *corev1.Pod
	_, err = watchtools.UntilWithoutRetry(wctx, w, func(e watch.Event) (bool, error) {
		p, ok := e.Object.(*corev1.Pod)
		if !ok {
			return false, fmt.Errorf("watch event %s: %v", e.Type, e.Object)
		}
		if p.DeletionTimestamp != nil {
			deleting = p
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("waiting for pod %s to be deleted: %v\ngrouper log:\n%s", pod.Name, err, s.grouper.Tail(40))
	}
	return deleting
}

// disruption returns the DisruptionTarget condition sluice sets on the
// pods it stops; nil when pod has none.
func disruption(pod *corev1.Pod) *corev1.PodCondition {
	for i, c := range pod.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue && c.Reason == "EvictedBySluice" {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

// podEvents lists the events regarding pod (this pod, not an earlier one
// of its name).
func podEvents(ctx context.Context, pod *corev1.Pod) ([]eventsv1.Event, error) {
	list, err := s.cs.EventsV1().Events(pod.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.UID == pod.UID {
			out = append(out, e)
		}
	}
	return out, nil
}

// oneEvent waits for an event on pod and checks that it is the only one
// and of eventType and reason, and that its note says each of says.
// Another of the same would have made it a series.
func oneEvent(ctx context.Context, t *testing.T, pod *corev1.Pod, eventType, reason string, says ...string) {
	t.Helper()
	var evs []eventsv1.Event
	waitFor(ctx, t, "an event on pod "+pod.Name, func() error {
		var err error
		if evs, err = podEvents(ctx, pod); err == nil && len(evs) == 0 {
			err = errors.New("no event")
		}
		return err
	})
	if len(evs) != 1 || evs[0].Type != eventType || evs[0].Reason != reason || evs[0].Series != nil {
		t.Fatalf("events on pod %s: %s; want one %s %s", pod.Name, describeEvents(evs), eventType, reason)
	}
	for _, want := range says {
		if !strings.Contains(evs[0].Note, want) {
			t.Errorf("event note %q does not say %q", evs[0].Note, want)
		}
	}
}

// leftAlone checks that nothing wrote pod since the version given (the
// grouper did not mark it, delete it or release it) and that no event
// regards it.
func leftAlone(ctx context.Context, t *testing.T, pod *corev1.Pod) {
	t.Helper()
	cur, err := s.cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pod %s: %v", pod.Name, err)
	}
	if cur.ResourceVersion != pod.ResourceVersion {
		t.Errorf("pod %s written: resourceVersion %s, was %s; DisruptionTarget %v, deleting %v, finalizers %v",
			pod.Name, cur.ResourceVersion, pod.ResourceVersion, disruption(cur) != nil, cur.DeletionTimestamp != nil, cur.Finalizers)
	}
	evs, err := podEvents(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) > 0 {
		t.Errorf("events on pod %s: %s; want none", pod.Name, describeEvents(evs))
	}
}

func describeEvents(evs []eventsv1.Event) string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = fmt.Sprintf("%s %s %q (series %v)", e.Type, e.Reason, e.Note, e.Series)
	}
	return fmt.Sprint(out)
}

// waitSubmitted waits until the grouper has submitted workload name.
func waitSubmitted(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	waitFor(ctx, t, "workload "+name+" submitted", func() error {
		if len(s.admitter.submissionsFor(name)) == 0 {
			return errors.New("not submitted")
		}
		return nil
	})
}
