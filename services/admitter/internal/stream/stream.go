// Package stream is the admitter's decision broadcaster behind
// WatchAdmissions. It keeps every decision in force (a level per workload
// whose pods must be in some state: admitted, evicting or deleted) and a
// bounded ring of recent changes, each numbered by a revision
// "<epoch>:<seq>". A new subscriber gets a snapshot of the decisions in
// force, or, when it names a revision of this epoch still in the ring, only
// the changes after it. The ring is bounded in entries, in bytes and in
// age, so a burst of large decisions cannot grow the admitter's memory
// unchecked, and what a burst left behind is given back once it is old.
// Publishing never blocks: a subscriber whose buffer is full is disconnected
// and resumes (or re-snapshots) when it reconnects.
package stream

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	"github.com/sluice-dev/sluice/pkg/shard"
	"github.com/sluice-dev/sluice/services/admitter/internal/shrink"
)

// Defaults for Options.
const (
	DefaultRingSize   = 16384
	DefaultRingBytes  = 8 << 20
	DefaultRingAge    = 2 * time.Minute
	DefaultBufferSize = 1024
	DefaultChunkSize  = 500
)

// ringEntryOverhead is added to each change's encoded size: proto.Size counts
// wire bytes only, and an entry also costs its ring slot and the decoded
// message's headers. It also keeps tiny decisions from looking free.
const ringEntryOverhead = 64

// ErrFellBehind ends a subscription whose buffer overflowed.
var ErrFellBehind = errors.New("subscriber fell behind the decision stream; reconnect with the last revision applied")

// ErrClosed ends subscriptions when the broadcaster resets (a new epoch).
var ErrClosed = errors.New("decision stream restarted; reconnect for a snapshot")

// Options tune a Broadcaster; zero fields take the defaults.
type Options struct {
	// RingSize is how many recent decisions a resume can replay.
	RingSize int
	// RingBytes bounds the ring's accounted size (each decision's encoded
	// size plus a fixed per-entry overhead); the oldest changes go first
	// when either bound would be exceeded.
	RingBytes int
	// BufferSize is how many change batches may wait for one subscriber.
	BufferSize int
	// ChunkSize is the most decisions per snapshot or replay batch.
	ChunkSize int
	// RingAge is how long a change stays in the ring. A subscriber away
	// for longer gets a snapshot, which by then costs little more than the
	// replay; the changes of a burst do not stay in memory once the burst
	// has drained.
	RingAge time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// OnSend, if set, is told of every decision a subscriber was sent (see
	// Subscription.Sent).
	OnSend func(action admitterv1.Decision_Action)
	// OnDisconnect, if set, is told when a slow subscriber is dropped.
	OnDisconnect func()
	// OnRing, if set, is told how many changes the ring holds whenever
	// that may have changed.
	OnRing func(changes int)
}

type change struct {
	seq      uint64
	decision *admitterv1.Decision
	size     int // accounted bytes, kept so eviction subtracts exactly what was added
	at       time.Time
}

// Broadcaster fans decisions out to subscribers. It is safe for concurrent
// use.
type Broadcaster struct {
	opts Options

	mu      sync.Mutex
	epoch   string
	seq     uint64
	inForce map[string]*admitterv1.Decision
	// ring holds the last ringLen changes (seqs seq-ringLen+1 .. seq) in a
	// circular buffer starting at ringHead. Its length grows up to RingSize;
	// the byte bound can keep ringLen below it.
	ring      []change
	ringHead  int
	ringLen   int
	ringBytes int
	subs      map[*Subscription]struct{}
}

// New returns a Broadcaster with a fresh random epoch and nothing in force.
func New(opts Options) *Broadcaster {
	if opts.RingSize <= 0 {
		opts.RingSize = DefaultRingSize
	}
	if opts.RingBytes <= 0 {
		opts.RingBytes = DefaultRingBytes
	}
	if opts.BufferSize <= 0 {
		opts.BufferSize = DefaultBufferSize
	}
	if opts.ChunkSize <= 0 {
		opts.ChunkSize = DefaultChunkSize
	}
	if opts.RingAge <= 0 {
		opts.RingAge = DefaultRingAge
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	b := &Broadcaster{opts: opts, subs: map[*Subscription]struct{}{}}
	b.resetLocked(nil)
	return b
}

// Key is the stream's name for a workload: "<namespace>/<name>".
func Key(d *admitterv1.Decision) string {
	return d.GetWorkload().GetNamespace() + "/" + d.GetWorkload().GetName()
}

// Reset starts a new epoch with inForce as the decisions in force, and
// disconnects every subscriber (they reconnect for a snapshot). The admitter
// calls it when it becomes leader.
func (b *Broadcaster) Reset(inForce []*admitterv1.Decision) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for s := range b.subs {
		s.closeLocked(ErrClosed)
	}
	b.subs = map[*Subscription]struct{}{}
	b.resetLocked(inForce)
}

func (b *Broadcaster) resetLocked(inForce []*admitterv1.Decision) {
	b.epoch = newEpoch()
	b.seq = 0
	b.ring = make([]change, min(b.opts.RingSize, initialRing))
	b.ringHead, b.ringLen, b.ringBytes = 0, 0, 0
	b.inForce = make(map[string]*admitterv1.Decision, len(inForce))
	for _, d := range inForce {
		if holdsLevel(d.GetAction()) {
			b.inForce[Key(d)] = d
		}
	}
	b.reportRingLocked()
}

func newEpoch() string {
	var buf [6]byte
	if _, err := rand.Read(buf[:]); err != nil {
		panic(fmt.Sprintf("stream: read random epoch: %v", err))
	}
	return hex.EncodeToString(buf[:])
}

// Revision is the current revision.
func (b *Broadcaster) Revision() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.revisionLocked()
}

func (b *Broadcaster) revisionLocked() string {
	return b.epoch + ":" + strconv.FormatUint(b.seq, 10)
}

// InForce returns the decision in force for the workload
// "<namespace>/<name>", or nil.
func (b *Broadcaster) InForce(key string) *admitterv1.Decision {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inForce[key]
}

// holdsLevel reports whether a decision with action stays in force until
// another replaces it. FORGET only clears.
func holdsLevel(action admitterv1.Decision_Action) bool {
	switch action {
	case admitterv1.Decision_ACTION_ADMIT, admitterv1.Decision_ACTION_EVICT, admitterv1.Decision_ACTION_DELETE:
		return true
	}
	return false
}

// Publish records decisions as one change and sends them to the
// subscribers whose shard they fall in. A decision that changes nothing
// (one equal to the decision in force, a FORGET for a workload without a
// decision in force) is dropped. It returns how many decisions were
// recorded.
func (b *Broadcaster) Publish(decisions ...*admitterv1.Decision) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	var recorded []change
	for _, d := range decisions {
		key := Key(d)
		cur, inForce := b.inForce[key]
		switch {
		case holdsLevel(d.GetAction()):
			if inForce && proto.Equal(cur, d) {
				continue
			}
			b.inForce[key] = d
		case d.GetAction() == admitterv1.Decision_ACTION_FORGET:
			if !inForce {
				continue
			}
			shrink.Delete(&b.inForce, key)
		default:
			continue
		}
		b.seq++
		c := change{seq: b.seq, decision: d, size: proto.Size(d) + ringEntryOverhead, at: b.opts.Now()}
		b.appendRingLocked(c)
		recorded = append(recorded, c)
	}
	if len(recorded) == 0 {
		return 0
	}
	b.reportRingLocked()
	for s := range b.subs {
		var batch []*admitterv1.Decision
		for _, c := range recorded {
			if contains(s.shard, c.decision) {
				batch = append(batch, c.decision)
			}
		}
		if len(batch) == 0 {
			continue
		}
		resp := &admitterv1.WatchAdmissionsResponse{
			Kind:      admitterv1.WatchAdmissionsResponse_KIND_CHANGE,
			Revision:  b.revisionLocked(),
			Decisions: batch,
		}
		select {
		case s.ch <- resp:
		default:
			s.closeLocked(ErrFellBehind)
			delete(b.subs, s)
			if b.opts.OnDisconnect != nil {
				b.opts.OnDisconnect()
			}
		}
	}
	return len(recorded)
}

// appendRingLocked adds c, first evicting the oldest changes until both
// bounds hold. Since changes leave oldest first, the ring always holds a
// contiguous run of seqs ending at b.seq, which is what sinceLocked relies
// on to send resumes from evicted revisions to a snapshot.
func (b *Broadcaster) appendRingLocked(c change) {
	if c.size > b.opts.RingBytes {
		// It can never fit: hold nothing, so every resume from before it
		// snapshots, as it would had it been evicted at once.
		for b.ringLen > 0 {
			b.evictOldestLocked()
		}
		return
	}
	b.expireLocked(c.at)
	for b.ringLen > 0 && (b.ringLen >= b.opts.RingSize || b.ringBytes+c.size > b.opts.RingBytes) {
		b.evictOldestLocked()
	}
	if b.ringLen == len(b.ring) {
		b.growRingLocked()
	}
	b.ring[(b.ringHead+b.ringLen)%len(b.ring)] = c
	b.ringLen++
	b.ringBytes += c.size
}

func (b *Broadcaster) evictOldestLocked() {
	b.ringBytes -= b.ring[b.ringHead].size
	b.ring[b.ringHead] = change{} // let the decision be collected
	b.ringHead = (b.ringHead + 1) % len(b.ring)
	b.ringLen--
}

// initialRing is the ring buffer's length when it is made, and what an
// emptied ring shrinks back to.
const initialRing = 1024

// expireLocked evicts the changes older than RingAge at now, and gives
// back the room of a grown ring once nothing is left in it.
func (b *Broadcaster) expireLocked(now time.Time) {
	for b.ringLen > 0 && now.Sub(b.ring[b.ringHead].at) > b.opts.RingAge {
		b.evictOldestLocked()
	}
	if b.ringLen == 0 && len(b.ring) > initialRing {
		b.ring, b.ringHead = make([]change, min(b.opts.RingSize, initialRing)), 0
	}
}

// Run evicts aged changes until ctx ends, so that they go even when
// nothing is published any more.
func (b *Broadcaster) Run(ctx context.Context) {
	tick := time.NewTicker(b.opts.RingAge / 4)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			b.mu.Lock()
			b.expireLocked(b.opts.Now())
			b.reportRingLocked()
			b.mu.Unlock()
		}
	}
}

func (b *Broadcaster) reportRingLocked() {
	if b.opts.OnRing != nil {
		b.opts.OnRing(b.ringLen)
	}
}

// growRingLocked doubles the buffer, up to RingSize, so the entry bound does
// not cost its full allocation up front.
func (b *Broadcaster) growRingLocked() {
	grown := make([]change, min(max(2*len(b.ring), 1), b.opts.RingSize))
	for i := range b.ringLen {
		grown[i] = b.ring[(b.ringHead+i)%len(b.ring)]
	}
	b.ring, b.ringHead = grown, 0
}

// ringSize reports the ring's entries and accounted bytes.
func (b *Broadcaster) ringSize() (entries, bytes int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ringLen, b.ringBytes
}

// since returns the ring's changes after seq, oldest first, and whether the
// ring still holds every one of them.
func (b *Broadcaster) sinceLocked(seq uint64) ([]change, bool) {
	if seq > b.seq {
		return nil, false
	}
	if seq == b.seq {
		return nil, true
	}
	oldest := b.seq - uint64(b.ringLen) + 1
	if seq+1 < oldest {
		return nil, false
	}
	n := int(b.seq - seq)
	out := make([]change, 0, n)
	for i := b.ringLen - n; i < b.ringLen; i++ {
		out = append(out, b.ring[(b.ringHead+i)%len(b.ring)])
	}
	return out, true
}

// Shard selects the decisions of one grouper replica's workloads, by the
// rule of pkg/shard; Count 0 or 1 selects everything.
type Shard = shard.Shard

func contains(s Shard, d *admitterv1.Decision) bool {
	return s.Owns(d.GetWorkload().GetNamespace(), d.GetWorkload().GetName())
}

// Subscription is one subscriber's view of the stream: Initial first
// (a snapshot or the replayed changes), then every batch from C. C is
// closed when the subscription ends; Err says why.
type Subscription struct {
	// Initial are the batches to send before anything from C.
	Initial []*admitterv1.WatchAdmissionsResponse
	// C delivers change batches.
	C <-chan *admitterv1.WatchAdmissionsResponse
	// Resumed is true when Initial replays changes instead of a snapshot.
	Resumed bool

	b      *Broadcaster
	shard  Shard
	ch     chan *admitterv1.WatchAdmissionsResponse
	err    error
	closed bool
}

// Subscribe opens a subscription for shard. resumeRevision is the last
// revision the subscriber applied; when it belongs to this epoch and the
// ring still holds what followed, Initial replays those changes, otherwise
// Initial is a snapshot (possibly several KIND_SNAPSHOT batches, always
// ending with KIND_SNAPSHOT_END, which alone carries the revision).
func (b *Broadcaster) Subscribe(resumeRevision string, shard Shard) (*Subscription, error) {
	if err := shard.Validate(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s := &Subscription{b: b, shard: shard, ch: make(chan *admitterv1.WatchAdmissionsResponse, b.opts.BufferSize)}
	s.C = s.ch
	if seq, ok := b.parseLocked(resumeRevision); ok {
		if changes, ok := b.sinceLocked(seq); ok {
			s.Resumed = true
			var ds []*admitterv1.Decision
			for _, c := range changes {
				if contains(shard, c.decision) {
					ds = append(ds, c.decision)
				}
			}
			s.Initial = b.chunksLocked(ds, admitterv1.WatchAdmissionsResponse_KIND_CHANGE, admitterv1.WatchAdmissionsResponse_KIND_CHANGE)
		}
	}
	if !s.Resumed {
		ds := make([]*admitterv1.Decision, 0, len(b.inForce))
		for _, d := range b.inForce {
			if contains(shard, d) {
				ds = append(ds, d)
			}
		}
		s.Initial = b.chunksLocked(ds, admitterv1.WatchAdmissionsResponse_KIND_SNAPSHOT, admitterv1.WatchAdmissionsResponse_KIND_SNAPSHOT_END)
		if len(s.Initial) == 0 {
			s.Initial = []*admitterv1.WatchAdmissionsResponse{{
				Kind: admitterv1.WatchAdmissionsResponse_KIND_SNAPSHOT_END, Revision: b.revisionLocked(),
			}}
		}
	}
	b.subs[s] = struct{}{}
	return s, nil
}

// chunksLocked splits ds into batches of kind, the last one lastKind and
// the only one carrying the current revision.
func (b *Broadcaster) chunksLocked(ds []*admitterv1.Decision, kind, lastKind admitterv1.WatchAdmissionsResponse_Kind) []*admitterv1.WatchAdmissionsResponse {
	var out []*admitterv1.WatchAdmissionsResponse
	for start := 0; start < len(ds); start += b.opts.ChunkSize {
		end := min(start+b.opts.ChunkSize, len(ds))
		out = append(out, &admitterv1.WatchAdmissionsResponse{Kind: kind, Decisions: ds[start:end]})
	}
	if len(out) > 0 {
		last := out[len(out)-1]
		last.Kind = lastKind
		last.Revision = b.revisionLocked()
	}
	return out
}

// parseLocked returns the sequence number of a revision of this epoch.
func (b *Broadcaster) parseLocked(rev string) (uint64, bool) {
	epoch, seqText, ok := strings.Cut(rev, ":")
	if !ok || epoch != b.epoch {
		return 0, false
	}
	seq, err := strconv.ParseUint(seqText, 10, 64)
	if err != nil {
		return 0, false
	}
	return seq, true
}

// Err is why the subscription ended (nil while it runs or after Close).
func (s *Subscription) Err() error {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	return s.err
}

// Close ends the subscription.
func (s *Subscription) Close() {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	delete(s.b.subs, s)
	s.closeLocked(nil)
}

// Sent tells the OnSend observer that resp went out to the subscriber.
func (s *Subscription) Sent(resp *admitterv1.WatchAdmissionsResponse) {
	if s.b.opts.OnSend == nil {
		return
	}
	for _, d := range resp.Decisions {
		s.b.opts.OnSend(d.GetAction())
	}
}

func (s *Subscription) closeLocked(err error) {
	if s.closed {
		return
	}
	s.closed = true
	s.err = err
	close(s.ch)
}
