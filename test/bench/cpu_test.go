package bench

import (
	"cmp"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/prometheus/procfs"

	"github.com/sluice-dev/sluice/test/harness"
	"github.com/sluice-dev/sluice/test/testenv"
)

// cpuMeter reads the CPU time each process of the run has used, to tell
// which one a burst spends the machine on.
type cpuMeter struct {
	pids  map[string]int
	start map[string]float64
}

// newCPUMeter notes the CPU time used so far by the control plane, the
// four services (when s is not nil) and the benchmark itself.
func newCPUMeter(env *testenv.Env, s *harness.Sluice) *cpuMeter {
	pids := env.Pids()
	if s != nil {
		for _, svc := range []*harness.Service{s.Admitter, s.Checks, s.Grouper, s.Webhook} {
			if pid := svc.Pid(); pid != 0 {
				pids[svc.Name] = pid
			}
		}
	}
	pids["benchmark"] = os.Getpid()
	return &cpuMeter{pids: pids, start: cpuSeconds(pids)}
}

// report gives the CPU seconds each process used since the meter was made,
// the busiest first.
func (m *cpuMeter) report() string { return cpuReport(m.usedByProcess()) }

// usedByProcess is the CPU seconds each process used since the meter was
// made, all read at once.
func (m *cpuMeter) usedByProcess() map[string]float64 {
	used := map[string]float64{}
	for name, t := range cpuSeconds(m.pids) {
		if t0, ok := m.start[name]; ok {
			used[name] = t - t0
		}
	}
	return used
}

// cpuReport renders CPU seconds by process, the busiest first, after
// their total.
func cpuReport(used map[string]float64) string {
	var total float64
	parts := make([]string, 0, len(used))
	for _, n := range largestFirst(used) {
		total += used[n]
		parts = append(parts, fmt.Sprintf("%s %.1f", n, used[n]))
	}
	return fmt.Sprintf("%.1f in all: %s", total, strings.Join(parts, ", "))
}

// largestFirst is m's keys by their values, the largest first, ties by
// name.
func largestFirst[V cmp.Ordered](m map[string]V) []string {
	return slices.SortedFunc(maps.Keys(m), func(a, b string) int {
		return cmp.Or(cmp.Compare(m[b], m[a]), strings.Compare(a, b))
	})
}

// used is the CPU seconds process name used since the meter was made.
func (m *cpuMeter) used(name string) float64 {
	now := cpuSeconds(map[string]int{name: m.pids[name]})
	return now[name] - m.start[name]
}

// cpuSeconds reads user+system CPU seconds of each process from /proc;
// processes that cannot be read are left out.
func cpuSeconds(pids map[string]int) map[string]float64 {
	out := map[string]float64{}
	for name, pid := range pids {
		p, err := procfs.NewProc(pid)
		if err != nil {
			continue
		}
		st, err := p.Stat()
		if err != nil {
			continue
		}
		out[name] = st.CPUTime()
	}
	return out
}
