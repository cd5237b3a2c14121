package checkphase

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/services/admitter/internal/checks"
	"github.com/sluice-dev/sluice/services/admitter/internal/lifecycle"
	"github.com/sluice-dev/sluice/services/admitter/internal/shrink"
	"github.com/sluice-dev/sluice/services/admitter/internal/workload"
)

// ReasonUpdatesIgnored is the reason of the Warning event for a check that
// answered Ready again after admission with other pod set updates.
const ReasonUpdatesIgnored = "AdmissionCheckUpdatesIgnored"

// rechecks remembers, per workload, the checks to ask again at once
// (Recheck), and how many times in a row asking an admitted workload's
// check again got no answer. It lives in memory only: after a restart the
// WatchChanges streams open again, and every evaluation held with them is
// asked again anyway.
type rechecks struct {
	mu       sync.Mutex
	due      map[types.NamespacedName]map[string]bool
	failures map[types.NamespacedName]map[string]int
}

func newRechecks() *rechecks {
	return &rechecks{due: map[types.NamespacedName]map[string]bool{}, failures: map[types.NamespacedName]map[string]int{}}
}

func (r *rechecks) add(key types.NamespacedName, names []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	set := r.due[key]
	if set == nil {
		set = map[string]bool{}
		r.due[key] = set
	}
	for _, n := range names {
		set[n] = true
	}
}

// take returns and clears the checks to ask again.
func (r *rechecks) take(key types.NamespacedName) map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	set := r.due[key]
	shrink.Delete(&r.due, key)
	return set
}

// failed records that asking name again got no answer, asks for it again,
// and returns how many times in a row that happened before.
func (r *rechecks) failed(key types.NamespacedName, name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.failures[key]
	if f == nil {
		f = map[string]int{}
		r.failures[key] = f
	}
	n := f[name]
	f[name]++
	if r.due[key] == nil {
		r.due[key] = map[string]bool{}
	}
	r.due[key][name] = true
	return n
}

func (r *rechecks) answered(key types.NamespacedName, name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.failures[key], name)
	if len(r.failures[key]) == 0 {
		shrink.Delete(&r.failures, key)
	}
}

func (r *rechecks) forget(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	shrink.Delete(&r.due, key)
	shrink.Delete(&r.failures, key)
}

// admittedDue lists, in the workload's order, the checks of an admitted
// workload to ask again: those rechecked that it has.
func admittedDue(wl *v1alpha1.Workload, rechecked map[string]bool) []string {
	var due []string
	for _, st := range wl.Status.AdmissionChecks {
		if rechecked[st.Name] {
			due = append(due, st.Name)
		}
	}
	return due
}

// verdict is what the new answers of an admitted workload's checks mean.
type verdict struct {
	// revoked are the checks that no longer answer Ready; rejected those
	// of them that answered Rejected.
	revoked, rejected []string
	// retryAfter is how long a Retry holds the workload back.
	retryAfter time.Duration
	// updatesChanged are the checks that answered Ready with other pod
	// set updates than the admission used.
	updatesChanged []string
}

// judge applies the answers that revoke the admission to wl's check states
// and says what they mean. Ready again changes nothing: the pods run with
// the admission's pod set infos, and updates that differ now are ignored
// (the pods started with the old ones; only a new admission may change
// them). No answer is never "no": it is skipped (noAnswer lists it).
func judge(wl *v1alpha1.Workload, due []string, answers map[string]checks.Answer, acs map[string]*v1alpha1.AdmissionCheck, now metav1.Time) (v verdict, noAnswer []string) {
	for _, name := range due {
		ans := answers[name]
		st := workload.CheckState(wl, name)
		switch {
		case st == nil:
			continue
		case ans.NoAnswer:
			noAnswer = append(noAnswer, name)
			continue
		case ans.State == v1alpha1.CheckStateReady:
			if !equality.Semantic.DeepEqual(st.PodSetUpdates, ans.Updates) {
				v.updatesChanged = append(v.updatesChanged, name)
			}
			continue
		}
		retryCount := int(ptr.Deref(st.RetryCount, 0))
		applyAnswer(st, ans, now)
		v.revoked = append(v.revoked, name)
		switch ans.State {
		case v1alpha1.CheckStateRejected:
			v.rejected = append(v.rejected, name)
		case v1alpha1.CheckStateRetry:
			wait := ans.RetryAfter
			if wait <= 0 {
				wait = checks.Backoff(orEmpty(acs[name]), retryCount)
			}
			v.retryAfter = max(v.retryAfter, wait)
		}
	}
	return v, noAnswer
}

// revisit acts on new answers of checks of an admitted workload (cur, as
// stored, under its lock). A check that answers Pending, Retry or Rejected
// revokes the admission: the workload is evicted through the durable
// eviction (Writer.Evict: the first write says Evicted and keeps the
// quota until the pods stop; the release that follows resets the checks
// and owes their Releases), requeued after a Retry's wait, and
// deactivated on Rejected, as before admission. It returns when to look
// again (0: not needed).
func (o *Orchestrator) revisit(ctx context.Context, cur *v1alpha1.Workload, due []string, answers map[string]checks.Answer, w *catalog) time.Duration {
	key := workload.Key(cur)
	wl := cur.DeepCopy()
	v, noAnswer := judge(wl, due, answers, w.checks, metav1.Now())
	var again time.Duration
	for _, name := range due {
		if !slices.Contains(noAnswer, name) {
			o.rechecks.answered(key, name)
		}
	}
	for _, name := range noAnswer {
		ac := w.checks[name]
		if ac == nil || !checks.WatchesChanges(ac) {
			// Nothing will tell of this check's changes any more (it is
			// gone, or its provider no longer watches): stop asking.
			o.rechecks.answered(key, name)
			continue
		}
		// Ask again after the check's backoff: the provider said the
		// answer changed, and only an answer can say how.
		wait := nextAsk(ac, answers[name], o.rechecks.failed(key, name))
		if again == 0 || wait < again {
			again = wait
		}
	}
	if len(v.updatesChanged) > 0 {
		o.cfg.Recorder.Eventf(cur, nil, "Warning", ReasonUpdatesIgnored, "Admit",
			"admission check %s answered Ready again with other pod set updates; they are ignored: the pods were admitted with the earlier ones",
			strings.Join(v.updatesChanged, ", "))
	}
	if len(v.revoked) == 0 {
		return again
	}
	var err error
	if len(v.rejected) > 0 {
		err = o.cfg.Writer.Reject(ctx, cur, wl, v.rejected)
	} else {
		err = o.cfg.Writer.Evict(ctx, cur, wl, lifecycle.Eviction{
			Reason: v1alpha1.ReasonAdmissionCheck, Message: revokedMessage(wl, v.revoked), RequeueAfter: v.retryAfter,
		})
	}
	if err != nil {
		// Nothing was recorded: ask the checks again on the next look.
		o.rechecks.add(key, v.revoked)
		return retryOnError(ctx, err, "evict workload whose admission check changed its answer", key)
	}
	for _, name := range v.revoked {
		st := workload.CheckState(wl, name)
		o.cfg.Metrics.Revocations.WithLabelValues(name, string(st.State)).Inc()
	}
	o.cfg.Recorder.Eventf(wl, nil, "Warning", v1alpha1.ReasonAdmissionCheck, "Evict", "%s", revokedMessage(wl, v.revoked))
	return 0
}

// revokedMessage names each check that no longer answers Ready, its
// answer, and the provider's reason and message.
func revokedMessage(wl *v1alpha1.Workload, names []string) string {
	parts := make([]string, 0, len(names))
	for _, name := range names {
		st := workload.CheckState(wl, name)
		if st == nil {
			continue
		}
		part := fmt.Sprintf("admission check %s answered %s", name, st.State)
		if st.Reason != "" {
			part += " (" + st.Reason + ")"
		}
		if st.Message != "" {
			part += ": " + st.Message
		}
		parts = append(parts, part)
	}
	return "no longer admitted: " + strings.Join(parts, "; ")
}
