package bench

import (
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
func (m *cpuMeter) report() string {
	now := cpuSeconds(m.pids)
	used := map[string]float64{}
	var total float64
	for name, t := range now {
		if t0, ok := m.start[name]; ok {
			used[name] = t - t0
			total += t - t0
		}
	}
	names := slices.SortedFunc(maps.Keys(used), func(a, b string) int {
		switch {
		case used[a] > used[b]:
			return -1
		case used[a] < used[b]:
			return 1
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, 0, len(names))
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s %.1f", n, used[n]))
	}
	return fmt.Sprintf("%.1f in all: %s", total, strings.Join(parts, ", "))
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
