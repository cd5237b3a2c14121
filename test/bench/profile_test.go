package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"k8s.io/client-go/kubernetes"

	"github.com/sluice-dev/sluice/test/harness"
	"github.com/sluice-dev/sluice/test/testenv"
)

// Profiles. With SLUICE_BENCH_PROFILE_DIR set, a run writes CPU profiles
// of every process it starts that serves them, taken over the same window
// (SLUICE_BENCH_PROFILE_SECONDS, 10 by default, starting
// SLUICE_BENCH_PROFILE_DELAY after the run's first create): kube-apiserver,
// etcd, the admitter, the grouper, the webhook (started with --pprof) and
// the benchmark's own client. `go tool pprof` reads them. The burst runs
// also profile kube-apiserver during the raw run's ungates
// (kube-apiserver-raw-ungates.pprof).

// runProfileDir is where a run's profiles go: a directory named after the
// benchmark in SLUICE_BENCH_PROFILE_DIR, since the runs of `make bench`
// share that; "" when it is not set.
func runProfileDir(b *testing.B) string {
	root := os.Getenv("SLUICE_BENCH_PROFILE_DIR")
	if root == "" {
		return ""
	}
	dir := filepath.Join(root, b.Name())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	return dir
}

// profileSeconds is how long each of a run's CPU profiles lasts.
func profileSeconds() int {
	if n, err := strconv.Atoi(os.Getenv("SLUICE_BENCH_PROFILE_SECONDS")); err == nil && n > 0 {
		return n
	}
	return 10
}

// profileRun starts the CPU profiles of a run into dir and returns at
// once; the WaitGroup is done when every profile is written.
func profileRun(ctx context.Context, b *testing.B, env *testenv.Env, cs kubernetes.Interface, s *harness.Sluice, dir string) *sync.WaitGroup {
	delay, _ := time.ParseDuration(os.Getenv("SLUICE_BENCH_PROFILE_DELAY"))
	seconds := profileSeconds()
	var done sync.WaitGroup
	done.Add(1)
	go func() {
		defer done.Done()
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		var all sync.WaitGroup
		all.Go(func() { profileAPIServer(ctx, b, cs, dir, "kube-apiserver.pprof", seconds) })
		all.Go(func() { profileEtcd(ctx, b, env, dir, seconds) })
		all.Go(func() { profileSelf(ctx, b, dir, seconds) })
		for _, svc := range []*harness.Service{s.Admitter, s.Grouper, s.Webhook} {
			all.Go(func() { profileService(ctx, b, svc, dir, seconds) })
		}
		all.Wait()
	}()
	return &done
}

// profileAPIServer writes a CPU profile of kube-apiserver over the next
// seconds to dir/name.
func profileAPIServer(ctx context.Context, b *testing.B, cs kubernetes.Interface, dir, name string, seconds int) {
	data, err := cs.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", strconv.Itoa(seconds)).DoRaw(ctx)
	if err != nil {
		b.Logf("profiling kube-apiserver: %v", err)
		return
	}
	writeProfile(b, dir, name, data)
}

// profileEtcd writes a CPU profile of etcd (started with --enable-pprof)
// over the next seconds to dir/etcd.pprof.
func profileEtcd(ctx context.Context, b *testing.B, env *testenv.Env, dir string, seconds int) {
	url := fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/profile?seconds=%d", env.Ports.Etcd, seconds)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		b.Logf("profiling etcd: %v", err)
		return
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Logf("profiling etcd: %v", err)
		return
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Logf("profiling etcd: %d %v", resp.StatusCode, err)
		return
	}
	writeProfile(b, dir, "etcd.pprof", data)
}

// profileService writes a CPU profile of a sluice service (started with
// --pprof) over the next seconds to dir/<service>.pprof.
func profileService(ctx context.Context, b *testing.B, svc *harness.Service, dir string, seconds int) {
	data, code, err := svc.Get(ctx, fmt.Sprintf("/debug/pprof/profile?seconds=%d", seconds))
	if err != nil || code != http.StatusOK {
		b.Logf("profiling %s: %d %v", svc.Name, code, err)
		return
	}
	writeProfile(b, dir, svc.Name+".pprof", []byte(data))
}

// profileSelf writes a CPU profile of the benchmark's own process (its
// client and informers) over the next seconds to dir/benchmark.pprof.
func profileSelf(ctx context.Context, b *testing.B, dir string, seconds int) {
	path := filepath.Join(dir, "benchmark.pprof")
	f, err := os.Create(path)
	if err != nil {
		b.Logf("profiling the benchmark: %v", err)
		return
	}
	defer f.Close()
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Logf("profiling the benchmark: %v", err)
		return
	}
	select {
	case <-ctx.Done():
	case <-time.After(time.Duration(seconds) * time.Second):
	}
	pprof.StopCPUProfile()
	fmt.Printf("benchmark CPU profile: %s\n", path)
}

func writeProfile(b *testing.B, dir, name string, data []byte) {
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		b.Logf("writing %s: %v", path, err)
		return
	}
	fmt.Printf("%s CPU profile: %s\n", strings.TrimSuffix(name, ".pprof"), path)
}

// apiServerPart is one part of kube-apiserver's work a CPU sample can be
// told to belong to, by the functions on its stack.
type apiServerPart struct {
	name string
	// frames: a sample whose stack has a function containing one of them
	// belongs to the part, unless an earlier part took it.
	frames []string
}

// apiServerParts are tried in order: the first that matches a sample's
// stack takes it. Work done for a request inside the storage layer's
// update loop (admission, validation, managed fields) is named by what it
// is, before the storage that runs it.
var apiServerParts = []apiServerPart{
	{"watch: etcd events decoded, the watch cache, fan-out and encoding per watcher",
		[]string{"etcd3.(*watchChan)", "cacher.(*Cacher)", "cacher.(*cacheWatcher)", "cacher.(*watchCache)", "cacher.(*cachingObject)",
			"handlers.(*WatchServer)", "handlers.handleWatch", "handlers.(*watchEncoder)", "handlers.(*watchEmbeddedEncoder)"}},
	{"admission: mutating webhook calls", []string{"admission/plugin/webhook/mutating"}},
	{"admission: validating webhooks' match conditions and admission policies",
		[]string{"admission/plugin/webhook/validating", "admission/plugin/policy", "admission/plugin/cel"}},
	{"managed fields", []string{"util/managedfields", "handlers/fieldmanager"}},
	{"storage: etcd client, objects decoded from etcd",
		[]string{"go.etcd.io/etcd", "etcd3.decode", "etcd3.(*defaultDecoder)", "storage/value"}},
	{"responses written: encoding, HTTP/2, TLS",
		[]string{"handlers/responsewriters", "http2.(*serverConn).writeFrameAsync", "crypto/tls.(*Conn).Write"}},
	{"requests: bodies and patches decoded, defaulting, custom resource schemas, validation, encoding for etcd",
		[]string{"finisher.finishRequest", "handlers.CreateResource", "handlers.UpdateResource", "handlers.PatchResource",
			"handlers.(*patcher)", "apiextensions-apiserver", "registry/generic/registry"}},
	{"request handling: authentication, authorization, flow control, routing", []string{"ServeHTTP"}},
	{"garbage collection in the background", []string{"runtime.gcBgMarkWorker", "runtime.bgsweep", "runtime.bgscavenge"}},
}

// otherPart names the samples no part took.
const otherPart = "other"

// apiServerBreakdown reads a kube-apiserver CPU profile and returns the
// share of its samples (0 to 1) each part of apiServerParts took, and
// otherPart the rest.
func apiServerBreakdown(path string) (map[string]float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", path, err)
	}
	cpu := slices.IndexFunc(p.SampleType, func(t *profile.ValueType) bool { return t.Type == "cpu" })
	if cpu < 0 {
		return nil, fmt.Errorf("%s is not a CPU profile", path)
	}
	by := map[string]float64{}
	var total float64
	for _, s := range p.Sample {
		v := float64(s.Value[cpu])
		total += v
		by[partOf(s)] += v
	}
	if total == 0 {
		return nil, fmt.Errorf("%s holds no samples", path)
	}
	for k := range by {
		by[k] /= total
	}
	return by, nil
}

// partOf is the name of the part of apiServerParts that sample s belongs
// to, or otherPart.
func partOf(s *profile.Sample) string {
	for _, part := range apiServerParts {
		for _, loc := range s.Location {
			for _, line := range loc.Line {
				if line.Function == nil {
					continue
				}
				for _, frame := range part.frames {
					if strings.Contains(line.Function.Name, frame) {
						return part.name
					}
				}
			}
		}
	}
	return otherPart
}

// printCPUPerPod prints where the run's CPU went per pod: kube-apiserver's
// by part (its profile's shares of the CPU it used over the whole run),
// then every other process's.
func printCPUPerPod(b *testing.B, used map[string]float64, pods int, apiServerProfile string) {
	perPod := func(seconds float64) float64 { return 1000 * seconds / float64(pods) }
	fmt.Printf("CPU ms per pod, by process; kube-apiserver's by part, from the shares of its profile's window (%s):\n", apiServerProfile)
	shares, err := apiServerBreakdown(apiServerProfile)
	if err != nil {
		b.Logf("kube-apiserver's profile: %v", err)
	}
	fmt.Printf("  kube-apiserver %.2f\n", perPod(used["kube-apiserver"]))
	names := make([]string, 0, len(apiServerParts)+1)
	for _, p := range apiServerParts {
		names = append(names, p.name)
	}
	for _, part := range append(names, otherPart) {
		if share, ok := shares[part]; ok {
			fmt.Printf("    %5.2f  %4.1f%%  %s\n", share*perPod(used["kube-apiserver"]), 100*share, part)
		}
	}
	for _, name := range largestFirst(used) {
		if name != "kube-apiserver" {
			fmt.Printf("  %s %.2f\n", name, perPod(used[name]))
		}
	}
}
