package bench

import (
	"fmt"
	"slices"
	"time"
)

// ungateLatency is how a run's pods were ungated, as the burst and the
// preemption runs both report it: how many were seen ungated, the last
// ungate, the rate and the latency percentiles from create to ungate.
type ungateLatency struct {
	ungated       int
	last          time.Time // the last ungate seen; zero if none was
	podsPerSecond float64   // ungated pods from the run's start to the last ungate
	p50, p90, p99 time.Duration
}

// measureUngateLatency pairs pod i's create, created[i], with when pod
// prefix+i was first seen ungated. Pods never seen ungated are left out:
// the caller, which knows how many it waited for, reports them.
func measureUngateLatency(created []time.Time, ungated map[string]time.Time, prefix string, start time.Time) ungateLatency {
	var u ungateLatency
	lat := make([]time.Duration, 0, len(created))
	for i, c := range created {
		t, ok := ungated[fmt.Sprintf("%s%d", prefix, i)]
		if !ok {
			continue
		}
		lat = append(lat, t.Sub(c))
		if t.After(u.last) {
			u.last = t
		}
	}
	slices.Sort(lat)
	u.ungated = len(lat)
	if len(lat) > 0 {
		u.podsPerSecond = float64(len(lat)) / u.last.Sub(start).Seconds()
		u.p50, u.p90, u.p99 = pct(lat, 50), pct(lat, 90), pct(lat, 99)
	}
	return u
}
