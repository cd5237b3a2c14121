package releases

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/services/admitter/internal/checks"
	"github.com/sluice-dev/sluice/services/admitter/internal/metrics"
	"github.com/sluice-dev/sluice/test/fakecheck"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func owed(uid, rid string, since time.Time) v1alpha1.OwedRelease {
	return v1alpha1.OwedRelease{Namespace: "ns", Name: "w-" + uid, UID: types.UID(uid), ReservationID: rid, Reason: v1alpha1.ReleaseDeleted, Since: metav1.NewTime(since)}
}

func keys(list []v1alpha1.OwedRelease) string {
	out := ""
	for _, o := range list {
		out += string(o.UID) + "/" + o.ReservationID + " "
	}
	return out
}

func TestApplyOwed(t *testing.T) {
	fullList := make([]v1alpha1.OwedRelease, MaxOwed-1)
	for i := range fullList {
		fullList[i] = owed("f"+strconv.Itoa(i), "r", t0)
	}
	for _, tt := range []struct {
		name      string
		list      []v1alpha1.OwedRelease
		adds      []v1alpha1.OwedRelease
		removes   []v1alpha1.OwedRelease
		want      string
		wantAdded int
	}{
		{name: "add to empty, oldest first",
			adds: []v1alpha1.OwedRelease{owed("b", "r", t0.Add(time.Second)), owed("a", "r", t0)},
			want: "a/r b/r ", wantAdded: 2},
		{name: "an entry already there is kept as it is",
			list: []v1alpha1.OwedRelease{owed("a", "r", t0)},
			adds: []v1alpha1.OwedRelease{owed("a", "r", t0.Add(time.Hour))},
			want: "a/r ", wantAdded: 0},
		{name: "another reservation of the same workload is another entry",
			list: []v1alpha1.OwedRelease{owed("a", "r1", t0)},
			adds: []v1alpha1.OwedRelease{owed("a", "r2", t0)},
			want: "a/r1 a/r2 ", wantAdded: 1},
		{name: "remove keeps the others in order",
			list:    []v1alpha1.OwedRelease{owed("a", "r", t0), owed("b", "r", t0), owed("c", "r", t0)},
			removes: []v1alpha1.OwedRelease{owed("b", "r", t0)},
			want:    "a/r c/r "},
		{name: "remove the last empties it",
			list:    []v1alpha1.OwedRelease{owed("a", "r", t0)},
			removes: []v1alpha1.OwedRelease{owed("a", "r", t0)},
			want:    ""},
		{name: "no more than MaxOwed",
			list:      fullList,
			adds:      []v1alpha1.OwedRelease{owed("x", "r", t0), owed("y", "r", t0.Add(time.Second))},
			want:      keys(append(fullList[:len(fullList):len(fullList)], owed("x", "r", t0))),
			wantAdded: 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			adds := map[entryKey]v1alpha1.OwedRelease{}
			for _, o := range tt.adds {
				adds[keyOf(o)] = o
			}
			removes := map[entryKey]bool{}
			for _, o := range tt.removes {
				removes[keyOf(o)] = true
			}
			got, added := applyOwed(tt.list, adds, removes)
			if keys(got) != tt.want || added != tt.wantAdded {
				t.Fatalf("got %q (%d added), want %q (%d added)", keys(got), added, tt.want, tt.wantAdded)
			}
			for _, o := range got {
				if o.UID == "a" && o.ReservationID == "r" && !o.Since.Time.Equal(t0) {
					t.Fatalf("entry a/r since %v, want the first hand-over's %v kept", o.Since, t0)
				}
			}
		})
	}
}

// The ledger's patch carries only owedReleases (and the resourceVersion
// that guards it), and a patch of the conditions made from a version with
// other entries carries none: neither writer drops the other's fields.
func TestOwedPatchesLeaveOtherFieldsAlone(t *testing.T) {
	base := &v1alpha1.AdmissionCheck{ObjectMeta: metav1.ObjectMeta{Name: "c", ResourceVersion: "7"}, Status: v1alpha1.AdmissionCheckStatus{
		Conditions:   []metav1.Condition{{Type: v1alpha1.AdmissionCheckActive, Status: metav1.ConditionTrue, Reason: "Ready"}},
		Provider:     &v1alpha1.ProviderInfo{Name: "p"},
		OwedReleases: []v1alpha1.OwedRelease{owed("a", "r", t0)},
	}}
	want := base.DeepCopy()
	want.Status.OwedReleases, _ = applyOwed(base.Status.OwedReleases, map[entryKey]v1alpha1.OwedRelease{{uid: "b", reservationID: "r"}: owed("b", "r", t0)}, nil)
	data, err := client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}).Data(want)
	if err != nil {
		t.Fatal(err)
	}
	var patch map[string]map[string]any
	if err := json.Unmarshal(data, &patch); err != nil {
		t.Fatal(err)
	}
	if len(patch) != 2 || len(patch["status"]) != 1 || patch["status"]["owedReleases"] == nil || patch["metadata"]["resourceVersion"] != "7" {
		t.Fatalf("ledger patch %s, want only status.owedReleases guarded by resourceVersion 7", data)
	}

	probed := base.DeepCopy()
	probed.Status.Conditions[0].Status = metav1.ConditionFalse
	data, err = client.MergeFrom(base).Data(probed)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &patch); err != nil {
		t.Fatal(err)
	}
	if _, ok := patch["status"]["owedReleases"]; ok {
		t.Fatalf("a conditions patch %s carries owedReleases", data)
	}
}

func deletedWorkload(deleted time.Time, checks ...string) *v1alpha1.Workload {
	wl := &v1alpha1.Workload{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w", UID: "u", DeletionTimestamp: &metav1.Time{Time: deleted}}}
	for _, c := range checks {
		wl.Status.PendingReleases = append(wl.Status.PendingReleases, v1alpha1.PendingRelease{Name: c, ReservationID: "r", Reason: v1alpha1.ReleaseDeleted})
	}
	return wl
}

func check(name, rv string, entries ...v1alpha1.OwedRelease) *v1alpha1.AdmissionCheck {
	return &v1alpha1.AdmissionCheck{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), ResourceVersion: rv},
		Status:     v1alpha1.AdmissionCheckStatus{Provider: &v1alpha1.ProviderInfo{Name: name + ".example.com"}, OwedReleases: entries},
	}
}

// HandOver waits for the release wait, counted from the deletion, and for
// a failed attempt of every outstanding Release in this process; then it
// asks for the entries to be written, and hands over once they are.
func TestHandOverWaitsThenHandsOver(t *testing.T) {
	acs := map[string]*v1alpha1.AdmissionCheck{}
	var changed []types.NamespacedName
	tr := New(Config{Wait: time.Minute, Check: func(n string) *v1alpha1.AdmissionCheck { return acs[n] },
		Changed: func(k types.NamespacedName) { changed = append(changed, k) }})
	defer tr.q.ShutDown()
	defer tr.ledger.q.ShutDown()
	acs["a"], acs["b"] = check("a", "1"), check("b", "1")
	tr.SetCheck(acs["a"])
	tr.SetCheck(acs["b"])
	wl := deletedWorkload(t0, "a", "b")
	tr.Enqueue(wl)
	items := []item{itemOf(wl, wl.Status.PendingReleases[0]), itemOf(wl, wl.Status.PendingReleases[1])}

	if h := tr.HandOver(wl, t0.Add(59*time.Second)); h.Stage != Waiting || !h.Until.Equal(t0.Add(time.Minute)) {
		t.Fatalf("within the wait: %+v, want Waiting until %v", h, t0.Add(time.Minute))
	}
	if h := tr.HandOver(wl, t0.Add(time.Hour)); h.Stage != Waiting || !h.Until.IsZero() {
		t.Fatalf("wait over, nothing failed in this process: %+v, want Waiting for a failure", h)
	}
	tr.fail(items[0])
	if h := tr.HandOver(wl, t0.Add(time.Hour)); h.Stage != Waiting {
		t.Fatalf("wait over, one of two failed: %+v, want Waiting", h)
	}
	tr.fail(items[1])
	if h := tr.HandOver(wl, t0.Add(time.Hour)); h.Stage != Writing {
		t.Fatalf("wait over, both failed: %+v, want Writing", h)
	}
	if n := tr.ledger.q.Len(); n != 2 {
		t.Fatalf("%d checks queued for a write, want 2", n)
	}
	// The write of a lands (its answer observed); b's not yet.
	since := t0.Add(time.Hour)
	tr.SetCheck(check("a", "2", v1alpha1.OwedRelease{Namespace: "ns", Name: "w", UID: "u", ReservationID: "r", Reason: v1alpha1.ReleaseDeleted, Since: metav1.NewTime(since)}))
	if h := tr.HandOver(wl, t0.Add(time.Hour)); h.Stage != Writing {
		t.Fatalf("one of two written: %+v, want Writing", h)
	}
	tr.SetCheck(check("b", "2", v1alpha1.OwedRelease{Namespace: "ns", Name: "w", UID: "u", ReservationID: "r", Reason: v1alpha1.ReleaseDeleted, Since: metav1.NewTime(since)}))
	h := tr.HandOver(wl, t0.Add(time.Hour))
	if h.Stage != HandedOver || fmt.Sprint(h.Checks) != "[{a a.example.com r} {b b.example.com r}]" {
		t.Fatalf("both written: %+v, want HandedOver to a and b with their providers", h)
	}
	// The entries are Releases owed by the checks now: queued to be sent.
	for _, c := range []string{"a", "b"} {
		if it := (item{key: types.NamespacedName{Namespace: "ns", Name: "w"}, uid: "u", check: c, reservationID: "r", reason: v1alpha1.ReleaseDeleted, owed: true}); !tr.isLive(it) {
			t.Errorf("the entry of %s is not queued to be sent", c)
		}
	}
	// The workload gone, its own items go; the checks' stay.
	tr.Forget(types.NamespacedName{Namespace: "ns", Name: "w"})
	if tr.isLive(items[0]) {
		t.Error("the workload's own item outlived Forget")
	}
	if it := (item{key: types.NamespacedName{Namespace: "ns", Name: "w"}, uid: "u", check: "a", reservationID: "r", reason: v1alpha1.ReleaseDeleted, owed: true}); !tr.isLive(it) {
		t.Error("Forget of the workload dropped the Release its check holds")
	}
}

// An acknowledged Release is not handed over, and a full list keeps the
// deletion waiting, said once.
func TestHandOverFullAndAcknowledged(t *testing.T) {
	entries := make([]v1alpha1.OwedRelease, MaxOwed)
	for i := range entries {
		entries[i] = owed("o"+strconv.Itoa(i), "r", t0)
	}
	acs := map[string]*v1alpha1.AdmissionCheck{"full": check("full", "1", entries...), "ok": check("ok", "1")}
	tr := New(Config{Wait: 0, Check: func(n string) *v1alpha1.AdmissionCheck { return acs[n] }})
	defer tr.q.ShutDown()
	defer tr.ledger.q.ShutDown()
	tr.SetCheck(acs["full"])
	tr.SetCheck(acs["ok"])
	wl := deletedWorkload(t0, "full", "ok")
	tr.Enqueue(wl)
	tr.fail(itemOf(wl, wl.Status.PendingReleases[0]))
	tr.ack(itemOf(wl, wl.Status.PendingReleases[1]))
	h := tr.HandOver(wl, t0)
	if h.Stage != Full || !h.FirstFull || len(h.Checks) != 1 || h.Checks[0].Check != "full" {
		t.Fatalf("%+v, want Full naming check full, first time", h)
	}
	if h := tr.HandOver(wl, t0); h.Stage != Full || h.FirstFull {
		t.Fatalf("again: %+v, want Full, not the first time", h)
	}
	if n := tr.ledger.q.Len(); n != 0 {
		t.Fatalf("%d checks queued for a write, want none: ok's Release was acknowledged, full has no room", n)
	}
}

// SetCheck queues what a check's owedReleases hold; an entry that left
// the list and a deleted check are forgotten, and the gauge follows.
func TestSetCheckQueuesOwedReleases(t *testing.T) {
	m, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	tr := New(Config{Metrics: m})
	defer tr.q.ShutDown()
	defer tr.ledger.q.ShutDown()
	tr.SetCheck(check("c", "5", owed("a", "r", t0), owed("b", "r", t0)))
	if tr.q.Len() != 2 || testutil.ToFloat64(m.OwedReleases.WithLabelValues("c")) != 2 {
		t.Fatalf("queued %d, gauge %v; want 2 and 2", tr.q.Len(), testutil.ToFloat64(m.OwedReleases.WithLabelValues("c")))
	}
	tr.SetCheck(check("c", "4")) // older: ignored
	if !tr.isLive(owedItem("c", owed("b", "r", t0))) {
		t.Fatal("an older version of the check dropped an entry")
	}
	tr.SetCheck(check("c", "6", owed("a", "r", t0)))
	if tr.isLive(owedItem("c", owed("b", "r", t0))) || !tr.isLive(owedItem("c", owed("a", "r", t0))) {
		t.Fatal("after b left the list: want only a owed")
	}
	tr.DeleteCheck("c")
	if tr.isLive(owedItem("c", owed("a", "r", t0))) {
		t.Fatal("the entries of a deleted check outlived it")
	}
	if n := testutil.CollectAndCount(m.OwedReleases); n != 0 {
		t.Fatalf("%d gauge series after the check's deletion, want none", n)
	}
}

// A Release that fails tells Changed once, the first time (a deleted
// workload may now hand it over); acknowledged, it tells again and asks
// for the check's entry of it to go.
func TestProcessTellsFirstFailureAndAcknowledgement(t *testing.T) {
	ctx := context.Background()
	m, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	fake := fakecheck.StartT(t, fakecheck.WithCapabilities(checksv1.Capability_CAPABILITY_RELEASE))
	fake.SetReleaseError(codes.Unavailable)
	pool := checks.NewPool(logr.Discard(), m)
	defer pool.Close()
	ac := check("c", "1", v1alpha1.OwedRelease{Namespace: "ns", Name: "w", UID: "u", ReservationID: "r", Reason: v1alpha1.ReleaseDeleted, Since: metav1.NewTime(t0)})
	ac.Spec.Endpoint = fake.Target()
	ac.Status.Provider.Capabilities = []string{checksv1.Capability_CAPABILITY_RELEASE.String()}
	var changed []types.NamespacedName
	tr := New(Config{Checks: pool, Check: func(string) *v1alpha1.AdmissionCheck { return ac }, Changed: func(k types.NamespacedName) { changed = append(changed, k) }})
	defer tr.q.ShutDown()
	defer tr.ledger.q.ShutDown()
	tr.SetCheck(ac)
	wl := deletedWorkload(t0, "c")
	tr.Enqueue(wl)
	it := itemOf(wl, wl.Status.PendingReleases[0])

	tr.process(ctx, it)
	tr.process(ctx, it)
	if len(changed) != 1 || !tr.failed[it] {
		t.Fatalf("after two failures Changed was told %v, want once", changed)
	}
	fake.SetReleaseError(codes.OK)
	tr.process(ctx, it)
	if len(changed) != 2 || !tr.isAcked(it) || tr.isLive(it) {
		t.Fatalf("after the acknowledgement: Changed told %v, acked %v; want told again and acked", changed, tr.isAcked(it))
	}
	if !tr.ledger.removes["c"][it.entry()] {
		t.Fatal("the check's entry of the acknowledged Release is not to be removed")
	}
	// A Release whose workload is gone is not sent any more.
	wl2 := deletedWorkload(t0, "c")
	wl2.Name, wl2.UID = "w2", "u2"
	tr.Enqueue(wl2)
	tr.Forget(types.NamespacedName{Namespace: "ns", Name: "w2"})
	before := len(fake.Releases())
	tr.process(ctx, itemOf(wl2, wl2.Status.PendingReleases[0]))
	if n := len(fake.Releases()) - before; n != 0 {
		t.Fatalf("%d Release calls for a forgotten workload, want none", n)
	}
}
