package stream

import (
	"errors"
	"fmt"
	"strings"
	"testing"

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
