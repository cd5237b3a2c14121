package admitter

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/services/admitter/app"
	"github.com/sluice-dev/sluice/test/fakecheck"
)

// metricValue is the value of the gauge or counter name with the label
// check=check, and whether it exists.
func metricValue(g prometheus.Gatherer, name, check string, labels ...string) (float64, bool) {
	families, err := g.Gather()
	if err != nil {
		return 0, false
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			want := map[string]string{"check": check}
			for i := 0; i+1 < len(labels); i += 2 {
				want[labels[i]] = labels[i+1]
			}
			for _, l := range m.GetLabel() {
				if v, ok := want[l.GetName()]; ok && v != l.GetValue() {
					continue next
				}
			}
			if m.GetGauge() != nil {
				return m.GetGauge().GetValue(), true
			}
			return m.GetCounter().GetValue(), true
		}
	}
	return 0, false
}

func getCheck(ctx context.Context, t *testing.T, name string) *v1alpha1.AdmissionCheck {
	t.Helper()
	var ac v1alpha1.AdmissionCheck
	if err := s.k8s.Get(ctx, client.ObjectKey{Name: name}, &ac); err != nil {
		t.Fatalf("get admission check %s: %v", name, err)
	}
	return &ac
}

// A deleted Workload whose provider is down waits for it only
// --release-wait (from its deletion, and only after a Release attempt
// failed), then goes with a Warning event; the Release it owed is kept in
// the AdmissionCheck's status.owedReleases, next to the prober's
// conditions, and delivered and removed once the provider is back.
func TestDeletionHandsOverTheReleaseOfAProviderThatIsDown(t *testing.T) {
	ctx := testContext(t)
	const wait = 5 * time.Second
	reg := prometheus.NewRegistry()
	swapAdmitter(t, func(c *app.Config) {
		w := wait
		c.ReleaseWait = &w
		c.Registry, c.Gatherer = reg, reg
	})
	fake := fakecheck.StartT(t, fakecheck.WithCapabilities(checksv1.Capability_CAPABILITY_RELEASE),
		fakecheck.WithDefaultAnswer(&checksv1.EvaluateResponse{State: checksv1.State_STATE_READY}))
	check := newCheck(ctx, t, fake.Target())
	st := newSetup(ctx, t, queueOptions{cpu: "1", checks: []string{check}})
	submit(ctx, t, st.ns, "doomed", "1")
	wl := waitWorkload(ctx, t, st.ns, "doomed", "admitted", func(wl *v1alpha1.Workload) bool { return isTrue(wl, v1alpha1.WorkloadAdmitted) })
	reservation := wl.Status.Admission.ReservationID
	key := evaluationKey(wl.UID, reservation, check)

	fake.Down()
	if err := s.k8s.Delete(ctx, wl); err != nil {
		t.Fatalf("delete workload: %v", err)
	}
	reportStopped(ctx, t, st.ns, "doomed", "")
	waitFor(ctx, t, "a failed Release attempt", func() (bool, string) {
		n, _ := metricValue(reg, "sluice_admitter_check_call_errors_total", check, "method", "Release")
		return n >= 1, fmt.Sprint(n)
	})
	// The wait is not over: the Workload is still there, owing the Release.
	held := getWorkload(ctx, t, st.ns, "doomed")
	if elapsed := time.Since(held.DeletionTimestamp.Time); elapsed < wait-time.Second {
		if !slices.Contains(held.Finalizers, v1alpha1.ResourceInUseFinalizer) || len(held.Status.PendingReleases) != 1 {
			t.Fatalf("%s into a %s wait: finalizers %v, pendingReleases %+v; want the Workload still held, owing its Release",
				elapsed, wait, held.Finalizers, held.Status.PendingReleases)
		}
		if owed := getCheck(ctx, t, check).Status.OwedReleases; len(owed) != 0 {
			t.Fatalf("%s into a %s wait the check already holds %+v", elapsed, wait, owed)
		}
	} else {
		t.Logf("the first failed attempt came %s after the deletion: the wait was nearly over, not checked", elapsed)
	}

	waitGone(ctx, t, st.ns, "doomed")
	if goneAt, due := time.Now(), held.DeletionTimestamp.Add(wait); goneAt.Before(due.Add(-time.Second)) {
		t.Fatalf("the Workload went at %v, before its wait was over at %v", goneAt, due)
	}
	var ac *v1alpha1.AdmissionCheck
	waitFor(ctx, t, "the Release on the AdmissionCheck, with the prober's Active=False", func() (bool, string) {
		ac = getCheck(ctx, t, check)
		c := meta.FindStatusCondition(ac.Status.Conditions, v1alpha1.AdmissionCheckActive)
		return len(ac.Status.OwedReleases) == 1 && c != nil && c.Status == metav1.ConditionFalse,
			fmt.Sprintf("owedReleases %+v, Active %+v", ac.Status.OwedReleases, c)
	})
	o := ac.Status.OwedReleases[0]
	if o.Namespace != st.ns || o.Name != "doomed" || o.UID != wl.UID || o.ReservationID != reservation || o.Reason != v1alpha1.ReleaseDeleted || o.Since.IsZero() {
		t.Fatalf("owedReleases[0] = %+v, want %s/doomed uid %s reservation %s reason Deleted with a time", o, st.ns, wl.UID, reservation)
	}
	if ac.Status.Provider == nil || ac.Status.Provider.Name != fakecheck.ProviderName {
		t.Fatalf("provider = %+v, want the prober's %s kept", ac.Status.Provider, fakecheck.ProviderName)
	}
	waitFor(ctx, t, "a Warning event naming the check and its provider", func() (bool, string) {
		var evs eventsv1.EventList
		if err := s.k8s.List(ctx, &evs, client.InNamespace(st.ns)); err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range evs.Items {
			if e.Regarding.Name == "doomed" && e.Type == corev1.EventTypeWarning && e.Reason == "ReleaseHandedOver" &&
				strings.Contains(e.Note, check) && strings.Contains(e.Note, fakecheck.ProviderName) {
				return true, ""
			}
			seen = append(seen, e.Reason+": "+e.Note)
		}
		return false, strings.Join(seen, "; ")
	})
	// Events of a cluster-scoped object are recorded in the default
	// namespace; this one is seen even when the Workload's namespace is
	// being deleted, which takes the Workload's own events with it.
	waitFor(ctx, t, "a Warning event on the AdmissionCheck naming its provider", func() (bool, string) {
		var evs eventsv1.EventList
		if err := s.k8s.List(ctx, &evs, client.InNamespace(metav1.NamespaceDefault)); err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range evs.Items {
			if e.Regarding.Kind == "AdmissionCheck" && e.Regarding.Name == check && e.Type == corev1.EventTypeWarning &&
				e.Reason == "ReleasesOwed" && strings.Contains(e.Note, fakecheck.ProviderName) && strings.Contains(e.Note, "a deleted Workload") {
				return true, ""
			}
			seen = append(seen, e.Regarding.Name+" "+e.Reason+": "+e.Note)
		}
		return false, strings.Join(seen, "; ")
	})
	if n, _ := metricValue(reg, "sluice_admitter_release_wait_handovers_total", check); n != 1 {
		t.Fatalf("release_wait_handovers_total = %v, want 1", n)
	}
	waitFor(ctx, t, "the owed_releases gauge at 1", func() (bool, string) {
		n, _ := metricValue(reg, "sluice_admitter_owed_releases", check)
		return n == 1, fmt.Sprint(n)
	})

	// The provider is back: it gets the Release, and the entry goes.
	before := len(fake.Releases())
	if err := fake.Up(); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "the Release delivered and the entry removed", func() (bool, string) {
		got := 0
		for _, r := range fake.Releases()[before:] {
			if r.GetEvaluationKey() == key && r.GetReason() == checksv1.ReleaseReason_RELEASE_REASON_DELETED {
				got++
			}
		}
		owed := getCheck(ctx, t, check).Status.OwedReleases
		return got >= 1 && len(owed) == 0, fmt.Sprintf("%d Releases received, owedReleases %+v", got, owed)
	})
	waitFor(ctx, t, "the owed_releases gauge at 0", func() (bool, string) {
		n, _ := metricValue(reg, "sluice_admitter_owed_releases", check)
		return n == 0, fmt.Sprint(n)
	})
}

// TestHandOversOfManyDeletionsAreBatched: when many deleted Workloads
// stop waiting for the same provider at once, as a namespace deletion
// makes them, their Releases reach the AdmissionCheck in a few writes,
// not one each, and none is lost; the provider back, they leave it the
// same way.
func TestHandOversOfManyDeletionsAreBatched(t *testing.T) {
	ctx := testContext(t)
	const n = 40
	swapAdmitter(t, func(c *app.Config) {
		w := 3 * time.Second
		c.ReleaseWait = &w
	})
	fake := fakecheck.StartT(t, fakecheck.WithCapabilities(checksv1.Capability_CAPABILITY_RELEASE),
		fakecheck.WithDefaultAnswer(&checksv1.EvaluateResponse{State: checksv1.State_STATE_READY}))
	check := newCheck(ctx, t, fake.Target())
	st := newSetup(ctx, t, queueOptions{cpu: fmt.Sprint(n), checks: []string{check}})
	for i := range n {
		submit(ctx, t, st.ns, fmt.Sprintf("w%d", i), "1")
	}
	for i := range n {
		waitWorkload(ctx, t, st.ns, fmt.Sprintf("w%d", i), "admitted", func(wl *v1alpha1.Workload) bool { return isTrue(wl, v1alpha1.WorkloadAdmitted) })
	}

	// Count the check's status writes that change owedReleases.
	wc, err := client.NewWithWatch(s.env.Config, client.Options{Scheme: s.k8s.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(ctx, &v1alpha1.AdmissionCheckList{}, client.MatchingFields{"metadata.name": check})
	if err != nil {
		t.Fatalf("watch admission check: %v", err)
	}
	defer w.Stop()
	var adds, removes, last int
	drain := func(what string, done func() bool) {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, pollTimeout)
		defer cancel()
		for !done() {
			select {
			case ev := <-w.ResultChan():
				ac, ok := ev.Object.(*v1alpha1.AdmissionCheck)
				if !ok {
					continue
				}
				switch now := len(ac.Status.OwedReleases); {
				case now > last:
					adds++
				case now < last:
					removes++
				}
				last = len(ac.Status.OwedReleases)
			case <-ctx.Done():
				t.Fatalf("waiting for %s: %d entries, %d writes adding, %d removing", what, last, adds, removes)
			}
		}
	}

	fake.Down()
	for i := range n {
		wl := &v1alpha1.Workload{ObjectMeta: metav1.ObjectMeta{Namespace: st.ns, Name: fmt.Sprintf("w%d", i)}}
		if err := s.k8s.Delete(ctx, wl); err != nil {
			t.Fatalf("delete %s: %v", wl.Name, err)
		}
	}
	for i := range n {
		reportStopped(ctx, t, st.ns, fmt.Sprintf("w%d", i), "")
	}
	drain("every Release on the check", func() bool { return last == n })
	for i := range n {
		waitGone(ctx, t, st.ns, fmt.Sprintf("w%d", i))
	}
	t.Logf("%d Releases handed over in %d writes of the check", n, adds)
	if adds > n/4 {
		t.Errorf("%d Releases handed over in %d writes of the check, want them batched (at most %d)", n, adds, n/4)
	}

	if err := fake.Up(); err != nil {
		t.Fatal(err)
	}
	drain("the check's owedReleases emptied", func() bool { return last == 0 })
	t.Logf("%d Releases delivered and removed in %d writes of the check", n, removes)
	delivered := map[string]bool{}
	for _, r := range fake.Releases() {
		delivered[r.GetName()] = true
	}
	for i := range n {
		if name := fmt.Sprintf("w%d", i); !delivered[name] {
			t.Errorf("the Release of %s was never delivered", name)
		}
	}
}
