package bench

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/sluice-dev/sluice/test/harness"
)

// gaugeSum is the sum of a gauge family's series (0 when it has none).
func gaugeSum(families map[string]*dto.MetricFamily, name string) float64 {
	var sum float64
	for _, m := range families[name].GetMetric() {
		sum += m.GetGauge().GetValue()
	}
	return sum
}

// admitterGauge is the sum of the admitter's gauge name over its series.
func (r *scaleRun) admitterGauge(ctx context.Context, name string) (float64, error) {
	families, err := r.s.Admitter.MetricFamilies(ctx)
	if err != nil {
		return 0, err
	}
	return gaugeSum(families, name), nil
}

// The admitter's metrics the scraper reads.
const (
	cycleDurationMetric = "sluice_admitter_cycle_duration_seconds"
	cycleWrittenMetric  = "sluice_admitter_cycle_writes_duration_seconds"
	reservationsMetric  = "sluice_admitter_reservations_total"
	pendingMetric       = "sluice_admitter_pending_workloads"
	reservingMetric     = "sluice_admitter_reserving_workloads"
	decisionRingMetric  = "sluice_admitter_decision_ring_changes"
)

// decisionRingAge is how long the admitter keeps a decision for
// subscribers that resume (stream.DefaultRingAge).
const decisionRingAge = 2 * time.Minute

// admitterSample is one scrape of the admitter: its backlog (workloads
// pending, summed over ClusterQueues), the workloads holding quota, and
// its histograms of the cycles' times: deciding (cycle), and until their
// writes were answered (written).
type admitterSample struct {
	at                 time.Time
	pending, reserving float64
	// waiting is the backlog as the benchmark's informer sees the
	// Workloads at the scrape: the admitter's gauges are set once per
	// round of queue status writes, which lags under load.
	waiting        float64
	cycle, written histSample
	reservations   float64
}

// histSample is one scrape of a histogram: its count, its sum and its
// cumulative counts by upper bound (+Inf excluded).
type histSample struct {
	count, sum float64
	buckets    []float64
}

// readHistogram reads histogram name from families, and its upper bounds
// (+Inf excluded); zero when the admitter does not export it.
func readHistogram(families map[string]*dto.MetricFamily, name string) (histSample, []float64) {
	ms := families[name].GetMetric()
	if len(ms) == 0 {
		return histSample{}, nil
	}
	h := ms[0].GetHistogram()
	out := histSample{count: float64(h.GetSampleCount()), sum: h.GetSampleSum()}
	var bounds []float64
	for _, bk := range h.GetBucket() {
		if math.IsInf(bk.GetUpperBound(), 1) {
			continue
		}
		bounds = append(bounds, bk.GetUpperBound())
		out.buckets = append(out.buckets, float64(bk.GetCumulativeCount()))
	}
	return out, bounds
}

// admitterScraper scrapes the admitter about every second.
type admitterScraper struct {
	svc     *harness.Service
	waiting func() int
	mu      sync.Mutex
	bounds  []float64 // the histogram's upper bounds, +Inf excluded
	samples []admitterSample
	failed  int
}

func newAdmitterScraper(svc *harness.Service, waiting func() int) *admitterScraper {
	return &admitterScraper{svc: svc, waiting: waiting}
}

// run scrapes until ctx ends, once at once and then every second.
func (a *admitterScraper) run(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		a.scrape(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (a *admitterScraper) scrape(ctx context.Context) {
	families, err := a.svc.MetricFamilies(ctx)
	a.mu.Lock()
	defer a.mu.Unlock()
	if err != nil {
		a.failed++
		return
	}
	s := admitterSample{at: time.Now(), pending: gaugeSum(families, pendingMetric), reserving: gaugeSum(families, reservingMetric),
		waiting: float64(a.waiting())}
	for _, m := range families[reservationsMetric].GetMetric() {
		s.reservations += m.GetCounter().GetValue()
	}
	var bounds []float64
	if s.cycle, bounds = readHistogram(families, cycleDurationMetric); bounds != nil {
		// Both histograms have the same buckets.
		a.bounds = bounds
	}
	s.written, _ = readHistogram(families, cycleWrittenMetric)
	a.samples = append(a.samples, s)
}

// idle reports whether the last scrape found no workload pending or
// holding quota.
func (a *admitterScraper) idle() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.samples) == 0 {
		return false
	}
	s := a.samples[len(a.samples)-1]
	return s.pending == 0 && s.reserving == 0
}

// last says what the last scrape found.
func (a *admitterScraper) last() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.samples) == 0 {
		return fmt.Sprintf("never scraped (%d failures)", a.failed)
	}
	s := a.samples[len(a.samples)-1]
	return fmt.Sprintf("%.0f workloads pending, %.0f holding quota", s.pending, s.reserving)
}

// timeline renders the scrapes since start in at most lines rows: the
// backlog and the workloads holding quota at the row's end, and the
// cycles and reservations per second and mean cycle time over the row.
func (a *admitterScraper) timeline(start time.Time, lines int) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	step := max(1, (len(a.samples)+lines-1)/max(1, lines))
	var out []string
	for k := step; k < len(a.samples)+step-1; k += step {
		k := min(k, len(a.samples)-1)
		prev, cur := a.samples[max(0, k-step)], a.samples[k]
		d := cur.at.Sub(prev.at).Seconds()
		cycles := cur.cycle.count - prev.cycle.count
		if d <= 0 {
			continue
		}
		meanCycle := "-"
		if cycles > 0 {
			meanCycle = seconds((cur.cycle.sum - prev.cycle.sum) / cycles).String()
		}
		out = append(out, fmt.Sprintf("%6.0fs  pending %6.0f (Workloads waiting %6.0f)  holding quota %6.0f  cycles/s %5.1f  reservations/s %6.1f  mean cycle %s",
			cur.at.Sub(start).Seconds(), cur.pending, cur.waiting, cur.reserving, cycles/d, (cur.reservations-prev.reservations)/d, meanCycle))
	}
	return out
}

// backlogBands are the backlogs cycle times are reported by.
var backlogBands = []struct {
	name   string
	lo, hi float64
}{
	{"0-100", 0, 100},
	{"100-1000", 100, 1000},
	{"1000-5000", 1000, 5000},
	{"5000+", 5000, math.Inf(1)},
}

// cycleBand is the admitter's scheduling cycles while its backlog was in
// a band, timed by one of its histograms.
type cycleBand struct {
	// what names the histogram: "cycle" (deciding) or "cycle-written"
	// (a cycle that reserved or evicted, until its writes were answered).
	what           string
	name           string
	seconds        float64 // scrape intervals in the band
	cycles         float64
	cycleSeconds   float64
	reservations   float64
	counts         []float64 // cycles per bucket (not cumulative)
	bounds         []float64
	p50, p99, mean time.Duration
	// longest is the upper bound of the highest bucket a cycle fell in
	// (zero past the highest bound).
	longest time.Duration
}

// bands splits the run into the intervals between scrapes and sums each
// interval's cycles, as histogram what (see cycleBand) times them, into
// the band of its backlog, the mean of the
// Workloads waiting at its two ends (not the admitter's pending gauge,
// which lags by a round of queue status writes: under load, up to a
// minute); then works out each band's cycle-time
// quantiles from its bucket counts, interpolating linearly within a
// bucket as Prometheus' histogram_quantile does (the mean is exact).
func (a *admitterScraper) bands(what string) []cycleBand {
	a.mu.Lock()
	defer a.mu.Unlock()
	pick := func(s admitterSample) histSample { return s.cycle }
	if what == "cycle-written" {
		pick = func(s admitterSample) histSample { return s.written }
	}
	out := make([]cycleBand, len(backlogBands))
	for i, b := range backlogBands {
		out[i] = cycleBand{what: what, name: b.name, bounds: a.bounds, counts: make([]float64, len(a.bounds)+1)}
	}
	for k := 1; k < len(a.samples); k++ {
		prevSample, curSample := a.samples[k-1], a.samples[k]
		prev, cur := pick(prevSample), pick(curSample)
		if len(prev.buckets) != len(cur.buckets) || cur.count < prev.count {
			continue
		}
		backlog := (prevSample.waiting + curSample.waiting) / 2
		i := slices.IndexFunc(backlogBands, func(b struct {
			name   string
			lo, hi float64
		}) bool {
			return backlog >= b.lo && backlog < b.hi
		})
		band := &out[i]
		band.seconds += curSample.at.Sub(prevSample.at).Seconds()
		band.cycles += cur.count - prev.count
		band.cycleSeconds += cur.sum - prev.sum
		band.reservations += curSample.reservations - prevSample.reservations
		below := 0.0
		for j := range cur.buckets {
			d := (cur.buckets[j] - prev.buckets[j]) - below
			band.counts[j] += d
			below += d
		}
		band.counts[len(cur.buckets)] += (cur.count - prev.count) - below
	}
	var used []cycleBand
	for _, b := range out {
		if b.cycles == 0 {
			continue
		}
		b.mean = seconds(b.cycleSeconds / b.cycles)
		b.p50, b.p99 = seconds(b.quantile(0.5)), seconds(b.quantile(0.99))
		for j := len(b.counts) - 1; j >= 0; j-- {
			if b.counts[j] > 0 {
				if j < len(b.bounds) {
					b.longest = seconds(b.bounds[j])
				}
				break
			}
		}
		used = append(used, b)
	}
	return used
}

func seconds(s float64) time.Duration {
	return time.Duration(s * float64(time.Second)).Round(10 * time.Microsecond)
}

// quantile interpolates the q-quantile within the bucket that holds it;
// one in the +Inf bucket is the highest finite bound.
func (b cycleBand) quantile(q float64) float64 {
	rank := q * b.cycles
	below := 0.0
	for j, c := range b.counts {
		if below+c < rank || c == 0 {
			below += c
			continue
		}
		if j == len(b.bounds) {
			return b.bounds[len(b.bounds)-1]
		}
		lo := 0.0
		if j > 0 {
			lo = b.bounds[j-1]
		}
		return lo + (b.bounds[j]-lo)*(rank-below)/c
	}
	if len(b.bounds) == 0 {
		return 0
	}
	return b.bounds[len(b.bounds)-1]
}

func (b cycleBand) String() string {
	longest := "over the highest bound"
	if b.longest > 0 {
		longest = "≤ " + b.longest.String()
	}
	return fmt.Sprintf("backlog %-9s %6.0f s, %7.0f cycles (%.1f/s), %.2f reservations/cycle: %s mean %s  p50 %s  p99 %s  longest %s",
		b.name, b.seconds, b.cycles, b.cycles/b.seconds, b.reservations/b.cycles, b.what, b.mean, b.p50, b.p99, longest)
}

// fields renders the band for the SCALE-RESULT line.
func (b cycleBand) fields() string {
	return fmt.Sprintf("%[7]s-count[%[1]s]=%.0[2]f %[7]s-mean-ms[%[1]s]=%.3[3]f %[7]s-p50-ms[%[1]s]=%.3[4]f %[7]s-p99-ms[%[1]s]=%.3[5]f %[7]s-longest-ms[%[1]s]=%.3[6]f",
		b.name, b.cycles, ms(b.mean), ms(b.p50), ms(b.p99), ms(b.longest), b.what)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// serviceWrites is the API writes each of sluice's services has made so
// far, by its own client's count (client-go's rest_client_requests_total,
// which controller-runtime exposes): every request of the process by
// method, whatever it wrote. A service that cannot be read is left out.
func serviceWrites(ctx context.Context, s *harness.Sluice) map[string]float64 {
	out := map[string]float64{}
	for _, svc := range s.All() {
		families, err := svc.MetricFamilies(ctx)
		if err != nil {
			continue
		}
		var writes float64
		for _, m := range families["rest_client_requests_total"].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "method" && slices.Contains([]string{"POST", "PUT", "PATCH", "DELETE"}, l.GetValue()) {
					writes += m.GetCounter().GetValue()
				}
			}
		}
		out[svc.Name] = writes
	}
	return out
}

// admitterWrites is the admitter's own count of its Workload writes so
// far, by operation (sluice_admitter_workload_writes_total).
func admitterWrites(ctx context.Context, s *harness.Sluice) map[string]float64 {
	out := map[string]float64{}
	families, err := s.Admitter.MetricFamilies(ctx)
	if err != nil {
		return out
	}
	for _, m := range families["sluice_admitter_workload_writes_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "operation" {
				out[l.GetValue()] += m.GetCounter().GetValue()
			}
		}
	}
	return out
}

func subtractWrites(after, before map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		out[k] = v - before[k]
	}
	return out
}

// scaleWrites are a run's API writes: by sluice's services, each by its
// own count, and by every client, from the API server's.
type scaleWrites struct {
	services   map[string]float64
	workloadOp map[string]float64 // the admitter's Workload writes by operation
	all        float64
	byResource map[string]float64
	// others are the requests that write nothing (reads, watches), by
	// verb and resource.
	others map[string]float64
}

func (w scaleWrites) sluice() float64 {
	var sum float64
	for _, v := range w.services {
		sum += v
	}
	return sum
}

func (w scaleWrites) servicesPerWorkload(n int) string {
	var parts []string
	for _, svc := range []string{"admitter", "grouper", "webhook", "checks"} {
		if v, ok := w.services[svc]; ok {
			parts = append(parts, fmt.Sprintf("%s %.2f", svc, v/float64(n)))
		}
	}
	return strings.Join(parts, ", ")
}

// settled is a service's resident memory once it stopped falling.
type settled struct {
	rss  uint64
	took time.Duration
}

func (s settled) String() string {
	if s.rss == 0 {
		return "unknown"
	}
	return fmt.Sprintf("%.0f MB (the least of two a second over %s)", mb(s.rss), s.took.Round(100*time.Millisecond))
}

// settledRSS samples svc's resident memory twice a second until four
// samples in a row bring no new low, or bound passes, and returns the
// lowest. Another process cannot be made to collect its garbage, and Go
// returns freed memory to the system gradually: this is the least it held
// in that window.
func settledRSS(ctx context.Context, svc *harness.Service, bound time.Duration) settled {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	var low uint64
	quiet := 0
	for quiet < 4 {
		st, err := procStatus(svc)
		if err != nil {
			return settled{}
		}
		if low == 0 || st.VmRSS < low {
			low, quiet = st.VmRSS, 0
		} else {
			quiet++
		}
		select {
		case <-ctx.Done():
			return settled{rss: low, took: time.Since(start)}
		case <-tick.C:
		}
	}
	return settled{rss: low, took: time.Since(start)}
}

// grouperTimes are the grouper's histograms of where a pod's handling
// waits, as sums and counts: in its work queue, at work, and from its
// workload's admission (or from the decision reaching the grouper) to its
// ungate written.
type grouperTimes map[string]histSum

type histSum struct{ sum, count float64 }

// grouperTimeMetrics name the histograms of grouperTimes, by what they say.
var grouperTimeMetrics = []struct{ name, metric, queue string }{
	{"queued", "workqueue_queue_duration_seconds", "pods"},
	{"working", "workqueue_work_duration_seconds", "pods"},
	{"admission-to-ungate", "sluice_grouper_admission_to_ungate_seconds", ""},
	{"decision-to-ungate", "sluice_grouper_decision_to_ungate_seconds", ""},
}

// readGrouperTimes scrapes the grouper's histograms of grouperTimes,
// summing their series (the work queue's only for queue pods).
func readGrouperTimes(ctx context.Context, s *harness.Sluice) grouperTimes {
	out := grouperTimes{}
	families, err := s.Grouper.MetricFamilies(ctx)
	if err != nil {
		return out
	}
	for _, t := range grouperTimeMetrics {
		var h histSum
		for _, m := range families[t.metric].GetMetric() {
			if t.queue != "" && !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool {
				return l.GetName() == "name" && l.GetValue() == t.queue
			}) {
				continue
			}
			h.sum += m.GetHistogram().GetSampleSum()
			h.count += float64(m.GetHistogram().GetSampleCount())
		}
		out[t.name] = h
	}
	return out
}

// since is what the histograms gathered after before.
func (g grouperTimes) since(before grouperTimes) grouperTimes {
	out := grouperTimes{}
	for k, h := range g {
		out[k] = histSum{sum: h.sum - before[k].sum, count: h.count - before[k].count}
	}
	return out
}

// mean is the mean of k's samples.
func (g grouperTimes) mean(k string) time.Duration {
	h := g[k]
	if h.count <= 0 {
		return 0
	}
	return time.Duration(h.sum / h.count * float64(time.Second)).Round(time.Millisecond)
}

func (g grouperTimes) String() string {
	return fmt.Sprintf("%.0f pod reconciles, each waiting %s on average in the work queue and taking %s; "+
		"from a workload's admission to its pod's ungate written %s on average (%s from the decision reaching the grouper)",
		g["working"].count, g.mean("queued"), g.mean("working"), g.mean("admission-to-ungate"), g.mean("decision-to-ungate"))
}
