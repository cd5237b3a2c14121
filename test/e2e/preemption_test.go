package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1alpha1 "github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/test/e2e/e2eutil"
	"github.com/sluice-dev/sluice/test/harness"
)

// The tests in this file preempt running pods. As in cohort_test.go, the
// operator makes the cluster-scoped objects (prefixed with the test's
// name, as the suite shares one cluster) and the namespace's user makes
// and deletes the pods.

// Priorities of the two WorkloadPriorityClasses each test makes.
const (
	lowPriority    = 10
	urgentPriority = 1000
)

// priorityClasses makes the WorkloadPriorityClasses prefix-low and
// prefix-urgent and returns their names.
func priorityClasses(ctx context.Context, t *testing.T, prefix string) (low, urgent string) {
	t.Helper()
	low, urgent = prefix+"-low", prefix+"-urgent"
	createPriorityClass(ctx, t, low, lowPriority)
	createPriorityClass(ctx, t, urgent, urgentPriority)
	return low, urgent
}

// withPriority returns pod in WorkloadPriorityClass class.
func withPriority(pod *corev1.Pod, class string) *corev1.Pod {
	return withLabel(pod, podkeys.PriorityClassLabel, class)
}

// createClusterQueue makes the ClusterQueue name with spec, and a
// LocalQueue of the same name in ns.
func createClusterQueue(ctx context.Context, t *testing.T, ns, name string, spec sluicev1alpha1.ClusterQueueSpec) {
	t.Helper()
	mustCreate(ctx, t, &sluicev1alpha1.ClusterQueue{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec})
	mustCreate(ctx, t, &sluicev1alpha1.LocalQueue{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       sluicev1alpha1.LocalQueueSpec{ClusterQueue: name},
	})
}

// cpuFlavors is one resource group of cpu in flavors, nominal cpu each,
// tried in that order.
func cpuFlavors(nominal string, flavors ...string) []sluicev1alpha1.ResourceGroup {
	rg := sluicev1alpha1.ResourceGroup{CoveredResources: []corev1.ResourceName{corev1.ResourceCPU}}
	for _, f := range flavors {
		rg.Flavors = append(rg.Flavors, sluicev1alpha1.FlavorQuotas{
			Name:      f,
			Resources: []sluicev1alpha1.ResourceQuota{{Name: corev1.ResourceCPU, NominalQuota: resource.MustParse(nominal)}},
		})
	}
	return []sluicev1alpha1.ResourceGroup{rg}
}

// startPods creates pods as alice and waits until each runs, admitted;
// it returns their Workloads in the same order.
func startPods(ctx context.Context, t *testing.T, alice *harness.User, pods ...*corev1.Pod) []*sluicev1alpha1.Workload {
	t.Helper()
	for _, p := range pods {
		createAs(ctx, t, alice, p)
	}
	var wls []*sluicev1alpha1.Workload
	for _, p := range pods {
		waitPod(ctx, t, p, "running", running)
		wls = append(wls, waitWorkloadOf(ctx, t, p, "admitted", admitted))
	}
	return wls
}

// anyWorkload, for waitWorkloadOf: the pod's Workload, whatever its state.
func anyWorkload(*sluicev1alpha1.Workload) bool { return true }

// waitAllGone waits until every pod is deleted for good.
func waitAllGone(ctx context.Context, t *testing.T, what string, pods ...*corev1.Pod) {
	t.Helper()
	for _, p := range pods {
		if err := e2eutil.WaitGone(ctx, k8s, p, time.Minute); err != nil {
			t.Fatalf("pod %s, %s, is still there: %v", p.Name, what, err)
		}
	}
}

// assertUntouched fails the test unless each pod still runs and the
// recorded history of its Workload holds no eviction.
func assertUntouched(ctx context.Context, t *testing.T, rec *recorder, pods []*corev1.Pod, wls []*sluicev1alpha1.Workload) {
	t.Helper()
	for i, p := range pods {
		if cur := getPod(ctx, t, p); !running(cur) {
			t.Errorf("pod %s stopped (phase %s, deleting %v); it should have been left alone", p.Name, cur.Status.Phase, cur.DeletionTimestamp != nil)
		}
		for _, c := range rec.conditionsSeen(wls[i].Name, sluicev1alpha1.WorkloadEvicted) {
			if c.Status == metav1.ConditionTrue {
				t.Errorf("workload %s of pod %s was evicted (%s: %s); it should have been left alone", wls[i].Name, p.Name, c.Reason, c.Message)
			}
		}
	}
}

// preemptedBy is the start of the Evicted message of a workload preempted
// by preemptor, pending in ClusterQueue cq.
func preemptedBy(preemptor *sluicev1alpha1.Workload, priority int, cq string) string {
	return fmt.Sprintf("preempted by %s/%s (priority %d) of ClusterQueue %s: ", preemptor.Namespace, preemptor.Name, priority, cq)
}

// Ends of the Evicted message: what becomes of a preempted workload's pods.
const (
	podDeletedForGood = "; the pod is deleted and does not run again, as nothing creates a plain pod anew; create it again to queue it"
	groupWaitsForPods = "; the group's pods are deleted; it queues again once they are all created again"
)

// waitedForVictims fails the test unless the recorded history of the
// preemptor's Workload told, while it waited, which victims it waited for.
func waitedForVictims(t *testing.T, rec *recorder, preemptor string, victims ...*sluicev1alpha1.Workload) {
	t.Helper()
	want := fmt.Sprintf("waiting for %d preempted workload(s) to stop, which frees its quota: ", len(victims))
	for i, v := range victims {
		if i > 0 {
			want += ", "
		}
		want += v.Namespace + "/" + v.Name
	}
	for _, c := range rec.conditionsSeen(preemptor, sluicev1alpha1.WorkloadQuotaReserved) {
		if c.Status == metav1.ConditionFalse && c.Message == want {
			return
		}
	}
	t.Errorf("the preemptor %s never said %q; QuotaReserved conditions seen: %+v", preemptor, want,
		rec.conditionsSeen(preemptor, sluicev1alpha1.WorkloadQuotaReserved))
}

// cpuFlavor is the flavor a Workload's admission assigns cpu, or "".
func cpuFlavor(wl *sluicev1alpha1.Workload) string {
	if wl.Status.Admission == nil || len(wl.Status.Admission.PodSetAssignments) == 0 {
		return ""
	}
	return wl.Status.Admission.PodSetAssignments[0].Flavors[corev1.ResourceCPU]
}

// reservedAt is when wl's quota was reserved, to the second.
func reservedAt(wl *sluicev1alpha1.Workload) metav1.Time {
	if c := meta.FindStatusCondition(wl.Status.Conditions, sluicev1alpha1.WorkloadQuotaReserved); c != nil {
		return c.LastTransitionTime
	}
	return metav1.Time{}
}

// waitNextSecond waits until the clock has left the second of then.
// Conditions keep their transition times in whole seconds: a reservation
// is later than another, for whoever reads the Workloads, only if it was
// made in a later second.
func waitNextSecond(ctx context.Context, t *testing.T, then metav1.Time) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return time.Now().Truncate(time.Second).After(then.Time), nil
	})
	if err != nil {
		t.Fatalf("the clock never passed %s: %v", then, err)
	}
}

// TestPreemptWithinClusterQueue: in a 1-cpu queue that preempts lower
// priorities, an urgent pod evicts the running low-priority one, which is
// deleted for good and told by whom and by which policy; the urgent pod
// waits for it to stop, saying so, and then runs.
func TestPreemptWithinClusterQueue(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns, alice := cohortNamespace(ctx, t, "pre-within")
	const cq = "pre-within"
	low, urgent := priorityClasses(ctx, t, cq)
	createClusterQueue(ctx, t, ns, cq, sluicev1alpha1.ClusterQueueSpec{
		ResourceGroups: cpuGroups(createFlavor(ctx, t, cq+"-flavor"), "1", cpuLimits{}),
		Preemption:     &sluicev1alpha1.ClusterQueuePreemption{WithinClusterQueue: sluicev1alpha1.PreemptionLowerPriority},
	})
	rec := recordEvents(ctx, t, ns, cq)
	defer rec.stop()

	victim := withPriority(queuedPod(ns, "low", cq, "1"), low)
	victimWl := startPods(ctx, t, alice, victim)[0]
	if p := victimWl.Spec.Priority; p == nil || *p != lowPriority {
		t.Fatalf("the low pod's Workload does not have priority %d: %s", lowPriority, describe(victimWl))
	}

	preemptor := withPriority(queuedPod(ns, "urgent", cq, "1"), urgent)
	createAs(ctx, t, alice, preemptor)
	preemptorWl := waitWorkloadOf(ctx, t, preemptor, "created", anyWorkload)
	waitAllGone(ctx, t, "preempted", victim)
	waitEvictedFor(ctx, t, rec, victimWl.Name, sluicev1alpha1.ReasonPreempted, preemptedBy(preemptorWl, urgentPriority, cq)+
		"it has a lower priority in the same ClusterQueue (withinClusterQueue LowerPriority)"+podDeletedForGood)
	waitPod(ctx, t, preemptor, "running in the preempted pod's place", running)
	waitedForVictims(t, rec, preemptorWl.Name, victimWl)
}

// TestPreemptReclaimWithinCohort: A and B have 2 cpu each in one cohort;
// B runs four 1-cpu pods, two on quota A lends. A 2-cpu pod in A, whose
// queue reclaims any lent quota, evicts exactly the two of B's pods that
// were admitted last, and runs; B's first two keep running.
func TestPreemptReclaimWithinCohort(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns, alice := cohortNamespace(ctx, t, "pre-reclaim")
	const cohort, a, b = "pre-reclaim", "pre-reclaim-a", "pre-reclaim-b"
	flavor := createFlavor(ctx, t, cohort+"-flavor")
	createClusterQueue(ctx, t, ns, a, sluicev1alpha1.ClusterQueueSpec{
		CohortName:     cohort,
		ResourceGroups: cpuGroups(flavor, "2", cpuLimits{}),
		Preemption:     &sluicev1alpha1.ClusterQueuePreemption{ReclaimWithinCohort: sluicev1alpha1.PreemptionAny},
	})
	createCohortQueue(ctx, t, ns, b, cohort, flavor, "2", cpuLimits{})
	rec := recordEvents(ctx, t, ns, b)
	defer rec.stop()

	// B's own two, then two on A's quota, reserved in a later second so
	// that they are, for the admitter too, the most recently admitted.
	own := []*corev1.Pod{queuedPod(ns, "b-0", b, "1"), queuedPod(ns, "b-1", b, "1")}
	ownWls := startPods(ctx, t, alice, own...)
	waitNextSecond(ctx, t, maxTime(reservedAt(ownWls[0]), reservedAt(ownWls[1])))
	borrowers := []*corev1.Pod{queuedPod(ns, "b-2", b, "1"), queuedPod(ns, "b-3", b, "1")}
	borrowerWls := startPods(ctx, t, alice, borrowers...)
	waitClusterQueue(ctx, t, b, "4 cpu reserved, 2 borrowed", func(cq *sluicev1alpha1.ClusterQueue) bool {
		return cpuIs(cq.Status.FlavorsReservation, flavor, "4", "2", "")
	})

	reclaimer := queuedPod(ns, "a-0", a, "2")
	createAs(ctx, t, alice, reclaimer)
	reclaimerWl := waitWorkloadOf(ctx, t, reclaimer, "created", anyWorkload)
	waitAllGone(ctx, t, "running on reclaimed quota", borrowers...)
	for _, wl := range borrowerWls {
		waitEvictedFor(ctx, t, rec, wl.Name, sluicev1alpha1.ReasonPreempted, preemptedBy(reclaimerWl, 0, a)+
			"its ClusterQueue borrowed quota of the cohort, which "+a+" reclaims (reclaimWithinCohort Any)"+podDeletedForGood)
	}
	waitPod(ctx, t, reclaimer, "running on the quota A took back", running)
	waitedForVictims(t, rec, reclaimerWl.Name, borrowerWls...)
	if wl := waitWorkloadOf(ctx, t, reclaimer, "admitted", admitted); !borrowedCPU(wl).IsZero() {
		t.Errorf("A's pod within A's nominal quota records borrowed %v", wl.Status.Admission.PodSetAssignments)
	}
	assertUntouched(ctx, t, rec, own, ownWls)
	waitClusterQueue(ctx, t, b, "2 cpu reserved, none borrowed", func(cq *sluicev1alpha1.ClusterQueue) bool {
		return cpuIs(cq.Status.FlavorsReservation, flavor, "2", "0", "")
	})
}

func maxTime(a, b metav1.Time) metav1.Time {
	if a.Before(&b) {
		return b
	}
	return a
}

// TestPreemptBorrowWithinCohort: in a cohort of P (1 cpu), V (none) and L
// (2 cpu, idle), P runs a pod on its own quota and V a low-priority 2-cpu
// pod on L's. An urgent 1-cpu pod in P must borrow, and the only workload
// it could take the quota of is V's, which borrows too: borrowWithinCohort
// lets P preempt it when its priority is at most maxPriorityThreshold, and
// protects it above.
func TestPreemptBorrowWithinCohort(t *testing.T) {
	tests := []struct {
		name      string
		prefix    string
		threshold int32
		preempted bool
	}{
		{name: "victim at the threshold", prefix: "pre-bwc-at", threshold: lowPriority, preempted: true},
		{name: "victim above the threshold", prefix: "pre-bwc-above", threshold: lowPriority - 1, preempted: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			ns, alice := cohortNamespace(ctx, t, tt.prefix)
			cohort, p, v, l := tt.prefix, tt.prefix+"-p", tt.prefix+"-v", tt.prefix+"-l"
			low, urgent := priorityClasses(ctx, t, tt.prefix)
			flavor := createFlavor(ctx, t, tt.prefix+"-flavor")
			createClusterQueue(ctx, t, ns, p, sluicev1alpha1.ClusterQueueSpec{
				CohortName:     cohort,
				ResourceGroups: cpuGroups(flavor, "1", cpuLimits{}),
				Preemption: &sluicev1alpha1.ClusterQueuePreemption{
					ReclaimWithinCohort: sluicev1alpha1.PreemptionLowerPriority,
					BorrowWithinCohort: &sluicev1alpha1.BorrowWithinCohort{
						Policy: sluicev1alpha1.PreemptionLowerPriority, MaxPriorityThreshold: ptr.To(tt.threshold),
					},
				},
			})
			createCohortQueue(ctx, t, ns, v, cohort, flavor, "0", cpuLimits{})
			createCohortQueue(ctx, t, ns, l, cohort, flavor, "2", cpuLimits{})
			rec := recordEvents(ctx, t, ns, p)
			defer rec.stop()

			// P at its nominal quota (withinClusterQueue is Never: the
			// holder is no candidate), V borrowing all of L's.
			holder := queuedPod(ns, "p-holder", p, "1")
			borrower := withPriority(queuedPod(ns, "v-borrower", v, "2"), low)
			wls := startPods(ctx, t, alice, holder, borrower)
			if got := borrowedCPU(wls[1]); !quantityIs(got, "2") {
				t.Fatalf("V's pod records borrowed cpu %s, want 2: %s", got.String(), describe(wls[1]))
			}

			preemptor := withPriority(queuedPod(ns, "p-urgent", p, "1"), urgent)
			createAs(ctx, t, alice, preemptor)
			if !tt.preempted {
				waiting := waitWorkloadOf(ctx, t, preemptor, "waiting for quota, saying the threshold protects V's pod", waitsWith("insufficient quota",
					fmt.Sprintf("preemption cannot help: 1 workload(s) of ClusterQueue %s hold the quota but have priority above borrowWithinCohort's maxPriorityThreshold %d", v, tt.threshold)))
				t.Logf("the urgent pod waits: %s", quotaReservedMessage(waiting))
				if cur := getPod(ctx, t, preemptor); !hasGate(cur) {
					t.Fatalf("pod %s ungated with no quota to borrow", preemptor.Name)
				}
				assertUntouched(ctx, t, rec, []*corev1.Pod{holder, borrower}, wls)
				return
			}
			preemptorWl := waitWorkloadOf(ctx, t, preemptor, "created", anyWorkload)
			waitAllGone(ctx, t, "preempted", borrower)
			waitEvictedFor(ctx, t, rec, wls[1].Name, sluicev1alpha1.ReasonPreempted, preemptedBy(preemptorWl, urgentPriority, p)+
				"it borrowed quota of the cohort, which "+p+" borrows in its place (borrowWithinCohort LowerPriority)"+podDeletedForGood)
			waitPod(ctx, t, preemptor, "running on borrowed quota", running)
			waitedForVictims(t, rec, preemptorWl.Name, wls[1])
			if wl := waitWorkloadOf(ctx, t, preemptor, "admitted", admitted); !quantityIs(borrowedCPU(wl), "1") {
				t.Errorf("the urgent pod records borrowed %v, want cpu 1", wl.Status.Admission.PodSetAssignments)
			}
			assertUntouched(ctx, t, rec, []*corev1.Pod{holder}, wls[:1])
		})
	}
}

// TestPreemptGroupWhole: an urgent single pod preempts a running group of
// two low-priority pods. The group goes whole: both pods are deleted, and
// its Workload, without quota, waits for them to be created again. Once
// they are (the urgent pod gone), the same Workload runs them again.
func TestPreemptGroupWhole(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns, alice := cohortNamespace(ctx, t, "pre-group")
	const cq = "pre-group"
	low, urgent := priorityClasses(ctx, t, cq)
	createClusterQueue(ctx, t, ns, cq, sluicev1alpha1.ClusterQueueSpec{
		ResourceGroups: cpuGroups(createFlavor(ctx, t, cq+"-flavor"), "2", cpuLimits{}),
		Preemption:     &sluicev1alpha1.ClusterQueuePreemption{WithinClusterQueue: sluicev1alpha1.PreemptionLowerPriority},
	})
	rec := recordEvents(ctx, t, ns, cq)
	defer rec.stop()

	group := func() []*corev1.Pod {
		var pods []*corev1.Pod
		for i := range 2 {
			p := groupPod(ns, "ranks", fmt.Sprintf("rank-%d", i), "1", 2, nil)
			p.Labels[podkeys.QueueNameLabel] = cq
			pods = append(pods, withPriority(p, low))
		}
		return pods
	}
	pods := group()
	groupWl := startPods(ctx, t, alice, pods...)[0]

	// One cpu would do, but a group is preempted whole.
	preemptor := withPriority(queuedPod(ns, "urgent", cq, "1"), urgent)
	createAs(ctx, t, alice, preemptor)
	preemptorWl := waitWorkloadOf(ctx, t, preemptor, "created", anyWorkload)
	waitAllGone(ctx, t, "of the preempted group", pods...)
	waitEvictedFor(ctx, t, rec, groupWl.Name, sluicev1alpha1.ReasonPreempted, preemptedBy(preemptorWl, urgentPriority, cq)+
		"it has a lower priority in the same ClusterQueue (withinClusterQueue LowerPriority)"+groupWaitsForPods)
	if cur := waitGroupWaitsForPods(ctx, t, groupWl, "preempted"); cur.UID != groupWl.UID {
		t.Fatalf("the preempted group's Workload was replaced (uid %s, was %s)", cur.UID, groupWl.UID)
	}
	waitPod(ctx, t, preemptor, "running in the group's place", running)
	waitedForVictims(t, rec, preemptorWl.Name, groupWl)

	accepted(ctx, t, alice, "delete", "pod", preemptor.Name, "-n", ns, "--wait=false")
	pods = group()
	if got := startPods(ctx, t, alice, pods...)[0]; got.UID != groupWl.UID {
		t.Errorf("the group came back as a new Workload (uid %s, was %s)", got.UID, groupWl.UID)
	}
}

// TestPreemptFlavorFungibility: a queue of two 1-cpu flavors that
// preempts lower priorities; a low-priority pod runs in the first. By
// default (whenCanPreempt TryNextFlavor) an urgent pod takes the second
// flavor, which it fits without preempting; with MayStopSearch it
// preempts the low pod in the first.
func TestPreemptFlavorFungibility(t *testing.T) {
	tests := []struct {
		name        string
		prefix      string
		fungibility *sluicev1alpha1.FlavorFungibility
		preempts    bool
	}{
		{name: "TryNextFlavor by default", prefix: "pre-fungible-next", preempts: false},
		{name: "MayStopSearch", prefix: "pre-fungible-stop", preempts: true,
			fungibility: &sluicev1alpha1.FlavorFungibility{WhenCanPreempt: sluicev1alpha1.MayStopSearch}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			ns, alice := cohortNamespace(ctx, t, tt.prefix)
			cq := tt.prefix
			low, urgent := priorityClasses(ctx, t, tt.prefix)
			first, second := createFlavor(ctx, t, tt.prefix+"-first"), createFlavor(ctx, t, tt.prefix+"-second")
			createClusterQueue(ctx, t, ns, cq, sluicev1alpha1.ClusterQueueSpec{
				ResourceGroups:    cpuFlavors("1", first, second),
				Preemption:        &sluicev1alpha1.ClusterQueuePreemption{WithinClusterQueue: sluicev1alpha1.PreemptionLowerPriority},
				FlavorFungibility: tt.fungibility,
			})
			rec := recordEvents(ctx, t, ns, cq)
			defer rec.stop()

			victim := withPriority(queuedPod(ns, "low", cq, "1"), low)
			victimWl := startPods(ctx, t, alice, victim)[0]
			if got := cpuFlavor(victimWl); got != first {
				t.Fatalf("the low pod was admitted in flavor %q, want the first, %s", got, first)
			}

			preemptor := withPriority(queuedPod(ns, "urgent", cq, "1"), urgent)
			createAs(ctx, t, alice, preemptor)
			want := second
			if tt.preempts {
				want = first
				preemptorWl := waitWorkloadOf(ctx, t, preemptor, "created", anyWorkload)
				waitAllGone(ctx, t, "preempted", victim)
				waitEvictedFor(ctx, t, rec, victimWl.Name, sluicev1alpha1.ReasonPreempted, preemptedBy(preemptorWl, urgentPriority, cq)+
					"it has a lower priority in the same ClusterQueue (withinClusterQueue LowerPriority)"+podDeletedForGood)
			}
			waitPod(ctx, t, preemptor, "running", running)
			if got := cpuFlavor(waitWorkloadOf(ctx, t, preemptor, "admitted", admitted)); got != want {
				t.Errorf("the urgent pod was admitted in flavor %q, want %s", got, want)
			}
			if !tt.preempts {
				assertUntouched(ctx, t, rec, []*corev1.Pod{victim}, []*sluicev1alpha1.Workload{victimWl})
			}
		})
	}
}

// waitGroupWaitsForPods waits until the evicted (how: "preempted",
// "drained") group's Workload wl holds no quota and waits for its pods to
// be created again, and returns it as it then is.
func waitGroupWaitsForPods(ctx context.Context, t *testing.T, wl *sluicev1alpha1.Workload, how string) *sluicev1alpha1.Workload {
	t.Helper()
	var cur sluicev1alpha1.Workload
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(wl), &cur); err != nil {
			return false, nil
		}
		return cur.Status.Admission == nil && meta.IsStatusConditionTrue(cur.Status.Conditions, sluicev1alpha1.WorkloadWaitingForReplacementPods), nil
	})
	if err != nil {
		t.Fatalf("the %s group's Workload does not wait for its pods without quota: %s", how, describe(&cur))
	}
	return &cur
}
