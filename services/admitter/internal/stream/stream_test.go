package stream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/util/wait"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	sluicev1 "github.com/sluice-dev/sluice/gen/sluice/v1"
	"github.com/sluice-dev/sluice/pkg/shard"
)

func admit(name string, queue ...string) *admitterv1.Decision {
	cq := "cq"
	if len(queue) > 0 {
		cq = queue[0]
	}
	return &admitterv1.Decision{
		Workload:     &sluicev1.WorkloadRef{Namespace: "ns", Name: name},
		Action:       admitterv1.Decision_ACTION_ADMIT,
		ClusterQueue: cq,
	}
}

func forget(name string) *admitterv1.Decision {
	return &admitterv1.Decision{Workload: &sluicev1.WorkloadRef{Namespace: "ns", Name: name}, Action: admitterv1.Decision_ACTION_FORGET}
}

// names lists "ACTION:name" of every decision in the batches.
func names(batches []*admitterv1.WatchAdmissionsResponse) []string {
	var out []string
	for _, b := range batches {
		for _, d := range b.Decisions {
			out = append(out, strings.TrimPrefix(d.Action.String(), "ACTION_")+":"+d.Workload.Name)
		}
	}
	return out
}

func drain(s *Subscription) []*admitterv1.WatchAdmissionsResponse {
	var out []*admitterv1.WatchAdmissionsResponse
	for {
		select {
		case r, ok := <-s.C:
			if !ok {
				return out
			}
			out = append(out, r)
		default:
			return out
		}
	}
}

func TestSnapshotThenChanges(t *testing.T) {
	b := New(Options{})
	b.Publish(admit("a"), admit("b"))
	b.Publish(forget("a"))

	s, err := b.Subscribe("", Shard{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Resumed {
		t.Fatal("first subscription resumed, want a snapshot")
	}
	if len(s.Initial) != 1 || s.Initial[0].Kind != admitterv1.WatchAdmissionsResponse_KIND_SNAPSHOT_END {
		t.Fatalf("initial = %v, want one KIND_SNAPSHOT_END batch", s.Initial)
	}
	if got := names(s.Initial); len(got) != 1 || got[0] != "ADMIT:b" {
		t.Fatalf("snapshot = %v, want [ADMIT:b]", got)
	}
	if s.Initial[0].Revision != b.Revision() {
		t.Fatalf("snapshot revision %q, want current %q", s.Initial[0].Revision, b.Revision())
	}

	b.Publish(admit("c"))
	got := drain(s)
	if len(got) != 1 || got[0].Kind != admitterv1.WatchAdmissionsResponse_KIND_CHANGE || names(got)[0] != "ADMIT:c" {
		t.Fatalf("change = %v, want one KIND_CHANGE with ADMIT:c", got)
	}
	if got[0].Revision != b.Revision() {
		t.Fatalf("change revision %q, want %q", got[0].Revision, b.Revision())
	}
}

func TestEmptySnapshotStillEnds(t *testing.T) {
	b := New(Options{})
	s, err := b.Subscribe("", Shard{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if len(s.Initial) != 1 || s.Initial[0].Kind != admitterv1.WatchAdmissionsResponse_KIND_SNAPSHOT_END || s.Initial[0].Revision == "" {
		t.Fatalf("initial = %v, want one empty KIND_SNAPSHOT_END with a revision", s.Initial)
	}
}

func TestNoOpDecisionsAreDropped(t *testing.T) {
	b := New(Options{})
	if n := b.Publish(admit("a")); n != 1 {
		t.Fatalf("first admit recorded %d, want 1", n)
	}
	if n := b.Publish(admit("a")); n != 0 {
		t.Fatalf("repeated admit recorded %d, want 0", n)
	}
	if n := b.Publish(admit("a", "other")); n != 1 {
		t.Fatalf("changed admit recorded %d, want 1", n)
	}
	if n := b.Publish(forget("x")); n != 0 {
		t.Fatalf("forget of unknown recorded %d, want 0", n)
	}
	if n := b.Publish(forget("a")); n != 1 || b.InForce("ns/a") != nil {
		t.Fatalf("forget recorded %d (in force %v), want 1 and gone", n, b.InForce("ns/a"))
	}
}

func decision(action admitterv1.Decision_Action, name string) *admitterv1.Decision {
	return &admitterv1.Decision{Workload: &sluicev1.WorkloadRef{Namespace: "ns", Name: name}, Action: action, ReservationId: "r1"}
}

// Evictions and deletions are levels like admissions: a subscriber that
// connects after them still learns that pods must stop, and only FORGET
// takes them out of force.
func TestEvictAndDeleteStayInForce(t *testing.T) {
	b := New(Options{})
	b.Publish(admit("a"), admit("b"), admit("c"))
	b.Publish(decision(admitterv1.Decision_ACTION_EVICT, "a"), decision(admitterv1.Decision_ACTION_DELETE, "b"))
	if n := b.Publish(decision(admitterv1.Decision_ACTION_EVICT, "a")); n != 0 {
		t.Fatalf("repeated evict recorded %d, want 0", n)
	}
	s, err := b.Subscribe("", Shard{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got := map[string]bool{}
	for _, n := range names(s.Initial) {
		got[n] = true
	}
	want := map[string]bool{"EVICT:a": true, "DELETE:b": true, "ADMIT:c": true}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("snapshot = %v, want %v", got, want)
	}
	b.Publish(forget("a"))
	if d := b.InForce("ns/a"); d != nil {
		t.Fatalf("after FORGET, in force = %v, want nothing", d)
	}
	if d := b.InForce("ns/b"); d.GetAction() != admitterv1.Decision_ACTION_DELETE {
		t.Fatalf("in force for b = %v, want DELETE", d)
	}

	// A new epoch starts from the levels it is given, FORGETs dropped.
	b.Reset([]*admitterv1.Decision{decision(admitterv1.Decision_ACTION_EVICT, "x"), forget("y")})
	if b.InForce("ns/x").GetAction() != admitterv1.Decision_ACTION_EVICT || b.InForce("ns/y") != nil {
		t.Fatalf("after reset: x=%v y=%v, want EVICT and nothing", b.InForce("ns/x"), b.InForce("ns/y"))
	}
}

func TestResume(t *testing.T) {
	tests := []struct {
		name        string
		ring        int
		revision    func(b *Broadcaster, afterFirst string) string
		wantResumed bool
		want        []string
	}{
		{"within the ring replays what followed", 16,
			func(_ *Broadcaster, r string) string { return r }, true, []string{"ADMIT:c", "FORGET:a"}},
		{"at the current revision replays nothing", 16,
			func(b *Broadcaster, _ string) string { return b.Revision() }, true, nil},
		{"too old for the ring gets a snapshot", 1,
			func(_ *Broadcaster, r string) string { return r }, false, []string{"ADMIT:b", "ADMIT:c"}},
		{"another epoch gets a snapshot", 16,
			func(_ *Broadcaster, r string) string { return "other" + r }, false, []string{"ADMIT:b", "ADMIT:c"}},
		{"garbage gets a snapshot", 16,
			func(*Broadcaster, string) string { return "nonsense" }, false, []string{"ADMIT:b", "ADMIT:c"}},
		{"a revision from the future gets a snapshot", 16,
			func(b *Broadcaster, _ string) string { e, _, _ := strings.Cut(b.Revision(), ":"); return e + ":999" }, false, []string{"ADMIT:b", "ADMIT:c"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := New(Options{RingSize: tc.ring})
			b.Publish(admit("a"), admit("b"))
			afterFirst := b.Revision()
			b.Publish(admit("c"))
			b.Publish(forget("a"))
			s, err := b.Subscribe(tc.revision(b, afterFirst), Shard{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if s.Resumed != tc.wantResumed {
				t.Fatalf("Resumed = %v, want %v", s.Resumed, tc.wantResumed)
			}
			got := names(s.Initial)
			if !tc.wantResumed {
				// Snapshot order is not fixed; compare as sets.
				if len(got) != len(tc.want) || !containsAll(got, tc.want) {
					t.Fatalf("snapshot = %v, want %v", got, tc.want)
				}
				return
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("replay = %v, want %v", got, tc.want)
			}
		})
	}
}

func containsAll(got, want []string) bool {
	set := map[string]bool{}
	for _, g := range got {
		set[g] = true
	}
	for _, w := range want {
		if !set[w] {
			return false
		}
	}
	return true
}

func TestRingWrapsAround(t *testing.T) {
	b := New(Options{RingSize: 3})
	var revs []string
	for i := range 10 {
		b.Publish(admit(fmt.Sprintf("w%d", i)))
		revs = append(revs, b.Revision())
	}
	// After w6 the ring holds w7, w8, w9.
	s, err := b.Subscribe(revs[6], Shard{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := fmt.Sprint(names(s.Initial)); !s.Resumed || got != "[ADMIT:w7 ADMIT:w8 ADMIT:w9]" {
		t.Fatalf("resumed=%v replay=%s, want the last three", s.Resumed, got)
	}
	s2, _ := b.Subscribe(revs[5], Shard{})
	defer s2.Close()
	if s2.Resumed {
		t.Fatal("resume from a revision the ring no longer holds did not snapshot")
	}
}

func TestSnapshotIsChunked(t *testing.T) {
	b := New(Options{ChunkSize: 2})
	for i := range 5 {
		b.Publish(admit(fmt.Sprintf("w%d", i)))
	}
	s, _ := b.Subscribe("", Shard{})
	defer s.Close()
	if len(s.Initial) != 3 {
		t.Fatalf("got %d batches, want 3", len(s.Initial))
	}
	for i, r := range s.Initial[:2] {
		if r.Kind != admitterv1.WatchAdmissionsResponse_KIND_SNAPSHOT || r.Revision != "" {
			t.Fatalf("batch %d = kind %v revision %q, want KIND_SNAPSHOT without revision", i, r.Kind, r.Revision)
		}
	}
	last := s.Initial[2]
	if last.Kind != admitterv1.WatchAdmissionsResponse_KIND_SNAPSHOT_END || last.Revision != b.Revision() {
		t.Fatalf("last batch = kind %v revision %q, want KIND_SNAPSHOT_END at %q", last.Kind, last.Revision, b.Revision())
	}
	if len(names(s.Initial)) != 5 {
		t.Fatalf("snapshot has %d decisions, want 5", len(names(s.Initial)))
	}
}

func TestShards(t *testing.T) {
	b := New(Options{})
	const count = 3
	subs := make([]*Subscription, count)
	for i := range subs {
		s, err := b.Subscribe("", Shard{Index: uint32(i), Count: count})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		subs[i] = s
	}
	var all []*admitterv1.Decision
	for i := range 30 {
		all = append(all, admit(fmt.Sprintf("w%d", i)))
	}
	b.Publish(all...)
	total := 0
	for i, s := range subs {
		for _, name := range names(drain(s)) {
			wl := strings.TrimPrefix(name, "ADMIT:")
			if got := shard.Of("ns", wl, count); got != uint32(i) {
				t.Fatalf("shard %d received %s, which belongs to shard %d", i, wl, got)
			}
			total++
		}
	}
	if total != 30 {
		t.Fatalf("shards received %d decisions in all, want 30", total)
	}
	if _, err := b.Subscribe("", Shard{Index: 3, Count: 3}); err == nil {
		t.Fatal("Subscribe with index >= count succeeded")
	}
	if _, err := b.Subscribe("", Shard{Index: 1, Count: 1}); err == nil {
		t.Fatal("Subscribe with index 1 of a single shard succeeded")
	}
}

func TestSlowSubscriberIsDisconnectedWithoutBlocking(t *testing.T) {
	dropped := 0
	b := New(Options{BufferSize: 2, OnDisconnect: func() { dropped++ }})
	slow, _ := b.Subscribe("", Shard{})
	fast, _ := b.Subscribe("", Shard{})
	defer fast.Close()
	for i := range 5 {
		b.Publish(admit(fmt.Sprintf("w%d", i)))
		drain(fast)
	}
	got := drain(slow) // buffered batches, then closed
	if len(got) != 2 {
		t.Fatalf("slow subscriber got %d batches before the cut, want 2", len(got))
	}
	if _, ok := <-slow.C; ok {
		t.Fatal("slow subscriber's channel still open")
	}
	if !errors.Is(slow.Err(), ErrFellBehind) {
		t.Fatalf("Err = %v, want ErrFellBehind", slow.Err())
	}
	if dropped != 1 {
		t.Fatalf("OnDisconnect called %d times, want 1", dropped)
	}
	// The fast subscriber is still connected.
	b.Publish(admit("later"))
	if n := names(drain(fast)); len(n) != 1 {
		t.Fatalf("fast subscriber got %v after the slow one was cut", n)
	}
	// The slow one resumes from its last applied revision.
	resumed, _ := b.Subscribe(got[len(got)-1].Revision, Shard{})
	defer resumed.Close()
	if !resumed.Resumed || fmt.Sprint(names(resumed.Initial)) != "[ADMIT:w2 ADMIT:w3 ADMIT:w4 ADMIT:later]" {
		t.Fatalf("resume after the cut: resumed=%v %v", resumed.Resumed, names(resumed.Initial))
	}
}

func TestResetStartsANewEpoch(t *testing.T) {
	b := New(Options{})
	b.Publish(admit("a"))
	old := b.Revision()
	s, _ := b.Subscribe("", Shard{})
	b.Reset([]*admitterv1.Decision{admit("z")})
	if _, ok := <-s.C; ok {
		t.Fatal("subscriber not disconnected by Reset")
	}
	if !errors.Is(s.Err(), ErrClosed) {
		t.Fatalf("Err = %v, want ErrClosed", s.Err())
	}
	s2, _ := b.Subscribe(old, Shard{})
	defer s2.Close()
	if s2.Resumed || fmt.Sprint(names(s2.Initial)) != "[ADMIT:z]" {
		t.Fatalf("after Reset: resumed=%v %v, want a snapshot of [ADMIT:z]", s2.Resumed, names(s2.Initial))
	}
}

// withMessage is an admission carrying an n-byte message.
func withMessage(name string, n int) *admitterv1.Decision {
	d := admit(name)
	d.Message = strings.Repeat("m", n)
	return d
}

// withPodSets is an admission with n pod set infos, each with a node
// selector and labels.
func withPodSets(name string, n int) *admitterv1.Decision {
	d := admit(name)
	for i := range n {
		d.PodSetInfos = append(d.PodSetInfos, &sluicev1.PodSetInfo{
			Name:         fmt.Sprintf("ps-%d", i),
			NodeSelector: map[string]string{"topology.kubernetes.io/zone": "zone-a"},
			Labels:       map[string]string{"team": "ml", "tier": "batch"},
		})
	}
	return d
}

// entrySize is what the ring accounts for d.
func entrySize(d *admitterv1.Decision) int { return proto.Size(d) + ringEntryOverhead }

func sumSizes(ds []*admitterv1.Decision) int {
	n := 0
	for _, d := range ds {
		n += entrySize(d)
	}
	return n
}

// series is n decisions named <prefix>0 .. <prefix>n-1, made by mk.
func series(prefix string, n int, mk func(name string) *admitterv1.Decision) []*admitterv1.Decision {
	out := make([]*admitterv1.Decision, n)
	for i := range out {
		out[i] = mk(fmt.Sprintf("%s%d", prefix, i))
	}
	return out
}

// revAfter is the revision after the i-th published change (revs[i]), or
// the epoch's first revision for i < 0.
func revAfter(b *Broadcaster, revs []string, i int) string {
	if i < 0 {
		epoch, _, _ := strings.Cut(b.Revision(), ":")
		return epoch + ":0"
	}
	return revs[i]
}

// publishEach publishes ds one change at a time and returns the revision
// after each.
func publishEach(t *testing.T, b *Broadcaster, ds []*admitterv1.Decision) []string {
	t.Helper()
	revs := make([]string, len(ds))
	for i, d := range ds {
		if n := b.Publish(d); n != 1 {
			t.Fatalf("publish %d recorded %d, want 1", i, n)
		}
		revs[i] = b.Revision()
		entries, bytes := b.ringSize()
		if entries > b.opts.RingSize || bytes > b.opts.RingBytes {
			t.Fatalf("after publish %d the ring holds %d entries, %d bytes; bounds are %d, %d", i, entries, bytes, b.opts.RingSize, b.opts.RingBytes)
		}
	}
	return revs
}

func TestRingBytesEvictOldest(t *testing.T) {
	small := series("s", 6, func(n string) *admitterv1.Decision { return admit(n) })
	bigMsgs := series("w", 10, func(n string) *admitterv1.Decision { return withMessage(n, 4096) })
	podSets := series("w", 10, func(n string) *admitterv1.Decision { return withPodSets(n, 40) })
	huge := withMessage("huge", 1<<16)
	tests := []struct {
		name      string
		opts      Options
		decisions []*admitterv1.Decision
		wantHeld  int // the ring holds the last wantHeld decisions
	}{
		{"large messages keep only what fits",
			Options{RingBytes: 3*entrySize(bigMsgs[0]) + 100}, bigMsgs, 3},
		{"many pod set infos keep only what fits",
			Options{RingBytes: 4*entrySize(podSets[0]) + 100}, podSets, 4},
		{"one large decision evicts several small ones",
			Options{RingBytes: entrySize(bigMsgs[0]) + 2*entrySize(small[0]) + 10},
			append(append([]*admitterv1.Decision{}, small...), bigMsgs[0]), 3},
		{"a decision larger than the bound empties the ring",
			Options{RingBytes: 1 << 12}, append(append([]*admitterv1.Decision{}, small...), huge), 0},
		{"the entry bound still applies under a loose byte bound",
			Options{RingSize: 2}, small, 2},
		{"nothing is evicted while both bounds hold",
			Options{}, bigMsgs, len(bigMsgs)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := New(tc.opts)
			revs := publishEach(t, b, tc.decisions)
			held := tc.decisions[len(tc.decisions)-tc.wantHeld:]
			entries, bytes := b.ringSize()
			if entries != tc.wantHeld || bytes != sumSizes(held) {
				t.Fatalf("ring holds %d entries, %d bytes; want %d, %d", entries, bytes, tc.wantHeld, sumSizes(held))
			}
			// The held entries are the newest ones, in order.
			first := len(tc.decisions) - tc.wantHeld - 1 // revision just before the oldest held
			s, _ := b.Subscribe(revAfter(b, revs, first), Shard{})
			defer s.Close()
			var want []string
			for _, d := range held {
				want = append(want, "ADMIT:"+d.Workload.Name)
			}
			if !s.Resumed || fmt.Sprint(names(s.Initial)) != fmt.Sprint(want) {
				t.Fatalf("resume from before the oldest held: resumed=%v %v, want %v", s.Resumed, names(s.Initial), want)
			}
		})
	}
}

// A resume from a revision whose changes the byte bound evicted must go
// exactly as one the entry bound evicted: a snapshot, not a partial replay.
func TestResumeAfterByteEviction(t *testing.T) {
	ds := series("w", 5, func(n string) *admitterv1.Decision { return withMessage(n, 2048) })
	ds = append(ds, forget("w0"))
	// Both rings hold exactly the last three changes (w3, w4, FORGET w0).
	byBytes := New(Options{RingBytes: sumSizes(ds[3:]) + 10})
	byEntries := New(Options{RingSize: 3})
	revsBytes := publishEach(t, byBytes, ds)
	revsEntries := publishEach(t, byEntries, ds)
	if entries, _ := byBytes.ringSize(); entries != 3 {
		t.Fatalf("byte-bounded ring holds %d entries, want 3", entries)
	}
	snapshot := []string{"ADMIT:w1", "ADMIT:w2", "ADMIT:w3", "ADMIT:w4"}
	tests := []struct {
		name        string
		after       int // resume from the revision after ds[after]; -1 for ":0"
		wantResumed bool
		want        []string
	}{
		{"before anything was published gets a snapshot", -1, false, snapshot},
		{"evicted long ago gets a snapshot", 0, false, snapshot},
		{"one change short of the ring gets a snapshot", 1, false, snapshot},
		{"just before the oldest held replays the whole ring", 2, true, []string{"ADMIT:w3", "ADMIT:w4", "FORGET:w0"}},
		{"a held revision replays only what followed", 4, true, []string{"FORGET:w0"}},
		{"the current revision replays nothing", 5, true, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, side := range []struct {
				name string
				b    *Broadcaster
				revs []string
			}{{"bytes", byBytes, revsBytes}, {"entries", byEntries, revsEntries}} {
				s, err := side.b.Subscribe(revAfter(side.b, side.revs, tc.after), Shard{})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				got := names(s.Initial)
				if s.Resumed != tc.wantResumed {
					t.Fatalf("%s: Resumed = %v, want %v (%v)", side.name, s.Resumed, tc.wantResumed, got)
				}
				if tc.wantResumed {
					if fmt.Sprint(got) != fmt.Sprint(tc.want) {
						t.Fatalf("%s: replay = %v, want %v", side.name, got, tc.want)
					}
					continue
				}
				last := s.Initial[len(s.Initial)-1]
				if len(got) != len(tc.want) || !containsAll(got, tc.want) ||
					last.Kind != admitterv1.WatchAdmissionsResponse_KIND_SNAPSHOT_END || last.Revision != side.b.Revision() {
					t.Fatalf("%s: snapshot = %v ending %v at %q, want %v ending KIND_SNAPSHOT_END at %q",
						side.name, got, last.Kind, last.Revision, tc.want, side.b.Revision())
				}
			}
		})
	}
}

// ringModel is the eviction rule stated plainly, to check the circular
// buffer's bookkeeping against.
type ringModel struct {
	maxEntries, maxBytes int
	sizes                []int
	bytes                int
}

func (m *ringModel) add(size int) {
	if size > m.maxBytes {
		m.sizes, m.bytes = nil, 0
		return
	}
	for len(m.sizes) > 0 && (len(m.sizes) >= m.maxEntries || m.bytes+size > m.maxBytes) {
		m.bytes -= m.sizes[0]
		m.sizes = m.sizes[1:]
	}
	m.sizes = append(m.sizes, size)
	m.bytes += size
}

func TestRingBytesAfterWrapAndReset(t *testing.T) {
	// Sizes vary so evictions free one, several or no entries at a time.
	varied := func(n int) []*admitterv1.Decision {
		ds := make([]*admitterv1.Decision, n)
		for i := range ds {
			ds[i] = withMessage(fmt.Sprintf("w%d", i), (i*397)%1500)
		}
		return ds
	}
	tests := []struct {
		name      string
		opts      Options
		decisions []*admitterv1.Decision
	}{
		{"entry bound wraps many times", Options{RingSize: 3}, varied(50)},
		{"byte bound wraps many times", Options{RingBytes: 5000}, varied(200)},
		{"both bounds take turns", Options{RingSize: 8, RingBytes: 6000}, varied(300)},
		{"grows past the first allocation while evicting by bytes", Options{RingSize: 5000, RingBytes: 1 << 20}, varied(6000)},
		{"grows while wrapped when decisions shrink after evictions", Options{RingSize: 5000, RingBytes: 200_000},
			append(series("big", 500, func(n string) *admitterv1.Decision { return withMessage(n, 1500) }),
				series("small", 3000, func(n string) *admitterv1.Decision { return admit(n) })...)},
		{"forgets are accounted too", Options{RingSize: 4, RingBytes: 3000},
			append(varied(20), forget("w19"), forget("w18"), forget("w17"), forget("w16"), forget("w15"))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := New(tc.opts)
			m := &ringModel{maxEntries: b.opts.RingSize, maxBytes: b.opts.RingBytes}
			var revs []string
			for i, d := range tc.decisions {
				b.Publish(d)
				revs = append(revs, b.Revision())
				m.add(entrySize(d))
				if entries, bytes := b.ringSize(); entries != len(m.sizes) || bytes != m.bytes {
					t.Fatalf("after publish %d: ring holds %d entries, %d bytes; want %d, %d", i, entries, bytes, len(m.sizes), m.bytes)
				}
			}
			held := len(m.sizes)
			if held == len(tc.decisions) {
				t.Fatal("nothing was evicted; the case does not wrap")
			}
			// The held entries survived the wraps intact and in order.
			s, _ := b.Subscribe(revAfter(b, revs, len(revs)-held-1), Shard{})
			defer s.Close()
			var want []string
			for _, d := range tc.decisions[len(tc.decisions)-held:] {
				want = append(want, strings.TrimPrefix(d.Action.String(), "ACTION_")+":"+d.Workload.Name)
			}
			if !s.Resumed || fmt.Sprint(names(s.Initial)) != fmt.Sprint(want) {
				t.Fatalf("replay of the held entries: resumed=%v %v, want %v", s.Resumed, names(s.Initial), want)
			}

			b.Reset(nil)
			if entries, bytes := b.ringSize(); entries != 0 || bytes != 0 {
				t.Fatalf("after Reset: ring holds %d entries, %d bytes; want 0, 0", entries, bytes)
			}
			d := withMessage("after-reset", 100)
			b.Publish(d)
			if entries, bytes := b.ringSize(); entries != 1 || bytes != entrySize(d) {
				t.Fatalf("after Reset and one publish: ring holds %d entries, %d bytes; want 1, %d", entries, bytes, entrySize(d))
			}
		})
	}
}

// A change older than RingAge leaves the ring when the next one comes: a
// resume from before it gets a snapshot, one from after it a replay.
func TestRingAgeEvictsOldChanges(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := New(Options{RingAge: 5 * time.Minute, Now: func() time.Time { return now }})
	early := publishEach(t, b, series("early", 3, func(n string) *admitterv1.Decision { return admit(n) }))
	now = now.Add(3 * time.Minute)
	late := publishEach(t, b, series("late", 2, func(n string) *admitterv1.Decision { return admit(n) }))
	now = now.Add(3 * time.Minute) // the early ones are 6 minutes old, the late ones 3
	publishEach(t, b, []*admitterv1.Decision{admit("now")})

	if entries, _ := b.ringSize(); entries != 3 {
		t.Fatalf("ring holds %d entries, want the 3 younger than RingAge", entries)
	}
	fromEarly, err := b.Subscribe(early[1], Shard{})
	if err != nil {
		t.Fatal(err)
	}
	defer fromEarly.Close()
	if fromEarly.Resumed {
		t.Errorf("resume from an expired change replayed %v, want a snapshot", names(fromEarly.Initial))
	}
	fromLate, err := b.Subscribe(late[0], Shard{})
	if err != nil {
		t.Fatal(err)
	}
	defer fromLate.Close()
	if want := []string{"ADMIT:late1", "ADMIT:now"}; !fromLate.Resumed || fmt.Sprint(names(fromLate.Initial)) != fmt.Sprint(want) {
		t.Errorf("resume from a held change: resumed=%t %v, want %v", fromLate.Resumed, names(fromLate.Initial), want)
	}
}

// Run empties the ring of aged changes with nothing published, says so,
// and an emptied ring gives back the room it grew to.
func TestRunExpiresWithoutPublishing(t *testing.T) {
	var held atomic.Int64
	b := New(Options{RingAge: 40 * time.Millisecond, OnRing: func(n int) { held.Store(int64(n)) }})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go b.Run(ctx)
	b.Publish(series("w", 3*initialRing, func(n string) *admitterv1.Decision { return admit(n) })...)
	if n := held.Load(); n != 3*initialRing {
		t.Fatalf("the ring says it holds %d changes right after publishing, want %d", n, 3*initialRing)
	}
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return held.Load() == 0, nil
	})
	if err != nil {
		t.Fatalf("the ring still says it holds %d changes: %v", held.Load(), err)
	}
	b.mu.Lock()
	entries, room := b.ringLen, len(b.ring)
	b.mu.Unlock()
	if entries != 0 || room != initialRing {
		t.Errorf("ring holds %d changes in room for %d, want 0 in %d", entries, room, initialRing)
	}
	s, err := b.Subscribe(b.Revision(), Shard{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.Resumed || len(s.Initial) != 0 {
		t.Errorf("resume from the current revision after expiry: resumed=%t %v, want an empty replay", s.Resumed, names(s.Initial))
	}
}
