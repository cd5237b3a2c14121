package grouper

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/utils/ptr"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	sluicev1 "github.com/sluice-dev/sluice/gen/sluice/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/pkg/podset"
	"github.com/sluice-dev/sluice/pkg/rolehash"
)

// A pod runs only in a pod set it fits (docs/grouper.md): a gated pod
// changed since its pod set was built is not ungated under the
// admission, and says why, once; a pod of a declared group not shaped
// like its set asks the admitter to join, whatever annotation it copies.

const reasonPodSetMismatch = "PodSetMismatch"

// roleHashes is the role hash of each pod set of a submission, as the
// admitter's decisions carry them.
func roleHashes(sub recordedSubmit) map[string]string {
	out := map[string]string{}
	for _, ps := range sub.req.GetWorkload().GetPodSets() {
		out[ps.GetName()] = ps.GetRoleHash()
	}
	return out
}

// admitAsSubmitted is the admission of the workload sub submitted, with
// the Workload's uid, and what the admitter carries for the grouper to
// check every pod against: queue, priority and role hashes.
func admitAsSubmitted(sub recordedSubmit, uid types.UID) *admitterv1.Decision {
	wl := sub.req.GetWorkload()
	d := &admitterv1.Decision{
		Workload:         &sluicev1.WorkloadRef{Namespace: namespace, Name: wl.GetRef().GetName(), Uid: string(uid)},
		Action:           admitterv1.Decision_ACTION_ADMIT,
		ClusterQueue:     "cq",
		ReservationId:    "r1",
		QueueName:        wl.GetQueueName(),
		Priority:         ptr.To(wl.GetPriority()),
		PodSetRoleHashes: roleHashes(sub),
		PodSetCounts:     map[string]int32{},
	}
	for _, ps := range wl.GetPodSets() {
		d.PodSetCounts[ps.GetName()] = ps.GetCount()
		d.PodSetInfos = append(d.PodSetInfos, &sluicev1.PodSetInfo{Name: ps.GetName()})
	}
	return d
}

// createWorkloadAsSubmitted creates in the API server the Workload the
// admitter would have made of sub (the fake admitter makes none): the
// grouper reads it to name what changed in a pod that no longer fits.
func createWorkloadAsSubmitted(ctx context.Context, t *testing.T, sub recordedSubmit) *v1alpha1.Workload {
	t.Helper()
	k8s := s.k8s
	in := sub.req.GetWorkload()
	wl := &v1alpha1.Workload{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: in.GetRef().GetName()},
		Spec:       v1alpha1.WorkloadSpec{QueueName: in.GetQueueName()},
	}
	for _, ps := range in.GetPodSets() {
		tmpl := v1alpha1.PodSetTemplate{RoleHash: ps.GetRoleHash(), NodeSelector: ps.GetNodeSelector(),
			Tolerations: podset.TolerationsFromProto(ps.GetTolerations()), Requests: corev1.ResourceList{}}
		for name, q := range ps.GetRequests() {
			tmpl.Requests[corev1.ResourceName(name)] = resource.MustParse(q)
		}
		wl.Spec.PodSets = append(wl.Spec.PodSets, v1alpha1.PodSet{Name: ps.GetName(), Count: ps.GetCount(), Template: tmpl})
	}
	if err := k8s.Create(ctx, wl); err != nil {
		t.Fatalf("create Workload %s: %v", wl.Name, err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), wl) })
	return wl
}

// mergePatchPod applies a merge patch to pod's spec as its owner would.
func mergePatchPod(ctx context.Context, t *testing.T, name, patch string) *corev1.Pod {
	t.Helper()
	p, err := s.cs.CoreV1().Pods(namespace).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("patch pod %s with %s: %v", name, patch, err)
	}
	return p
}

// seenByGrouper returns once the grouper's pod cache holds every pod
// change made before it: it creates a pod and waits for its submission.
// The cache follows pods through one watch, in order, so the earlier
// changes reached it first.
func seenByGrouper(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	waitSubmitted(ctx, t, workloadName(createPod(ctx, t, name)))
}

func gated(p *corev1.Pod) error {
	if !hasGate(p, podkeys.AdmissionGate) {
		return fmt.Errorf("ungated: gates %v", p.Spec.SchedulingGates)
	}
	return nil
}

func ungated(p *corev1.Pod) error {
	if hasGate(p, podkeys.AdmissionGate) {
		return fmt.Errorf("still gated: gates %v", p.Spec.SchedulingGates)
	}
	return nil
}

// TestFitSinglePodChangedAfterSubmission: a single pod whose node selector
// grew after its workload was submitted is not ungated under the
// admission; one Warning names the field with both values, and a repeated
// decision tells nothing again. An admission of the pod as it is now
// ungates it.
func TestFitSinglePodChangedAfterSubmission(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout*3)
	defer cancel()
	pod := newPod("fit-single")
	delete(pod.Annotations, podkeys.RoleHashAnnotation) // hashed as the webhook would
	pod = createPodObject(ctx, t, pod)
	name := workloadName(pod)
	waitSubmitted(ctx, t, name)
	sub := s.admitter.submissionsFor(name)[0]
	wl := createWorkloadAsSubmitted(ctx, t, sub)

	changed := mergePatchPod(ctx, t, pod.Name, `{"spec":{"nodeSelector":{"zone":"b"}}}`)
	seenByGrouper(ctx, t, "fit-single-barrier")
	admit := admitAsSubmitted(sub, wl.UID)
	pushApplied(ctx, t, admit)
	oneEvent(ctx, t, changed, "Warning", reasonPodSetMismatch,
		"not ungated", "pod set main of workload "+name, "nodeSelector: pod {disk=ssd, zone=b}, pod set {disk=ssd}")
	if p := getPod(ctx, t, pod.Name); gated(p) != nil {
		t.Fatalf("pod changed since its pod set was built was ungated: %v", gated(p))
	}

	// The same admission again: the pod stays gated, nothing told again.
	pushApplied(ctx, t, admit)
	oneEvent(ctx, t, changed, "Warning", reasonPodSetMismatch)

	// An admission of the pod as it is now (its workload built again):
	// looked at again, it fits.
	now, err := rolehash.Compute(&getPod(ctx, t, pod.Name).Spec)
	if err != nil {
		t.Fatal(err)
	}
	again := admitAsSubmitted(sub, wl.UID)
	again.ReservationId, again.PodSetRoleHashes = "r2", map[string]string{"main": now}
	s.admitter.push(again)
	p := waitPod(ctx, t, pod.Name, "ungated once admitted as it is", ungated)
	if p.Spec.NodeSelector["zone"] != "b" {
		t.Errorf("node selector %v, want the pod's own", p.Spec.NodeSelector)
	}
	oneEvent(ctx, t, changed, "Warning", reasonPodSetMismatch)
}

// TestFitSinglePodChangedBeforeSubmission: a pod whose node selector grew
// between its creation (and the webhook's role hash) and its submission
// gets a pod set shaped like it is, with the role hash of that shape, and
// fits it.
func TestFitSinglePodChangedBeforeSubmission(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout*2)
	defer cancel()
	// Out of the grouper's cache until labelled managed.
	pod := newPod("fit-early")
	delete(pod.Labels, podkeys.ManagedLabel)
	delete(pod.Annotations, podkeys.RoleHashAnnotation)
	created := createPodObject(ctx, t, pod)
	atCreation, err := rolehash.Compute(&created.Spec)
	if err != nil {
		t.Fatal(err)
	}
	changed := mergePatchPod(ctx, t, pod.Name, `{"metadata":{"annotations":{"`+podkeys.RoleHashAnnotation+`":"`+atCreation+`"}},`+
		`"spec":{"nodeSelector":{"zone":"b"}}}`)
	if changed.Generation < 2 {
		t.Fatalf("the API server left metadata.generation at %d after a spec change; the pod set's role hash relies on it", changed.Generation)
	}
	now, err := rolehash.Compute(&changed.Spec)
	if err != nil {
		t.Fatal(err)
	}
	mergePatchPod(ctx, t, pod.Name, `{"metadata":{"labels":{"`+podkeys.ManagedLabel+`":"`+podkeys.ManagedLabelValue+`"}}}`)

	name := workloadName(created)
	waitSubmitted(ctx, t, name)
	sub := s.admitter.submissionsFor(name)[0]
	if ps := sub.req.GetWorkload().GetPodSets()[0]; ps.GetRoleHash() != now || ps.GetNodeSelector()["zone"] != "b" {
		t.Fatalf("pod set built with role hash %s and node selector %v, want the pod's shape now: %s with zone=b (its annotation says %s)",
			ps.GetRoleHash(), ps.GetNodeSelector(), now, atCreation)
	}
	s.admitter.push(admitAsSubmitted(sub, "wl-uid"))
	waitPod(ctx, t, pod.Name, "ungated", ungated)
}

// TestFitSinglePodQueueMoved: a single pod relabelled to another
// LocalQueue is not ungated on the admission made in its old queue; it
// says so, and its workload moves to the new queue (UpdateWorkload).
func TestFitSinglePodQueueMoved(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout*2)
	defer cancel()
	pod := newPod("fit-moved")
	delete(pod.Annotations, podkeys.RoleHashAnnotation)
	pod = createPodObject(ctx, t, pod)
	name := workloadName(pod)
	waitSubmitted(ctx, t, name)
	sub := s.admitter.submissionsFor(name)[0]

	// The pod moves while gated: its workload follows (this also shows the
	// grouper has seen the move).
	moved := mergePatchPod(ctx, t, pod.Name, `{"metadata":{"labels":{"`+podkeys.QueueNameLabel+`":"other-queue"}}}`)
	waitFor(ctx, t, "the workload moved", func() error {
		for _, u := range s.admitter.updatesFor(name) {
			if u.GetQueueName() == "other-queue" {
				return nil
			}
		}
		return fmt.Errorf("updates %v", s.admitter.updatesFor(name))
	})
	// The admission made in the old queue arrives meanwhile.
	pushApplied(ctx, t, admitAsSubmitted(sub, "wl-uid"))
	oneEvent(ctx, t, moved, "Warning", reasonPodSetMismatch,
		podkeys.QueueNameLabel+": pod other-queue, workload user-queue", "moves to LocalQueue other-queue")
	if p := getPod(ctx, t, pod.Name); gated(p) != nil {
		t.Fatalf("pod of another queue ungated on its old queue's admission: %v", gated(p))
	}
}

// managedGroupPod creates a gated pod of group group of total pods as the
// webhook leaves it: labelled managed, annotated with the role hash of the
// spec the API server stored. It is created unmanaged (out of the
// grouper's cache) and labelled once hashed.
func managedGroupPod(ctx context.Context, t *testing.T, name, group string, total int) *corev1.Pod {
	t.Helper()
	pod := inGroup(newPod(name), group, total)
	delete(pod.Labels, podkeys.ManagedLabel)
	delete(pod.Annotations, podkeys.RoleHashAnnotation)
	created := createPodObject(ctx, t, pod)
	hash, err := rolehash.Compute(&created.Spec)
	if err != nil {
		t.Fatal(err)
	}
	return patchPod(ctx, t, created, []jsonOp{
		{Op: "add", Path: "/metadata/labels/" + jsonPointerEscape(podkeys.ManagedLabel), Value: podkeys.ManagedLabelValue},
		{Op: "add", Path: "/metadata/annotations/" + jsonPointerEscape(podkeys.RoleHashAnnotation), Value: hash},
	})
}

// TestFitGroupMemberChanged: in a group created beforehand, a pod given a
// node affinity after the group was submitted is not ungated with it; the
// Warning says that a field the Workload does not record changed, with
// both role hashes. The pod that did not change is ungated.
func TestFitGroupMemberChanged(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout*2)
	defer cancel()
	const group = "fit-group"
	kept := managedGroupPod(ctx, t, "fit-group-a", group, 2)
	managedGroupPod(ctx, t, "fit-group-b", group, 2)
	waitSubmitted(ctx, t, group)
	sub := s.admitter.submissionsFor(group)[0]
	wl := createWorkloadAsSubmitted(ctx, t, sub)

	changed := mergePatchPod(ctx, t, "fit-group-b", `{"spec":{"affinity":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":`+
		`{"nodeSelectorTerms":[{"matchExpressions":[{"key":"zone","operator":"In","values":["a"]}]}]}}}}}`)
	now, err := rolehash.Compute(&changed.Spec)
	if err != nil {
		t.Fatal(err)
	}
	seenByGrouper(ctx, t, "fit-group-barrier")
	s.admitter.push(admitAsSubmitted(sub, wl.UID))
	waitPod(ctx, t, kept.Name, "ungated", ungated)
	oneEvent(ctx, t, changed, "Warning", reasonPodSetMismatch, "not ungated", "pod set "+kept.Annotations[podkeys.RoleHashAnnotation],
		"role hash "+now, "affinity, priority or another scheduling field", "changed since the pod set was built")
	if p := getPod(ctx, t, changed.Name); gated(p) != nil {
		t.Fatalf("pod changed since its pod set was built was ungated: %v", gated(p))
	}
}

// gateWatch follows one pod from the version given until it is deleted,
// to tell whether any version of it lacked sluice's gate.
type gateWatch struct {
	done    chan struct{}
	ungated string // resourceVersion of the first version without the gate
	err     error
}

func watchGate(ctx context.Context, t *testing.T, pod *corev1.Pod) *gateWatch {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, timeout)
	w, err := s.cs.CoreV1().Pods(namespace).Watch(wctx, metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", pod.Name).String(),
		ResourceVersion: pod.ResourceVersion,
	})
	if err != nil {
		cancel()
		t.Fatalf("watch pod %s: %v", pod.Name, err)
	}
	g := &gateWatch{done: make(chan struct{})}
	go func() {
		defer close(g.done)
		defer cancel()
		_, g.err = watchtools.UntilWithoutRetry(wctx, w, func(e watch.Event) (bool, error) {
			p, ok := e.Object.(*corev1.Pod)
			if !ok {
				return false, fmt.Errorf("watch event %s: %v", e.Type, e.Object)
			}
			if !hasGate(p, podkeys.AdmissionGate) && g.ungated == "" {
				g.ungated = p.ResourceVersion
			}
			return e.Type == watch.Deleted, nil
		})
	}()
	return g
}

// TestFitDeclaredCopyAsksToJoin: in a group declared by pod-group-sets, a
// pod that copies the driver's declaration and names a role without a
// template is not taken for the declaring pod: shaped otherwise than the
// driver the set was built from, it asks the admitter to join, with its
// node selector, tolerations and priority, and, refused, is deleted without
// ever losing its gate. A pod shaped exactly like the driver, in that
// role, asks nothing and is ungated.
func TestFitDeclaredCopyAsksToJoin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout*2)
	defer cancel()
	const group = "fit-spark"
	const sets = `[{"name":"driver","count":1},{"name":"helper","count":2},` +
		`{"name":"worker","count":1,"template":{"spec":{"containers":[{"name":"w","resources":{"requests":{"cpu":"1"}}}]}}}]`
	member := func(name, role, cpu string) *corev1.Pod {
		pod := declaredPod(name, role, cpu)
		pod.Labels[podkeys.PodGroupNameLabel] = group
		pod.Annotations[podkeys.PodGroupSetsAnnotation] = sets
		return pod
	}
	driver := createPodObject(ctx, t, member("fit-spark-driver", "driver", "500m"))
	waitSubmitted(ctx, t, group)
	sub := s.admitter.submissionsFor(group)[0]
	s.admitter.push(admitAsSubmitted(sub, "wl-uid"))
	waitPod(ctx, t, driver.Name, "ungated", ungated)

	twin := createPodObject(ctx, t, member("fit-spark-twin", "helper", "500m"))
	waitPod(ctx, t, twin.Name, "ungated", ungated)

	copied := createPodObject(ctx, t, member("fit-spark-copy", "helper", "2"))
	gw := watchGate(ctx, t, copied)
	waitGone(ctx, t, copied.Name)
	<-gw.done
	if gw.err != nil {
		t.Fatalf("watching pod %s until it went: %v", copied.Name, gw.err)
	}
	if gw.ungated != "" {
		t.Errorf("pod %s, refused by the admitter, lost its gate (resourceVersion %s)", copied.Name, gw.ungated)
	}
	waitFor(ctx, t, "a JoinRefused event", func() error {
		return findEvent(ctx, copied.Name, "JoinRefused", "deleted pod fit-spark-copy: it cannot join pod set helper")
	})

	var asked []string
	for _, u := range s.admitter.updatesFor(group) {
		j := u.GetJoin()
		if j == nil {
			continue
		}
		asked = append(asked, j.GetPodName())
		if j.GetPodName() != copied.Name {
			continue
		}
		sch := j.GetScheduling()
		if j.GetPodSet() != "helper" || j.GetRequests()["cpu"] != "2" || sch == nil || sch.GetNodeSelector()["disk"] != "ssd" || sch.GetPriority() != 0 {
			t.Errorf("join %v, want pod set helper, cpu 2, with the pod's node selector and priority", j)
		}
	}
	if got := strings.Join(asked, ","); got != copied.Name {
		t.Errorf("pods that asked to join: %q, want only %s (the driver and its twin are shaped like their sets)", got, copied.Name)
	}
}
