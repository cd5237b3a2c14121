package bench

import (
	"fmt"
	"strings"

	"github.com/prometheus/procfs"

	"github.com/sluice-dev/sluice/test/harness"
)

// memoryMeter reads the services' resident memory from /proc: what each
// holds before the burst, and its peak (VmHWM) after, to tell how memory
// grows with the pods a service manages.
type memoryMeter struct {
	services []*harness.Service
	before   map[string]uint64 // VmRSS in bytes, by service
}

// newMemoryMeter notes the resident memory of sluice's four services now.
func newMemoryMeter(s *harness.Sluice) *memoryMeter {
	m := &memoryMeter{services: []*harness.Service{s.Admitter, s.Checks, s.Grouper, s.Webhook}, before: map[string]uint64{}}
	for _, svc := range m.services {
		if st, err := procStatus(svc); err == nil {
			m.before[svc.Name] = st.VmRSS
		}
	}
	return m
}

// memoryReport is each service's peak resident memory and what it held
// before the burst, in bytes; a service that cannot be read is left out.
type memoryReport struct {
	peak, before map[string]uint64
}

// report reads each service's peak resident memory since it started. The
// services start with the burst's control plane, so the peak is the run's.
func (m *memoryMeter) report() memoryReport {
	r := memoryReport{peak: map[string]uint64{}, before: m.before}
	for _, svc := range m.services {
		if st, err := procStatus(svc); err == nil {
			r.peak[svc.Name] = st.VmHWM
		}
	}
	return r
}

// growthPerPod is how far the named service's peak rose above what it held
// before the burst, per pod of the burst, in bytes.
func (r memoryReport) growthPerPod(name string, pods int) float64 {
	peak, ok := r.peak[name]
	if !ok || pods == 0 {
		return 0
	}
	return (float64(peak) - float64(r.before[name])) / float64(pods)
}

func (r memoryReport) String() string {
	var parts []string
	for _, name := range []string{"admitter", "checks", "grouper", "webhook"} {
		if peak, ok := r.peak[name]; ok {
			parts = append(parts, fmt.Sprintf("%s %.0f (%.0f before the burst)", name, mb(peak), mb(r.before[name])))
		}
	}
	return strings.Join(parts, ", ")
}

func mb(bytes uint64) float64 { return float64(bytes) / (1 << 20) }

func procStatus(svc *harness.Service) (procfs.ProcStatus, error) {
	pid := svc.Pid()
	if pid == 0 {
		return procfs.ProcStatus{}, fmt.Errorf("%s is not running", svc.Name)
	}
	p, err := procfs.NewProc(pid)
	if err != nil {
		return procfs.ProcStatus{}, fmt.Errorf("reading /proc of %s (pid %d): %w", svc.Name, pid, err)
	}
	st, err := p.NewStatus()
	if err != nil {
		return procfs.ProcStatus{}, fmt.Errorf("reading the status of %s (pid %d): %w", svc.Name, pid, err)
	}
	return st, nil
}
