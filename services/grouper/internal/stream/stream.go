// Package stream follows the admitter's decision stream (WatchAdmissions):
// it hands complete snapshots and change batches to a Sink, remembers the
// last revision applied, and after a broken stream reconnects with backoff
// and resumes from that revision.
package stream

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	admitterv1 "github.com/sluice-dev/sluice/gen/sluice/admitter/v1"
	"github.com/sluice-dev/sluice/services/grouper/internal/metrics"
)

// Sink receives decisions. Calls come from one goroutine, in stream order.
type Sink interface {
	// Snapshot replaces every decision in force by decisions: a workload
	// absent from it has no decision any more.
	Snapshot(decisions []*admitterv1.Decision)
	// Changes applies decisions made since the previous batch.
	Changes(decisions []*admitterv1.Decision)
}

// Options configure a Follower.
type Options struct {
	// Shard limits the stream; nil is everything.
	Shard *admitterv1.Shard
	// MinBackoff and MaxBackoff bound the wait between reconnections;
	// zero means 200ms and 30s.
	MinBackoff, MaxBackoff time.Duration
	// Metrics, when set, count connections and decisions.
	Metrics *metrics.Metrics
	// Log receives connection changes.
	Log logr.Logger
}

// Follower keeps one decision stream open.
type Follower struct {
	client admitterv1.AdmitterServiceClient
	sink   Sink
	opts   Options

	connected atomic.Bool
	// revision is the last revision applied; only Run touches it.
	revision string
}

// New returns a Follower that reads client's stream into sink.
func New(client admitterv1.AdmitterServiceClient, sink Sink, opts Options) *Follower {
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = 200 * time.Millisecond
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = max(30*time.Second, opts.MinBackoff)
	}
	return &Follower{client: client, sink: sink, opts: opts}
}

// Ready is a readiness check: it fails while no stream is open.
func (f *Follower) Ready(context.Context) error {
	if !f.connected.Load() {
		return errors.New("decision stream to the admitter is not connected")
	}
	return nil
}

// Run follows the stream until ctx is done, reconnecting after every
// failure, and returns nil then.
func (f *Follower) Run(ctx context.Context) error {
	backoff := f.opts.MinBackoff
	for {
		received, err := f.follow(ctx)
		f.connected.Store(false)
		if ctx.Err() != nil {
			return nil
		}
		if received {
			backoff = f.opts.MinBackoff
		}
		wait := jitter(backoff)
		f.opts.Log.Info("decision stream broken; reconnecting", "error", errString(err), "after", wait, "resumeRevision", f.revision)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		backoff = min(2*backoff, f.opts.MaxBackoff)
	}
}

// follow reads one stream until it breaks; received says whether it
// delivered any batch.
func (f *Follower) follow(ctx context.Context) (received bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := f.client.WatchAdmissions(ctx, &admitterv1.WatchAdmissionsRequest{
		ResumeRevision: f.revision,
		Shard:          f.opts.Shard,
	})
	if err != nil {
		return false, fmt.Errorf("open decision stream: %w", err)
	}
	f.connected.Store(true)
	if f.opts.Metrics != nil {
		f.opts.Metrics.StreamConnects.Inc()
	}
	f.opts.Log.Info("decision stream open", "resumeRevision", f.revision)

	// snapshot collects a snapshot's batches; nil outside a snapshot. A
	// snapshot broken off is dropped whole: the next stream resumes from
	// the revision before it.
	var snapshot []*admitterv1.Decision
	inSnapshot := false
	for {
		resp, err := st.Recv()
		if err != nil {
			return received, fmt.Errorf("receive decisions: %w", err)
		}
		received = true
		f.count(resp.GetDecisions())
		switch resp.GetKind() {
		case admitterv1.WatchAdmissionsResponse_KIND_SNAPSHOT:
			inSnapshot = true
			snapshot = append(snapshot, resp.GetDecisions()...)
		case admitterv1.WatchAdmissionsResponse_KIND_SNAPSHOT_END:
			snapshot = append(snapshot, resp.GetDecisions()...)
			f.sink.Snapshot(snapshot)
			f.revision = resp.GetRevision()
			snapshot, inSnapshot = nil, false
		case admitterv1.WatchAdmissionsResponse_KIND_CHANGE:
			if inSnapshot {
				return received, fmt.Errorf("change batch at revision %q inside an unfinished snapshot", resp.GetRevision())
			}
			f.sink.Changes(resp.GetDecisions())
			f.revision = resp.GetRevision()
		default:
			return received, fmt.Errorf("batch kind %v at revision %q is not valid: must be SNAPSHOT, SNAPSHOT_END or CHANGE",
				resp.GetKind(), resp.GetRevision())
		}
	}
}

func (f *Follower) count(decisions []*admitterv1.Decision) {
	if f.opts.Metrics == nil {
		return
	}
	for _, d := range decisions {
		f.opts.Metrics.Decisions.WithLabelValues(d.GetAction().String()).Inc()
	}
}

// jitter spreads reconnections of many replicas over [d/2, d].
func jitter(d time.Duration) time.Duration {
	half := d / 2
	return half + rand.N(half+1)
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
