package groups

import (
	"sync"
	"time"

	"github.com/sluice-dev/sluice/services/grouper/internal/workload"
)

// groupState is what the grouper remembers about one pod group. It lives
// in memory only: after a restart the group is assembled and submitted
// again (the admitter answers from what it has) and its finish is
// reported again (the admitter ignores a second one).
type groupState struct {
	// submitted: SubmitWorkload succeeded, in LocalQueue queue;
	// submitting: a call is in flight.
	submitted  bool
	submitting bool
	queue      string
	// warned is the last problem told in an event, so it is told once.
	warned string
	// finished: the group's end was reported.
	finished bool
	// succeeded is the count of succeeded pods per role last reported, and
	// missing the pods missing per role last reported (printed; empty when
	// none was ever reported), both under reservation: a new reservation
	// counts afresh.
	reservation string
	succeeded   map[string]int32
	missing     string
	// joined holds the shapes of pods the admitter let join a pod set of
	// the declared group's workload, by "<workload uid>/<pod set>/<role
	// hash>": pods of one shape ask once.
	joined map[string]bool
	// gangSize is the minCount of the gang of the PodGroup the group's
	// pods name, once read (it cannot change); 0 before. gangLooked is
	// when the PodGroup was last found missing, or without a gang: the
	// group's pods look again together, not each on its own.
	gangSize   int32
	gangLooked time.Time
}

// known holds what the path keeps of each group: its state, its views
// and its gang.
type known struct {
	// mu guards m and the state of every record.
	mu sync.Mutex
	m  map[workload.Key]*record
}

// record is what the path keeps of one group. The view and the gang have
// locks of their own, held while they are worked out.
type record struct {
	state groupState
	view  groupView
	gang  gangState
}

func newKnown() *known { return &known{m: map[workload.Key]*record{}} }

func (k *known) getLocked(key workload.Key) *record {
	r := k.m[key]
	if r == nil {
		r = &record{}
		k.m[key] = r
	}
	return r
}

// update runs f on the group's state under the lock.
func (k *known) update(key workload.Key, f func(*groupState)) {
	k.mu.Lock()
	defer k.mu.Unlock()
	f(&k.getLocked(key).state)
}

// view returns the group's views.
func (k *known) view(key workload.Key) *groupView {
	k.mu.Lock()
	defer k.mu.Unlock()
	return &k.getLocked(key).view
}

// gang returns what is known of the group's gang.
func (k *known) gang(key workload.Key) *gangState {
	k.mu.Lock()
	defer k.mu.Unlock()
	return &k.getLocked(key).gang
}

func (k *known) forget(key workload.Key) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.m, key)
}

// resubmitAll makes every group submit again on its next look.
func (k *known) resubmitAll() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, r := range k.m {
		r.state.submitted, r.state.finished = false, false
	}
}
