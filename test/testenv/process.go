package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// process is one running component.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed once the process has exited
	err     error         // exit status, valid after done
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// exitError describes an exited process with the end of its log.
func (p *process) exitError() error {
	tail := logTail(p.logPath, 25)
	err := fmt.Errorf("%s exited (%v); log %s ends with:\n%s", p.name, p.err, p.logPath, tail)
	if strings.Contains(tail, "address already in use") {
		return fmt.Errorf("%w: %w", errPortTaken, err)
	}
	return err
}

// Spawner starts child processes in process groups of their own, from one
// goroutine locked to its OS thread. Unless detached, children get
// Pdeathsig SIGKILL: the kernel sends it when the thread that forked a child
// ends, not the process, so that thread lives as long as the children
// should, and they die with this process however it dies.
type Spawner struct {
	detach bool
	reqs   chan spawnReq
}

type spawnReq struct {
	cmd  *exec.Cmd
	errc chan error
}

// NewSpawner returns a Spawner; detached children outlive this process.
func NewSpawner(detach bool) *Spawner {
	s := &Spawner{detach: detach, reqs: make(chan spawnReq)}
	go func() {
		runtime.LockOSThread()
		// Never unlocked: when Close ends this goroutine its thread exits,
		// which is what kills the children if Stop was skipped.
		for r := range s.reqs {
			r.errc <- r.cmd.Start()
		}
	}()
	return s
}

// Start starts cmd, replacing its SysProcAttr.
func (s *Spawner) Start(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if !s.detach {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	errc := make(chan error, 1)
	s.reqs <- spawnReq{cmd: cmd, errc: errc}
	return <-errc
}

// Close ends the spawning thread, which kills children that are not
// detached.
func (s *Spawner) Close() { close(s.reqs) }

// spawn starts one component with its output in its log file and, for a
// persistent state dir, its pid in pids/<name>.pid.
func (e *Env) spawn(s componentSpec) error {
	logPath := filepath.Join(e.files.logs, s.name+".log")
	flags := os.O_CREATE | os.O_WRONLY | os.O_APPEND
	logFile, err := os.OpenFile(logPath, flags, 0o644)
	if err != nil {
		return fmt.Errorf("testenv: open %s log: %w", s.name, err)
	}
	defer logFile.Close() // the child has its own copy
	fmt.Fprintf(logFile, "=== %s %s %v\n", time.Now().Format(time.RFC3339), s.bin, s.args)

	cmd := exec.Command(s.bin, s.args...)
	cmd.Dir = e.Dir
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	if err := e.spawner.Start(cmd); err != nil {
		return fmt.Errorf("testenv: start %s: %w", s.name, err)
	}
	p := &process{name: s.name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	e.procs = append(e.procs, p)
	pidFile := filepath.Join(e.files.pids, s.name+".pid")
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		return fmt.Errorf("testenv: write %s: %w", pidFile, err)
	}
	e.opts.logf("started %s (pid %d), log %s", s.name, cmd.Process.Pid, logPath)
	return nil
}

// stopProcesses stops the components in reverse start order: SIGTERM to
// each process group, SIGKILL after grace (at once when grace is zero).
func (e *Env) stopProcesses(grace time.Duration) error {
	var errs []error
	for i := len(e.procs) - 1; i >= 0; i-- {
		p := e.procs[i]
		if err := stopGroup(p, grace); err != nil {
			errs = append(errs, err)
		}
		_ = os.Remove(filepath.Join(e.files.pids, p.name+".pid"))
	}
	e.procs = nil
	return errors.Join(errs...)
}

func stopGroup(p *process, grace time.Duration) error {
	pgid := p.cmd.Process.Pid
	if grace > 0 && !p.exited() {
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(grace):
		}
	}
	// Kill the group even when the leader is gone: a child it left behind
	// would otherwise survive.
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("testenv: kill %s: %w", p.name, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("testenv: %s (pid %d) did not exit after SIGKILL", p.name, pgid)
	}
}

// allocatePorts fills zero ports with free loopback ports.
func allocatePorts(fixed Ports) (Ports, error) {
	p := fixed
	for _, port := range []*int{&p.Etcd, &p.EtcdPeer, &p.APIServer, &p.ControllerManager, &p.Scheduler} {
		if *port != 0 {
			continue
		}
		free, err := FreePort()
		if err != nil {
			return p, err
		}
		*port = free
	}
	return p, nil
}

// waitUntil polls check until it succeeds, ctx ends, or one of procs exits.
func waitUntil(ctx context.Context, what string, procs []*process, check func(context.Context) error) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		for _, p := range procs {
			if p.exited() {
				return fmt.Errorf("testenv: waiting for %s: %w", what, p.exitError())
			}
		}
		// Short, so a process that died is noticed soon even when its port
		// answers nothing (a stranger holding it).
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		last = check(cctx)
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testenv: waiting for %s: %w (last check: %v); logs in %s",
				what, ctx.Err(), last, logDirOf(procs))
		case <-tick.C:
		}
	}
}

func logDirOf(procs []*process) string {
	if len(procs) == 0 {
		return "(none)"
	}
	return filepath.Dir(procs[0].logPath)
}

// Pids returns the process id of each running component, by name
// ("etcd", "kube-apiserver", ...).
func (e *Env) Pids() map[string]int {
	pids := map[string]int{}
	for _, p := range e.procs {
		if !p.exited() {
			pids[p.name] = p.cmd.Process.Pid
		}
	}
	return pids
}
