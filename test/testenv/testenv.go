// Package testenv runs sluice's local Kubernetes control plane: etcd and
// kube-apiserver, and on request kube-scheduler, kube-controller-manager and
// kwok with fake nodes, all on loopback. Tests start a private one per test
// package (Start, RunMain); hack/cluster-up.sh starts the long-lived
// developer cluster through the same code (cmd/localcluster), so both get
// the same flags, feature gates and kwok stages.
package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Defaults for kwok nodes, shared with hack/cluster-up.sh.
const (
	DefaultNodes      = 4
	DefaultNodeCPU    = "32"
	DefaultNodeMemory = "256Gi"
	DefaultNodePods   = 110

	// NodeLabel and NodeLabelValue mark every kwok node; kwok manages the
	// nodes that carry it and tests select them with it.
	NodeLabel      = "type"
	NodeLabelValue = "kwok"

	// ClientQPS and ClientBurst are the client-side rate limits of
	// Env.Config and of the scheduler and controller-manager clients: high
	// for tests, but a burst of thousands of requests on a fast machine
	// does meet them (a bucket of 1000 that refills at 500/s), so whatever
	// measures the API server's own ceiling uses a client without a limit
	// (test/bench does).
	ClientQPS   = 500
	ClientBurst = 1000

	// startTimeout bounds Start when the caller's context has no deadline.
	startTimeout = 2 * time.Minute
)

// Options choose the components of a control plane. The zero value starts
// only etcd and kube-apiserver, which is enough for pure API tests.
type Options struct {
	// Scheduler starts kube-scheduler.
	Scheduler bool
	// ControllerManager starts kube-controller-manager (namespace lifecycle,
	// garbage collection, service accounts and tokens).
	ControllerManager bool
	// Kwok starts kwok and creates Nodes fake nodes that it keeps Ready and
	// whose pods it runs (see hack/kwok/stages.yaml).
	Kwok bool
	// Nodes is the number of kwok nodes; zero means DefaultNodes.
	Nodes int
	// Node is the capacity of each kwok node; zero fields take defaults.
	Node NodeShape

	// Dir keeps all state (certificates, etcd data, logs, pids) and is
	// reused by the next Start with the same Dir. Empty means a fresh
	// temporary directory that Stop removes.
	Dir string
	// Ports fixes listen ports; zero fields get free loopback ports.
	Ports Ports
	// Detach lets the components outlive this process (hack/cluster-up.sh).
	// Without it they are killed when this process dies, however it dies.
	Detach bool
	// BinDir holds the binaries; empty means $SLUICE_BIN_DIR, else bin/ in
	// the module root.
	BinDir string
	// Logf reports progress; nil is silent.
	Logf func(format string, args ...any)
}

// NodeShape is the capacity of one kwok node.
type NodeShape struct {
	CPU    string // a resource quantity, e.g. "32"
	Memory string // a resource quantity, e.g. "256Gi"
	Pods   int
}

// Ports are the loopback ports of the components.
type Ports struct {
	Etcd              int
	EtcdPeer          int
	APIServer         int
	ControllerManager int
	Scheduler         int
}

// anyFree reports whether some port is left to allocatePorts.
func (p Ports) anyFree() bool {
	return p.Etcd == 0 || p.EtcdPeer == 0 || p.APIServer == 0 || p.ControllerManager == 0 || p.Scheduler == 0
}

// Env is a running control plane.
type Env struct {
	// Config is an admin (system:masters) client config with QPS and Burst
	// raised to ClientQPS and ClientBurst.
	Config *rest.Config
	// Kubeconfig is the path of an admin kubeconfig file for other
	// processes (kubectl, services under test).
	Kubeconfig string
	// Dir holds the state; logs are in Dir/logs/<component>.log.
	Dir string
	// APIServerURL is the https URL of kube-apiserver.
	APIServerURL string
	// Ports are the ports in use.
	Ports Ports
	// Attached is set when a persistent Dir's components were already
	// running and Start only connected to them.
	Attached bool

	opts    Options
	files   layout
	procs   []*process
	spawner *Spawner
	ownsDir bool

	stopMu  sync.Mutex
	stopped bool
}

// Start starts a control plane with the components opts names and returns
// once the API server is ready, the other components report healthy and the
// kwok nodes are Ready. On failure everything started is stopped and the
// error names the log to read.
func Start(ctx context.Context, opts Options) (*Env, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, startTimeout)
		defer cancel()
	}
	opts = withDefaults(opts)
	if err := validate(opts); err != nil {
		return nil, err
	}
	root, err := ModuleRoot()
	if err != nil {
		return nil, err
	}
	bins, err := findBinaries(root, opts)
	if err != nil {
		return nil, err
	}

	// A free port can be taken by another process before the component
	// binds it; that is worth another try with other ports.
	for attempt := 1; ; attempt++ {
		env, err := startOnce(ctx, opts, root, bins)
		retry := errors.Is(err, errPortTaken) && opts.Ports.anyFree() && attempt < portAttempts && ctx.Err() == nil
		if !retry {
			return env, err
		}
		opts.logf("start attempt %d: %v; retrying with other ports", attempt, err)
	}
}

const portAttempts = 3

// errPortTaken marks a start that failed because a port was in use.
var errPortTaken = errors.New("port already in use")

func startOnce(ctx context.Context, opts Options, root string, bins binaries) (*Env, error) {
	env := &Env{opts: opts}
	var err error
	if opts.Dir == "" {
		removeStaleDirs(opts.logf)
		env.Dir, err = os.MkdirTemp("", tempDirPrefix)
		if err != nil {
			return nil, fmt.Errorf("testenv: create state dir: %w", err)
		}
		env.ownsDir = true
		if err := os.WriteFile(filepath.Join(env.Dir, ownerFile), []byte(fmt.Sprint(os.Getpid())), 0o644); err != nil {
			return nil, errors.Join(fmt.Errorf("testenv: record owner: %w", err), os.RemoveAll(env.Dir))
		}
	} else {
		env.Dir, err = filepath.Abs(opts.Dir)
		if err != nil {
			return nil, fmt.Errorf("testenv: state dir %q: %w", opts.Dir, err)
		}
	}
	env.files = newLayout(env.Dir, root, bins)

	if !env.ownsDir {
		running, err := runningComponents(env.files, componentSpecs(env.files, Ports{}, opts))
		if err != nil {
			return nil, err
		}
		if running {
			if err := env.attach(ctx); err != nil {
				return nil, err
			}
			return env, nil
		}
	}
	if err := env.start(ctx); err != nil {
		// Keep the logs for the reader of the error, drop the rest; a
		// start that is retried keeps nothing.
		return nil, errors.Join(err, env.stop(!errors.Is(err, errPortTaken)))
	}
	return env, nil
}

func (e *Env) start(ctx context.Context) error {
	ports, err := allocatePorts(e.opts.Ports)
	if err != nil {
		return err
	}
	e.Ports = ports
	if err := writePorts(e.files, ports); err != nil {
		return err
	}
	creds, err := ensureCredentials(e.files)
	if err != nil {
		return err
	}
	e.APIServerURL = fmt.Sprintf("https://%s:%d", loopback, ports.APIServer)
	e.Config = adminConfig(e.APIServerURL, creds)
	e.Kubeconfig = e.files.kubeconfig
	if err := writeConfigFiles(e.files, e.APIServerURL, creds); err != nil {
		return err
	}
	for _, d := range []string{e.files.logs, e.files.pids} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("testenv: create %s: %w", d, err)
		}
	}
	e.spawner = NewSpawner(e.opts.Detach)

	checks := newHealth(creds)
	specs := componentSpecs(e.files, ports, e.opts)

	// etcd and kube-apiserver start together; the API server retries etcd
	// until it answers.
	for _, s := range specs[:2] {
		if err := e.spawn(s); err != nil {
			return err
		}
	}
	if err := waitUntil(ctx, "kube-apiserver /readyz", e.procs, func(ctx context.Context) error {
		return checks.apiServerReady(ctx, e.APIServerURL)
	}); err != nil {
		return err
	}
	e.opts.logf("kube-apiserver ready at %s", e.APIServerURL)

	for _, s := range specs[2:] {
		if err := e.spawn(s); err != nil {
			return err
		}
	}
	if e.opts.Kwok {
		if err := createNodes(ctx, e.Config, e.files, e.opts); err != nil {
			return err
		}
	}
	for _, s := range specs[2:] {
		if s.healthURL == "" {
			continue
		}
		if err := waitUntil(ctx, s.name+" /healthz", e.procs, func(ctx context.Context) error {
			return checks.healthy(ctx, s.healthURL)
		}); err != nil {
			return err
		}
	}
	if e.opts.Kwok {
		if err := waitUntil(ctx, fmt.Sprintf("%d kwok nodes Ready", e.opts.Nodes), e.procs, func(ctx context.Context) error {
			return nodesReady(ctx, e.Config, e.opts.Nodes)
		}); err != nil {
			return err
		}
	}
	return nil
}

// Stop stops every component (killing their process groups) and removes
// the state directory if Start created it (unless SLUICE_TESTENV_KEEP is
// set). Calling it again does nothing.
func (e *Env) Stop() error { return e.stop(false) }

// stop stops the components once; keepLogs keeps the logs of a temporary
// state dir for a reader of a failure.
func (e *Env) stop(keepLogs bool) error {
	e.stopMu.Lock()
	defer e.stopMu.Unlock()
	if e.stopped {
		return nil
	}
	e.stopped = true
	err := e.stopProcesses(0)
	if e.spawner != nil {
		e.spawner.Close()
	}
	switch {
	case !e.ownsDir || os.Getenv(keepEnv) != "":
	case keepLogs:
		err = errors.Join(err, e.removeAllButLogs())
	default:
		err = errors.Join(err, os.RemoveAll(e.Dir))
	}
	return err
}

// LogPath returns the log file of a component ("etcd", "kube-apiserver",
// "kube-scheduler", "kube-controller-manager", "kwok").
func (e *Env) LogPath(component string) string {
	return filepath.Join(e.files.logs, component+".log")
}

// LogDir returns the directory that holds every component's log.
func (e *Env) LogDir() string { return e.files.logs }

// Kubectl returns the path of the kubectl built with the control plane,
// for tests that act as a person would.
func (e *Env) Kubectl() string { return e.files.bins.kubectl }

// Clientset returns a typed client for Config.
func (e *Env) Clientset() (kubernetes.Interface, error) {
	cs, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		return nil, fmt.Errorf("testenv: clientset: %w", err)
	}
	return cs, nil
}

func (e *Env) removeAllButLogs() error {
	entries, err := os.ReadDir(e.Dir)
	if err != nil {
		return fmt.Errorf("testenv: clean %s: %w", e.Dir, err)
	}
	var errs []error
	for _, ent := range entries {
		if ent.Name() == "logs" {
			continue
		}
		errs = append(errs, os.RemoveAll(filepath.Join(e.Dir, ent.Name())))
	}
	return errors.Join(errs...)
}

func withDefaults(o Options) Options {
	if o.Kwok && o.Nodes == 0 {
		o.Nodes = DefaultNodes
	}
	if o.Node.CPU == "" {
		o.Node.CPU = DefaultNodeCPU
	}
	if o.Node.Memory == "" {
		o.Node.Memory = DefaultNodeMemory
	}
	if o.Node.Pods == 0 {
		o.Node.Pods = DefaultNodePods
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	return o
}

func validate(o Options) error {
	var errs []string
	if o.Nodes < 0 {
		errs = append(errs, fmt.Sprintf("Nodes must not be negative, got %d", o.Nodes))
	}
	if o.Node.Pods < 0 {
		errs = append(errs, fmt.Sprintf("Node.Pods must not be negative, got %d", o.Node.Pods))
	}
	for name, p := range map[string]int{
		"Ports.Etcd": o.Ports.Etcd, "Ports.EtcdPeer": o.Ports.EtcdPeer, "Ports.APIServer": o.Ports.APIServer,
		"Ports.ControllerManager": o.Ports.ControllerManager, "Ports.Scheduler": o.Ports.Scheduler,
	} {
		if p < 0 || p > 65535 {
			errs = append(errs, fmt.Sprintf("%s must be within 0..65535, got %d", name, p))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("testenv: invalid options: %s", strings.Join(errs, "; "))
	}
	return nil
}

func (o Options) logf(format string, args ...any) { o.Logf(format, args...) }

// logTail returns the last lines of a log file, for error messages.
func logTail(path string, lines int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	const max = 64 << 10
	if st, err := f.Stat(); err == nil && st.Size() > max {
		_, _ = f.Seek(-max, io.SeekEnd)
	}
	b, _ := io.ReadAll(f)
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}
