package testenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrPartlyRunning is returned by Start for a persistent Dir in which some
// components run and others do not; stop the survivors first
// (hack/cluster-down.sh) and start again.
var ErrPartlyRunning = errors.New("control plane partly running")

// runningComponents reports whether every component of specs runs from
// its pid file in f.pids. It fails with ErrPartlyRunning when only some do.
func runningComponents(f layout, specs []componentSpec) (bool, error) {
	var up, down []string
	for _, s := range specs {
		if pidRunning(filepath.Join(f.pids, s.name+".pid"), s.name) {
			up = append(up, s.name)
		} else {
			down = append(down, s.name)
		}
	}
	switch {
	case len(down) == 0:
		return true, nil
	case len(up) == 0:
		return false, nil
	default:
		return false, fmt.Errorf("testenv: %w in %s: running %s, not running %s",
			ErrPartlyRunning, f.dir, strings.Join(up, ", "), strings.Join(down, ", "))
	}
}

// pidRunning reports whether the pid in pidFile is alive and runs the
// named binary (a recycled pid would run something else).
func pidRunning(pidFile, name string) bool {
	raw, err := os.ReadFile(pidFile)
	if err != nil {
		return false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || !processAlive(pid) {
		return false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	argv0, _, _ := strings.Cut(string(cmdline), "\x00")
	return filepath.Base(argv0) == name
}

// attach connects to the components already running from a persistent Dir
// and makes sure the kwok nodes asked for exist.
func (e *Env) attach(ctx context.Context) error {
	ports, err := readPorts(e.files)
	if err != nil {
		return err
	}
	creds, err := ensureCredentials(e.files)
	if err != nil {
		return err
	}
	e.Ports = ports
	e.Attached = true
	e.APIServerURL = fmt.Sprintf("https://%s:%d", loopback, ports.APIServer)
	e.Config = adminConfig(e.APIServerURL, creds)
	e.Kubeconfig = e.files.kubeconfig
	checks := newHealth(creds)
	if err := waitUntil(ctx, "kube-apiserver /readyz", nil, func(ctx context.Context) error {
		return checks.apiServerReady(ctx, e.APIServerURL)
	}); err != nil {
		return err
	}
	if !e.opts.Kwok {
		return nil
	}
	if err := createNodes(ctx, e.Config, e.files, e.opts); err != nil {
		return err
	}
	return waitUntil(ctx, fmt.Sprintf("%d kwok nodes Ready", e.opts.Nodes), nil, func(ctx context.Context) error {
		return nodesReady(ctx, e.Config, e.opts.Nodes)
	})
}

func portsFile(f layout) string { return filepath.Join(f.dir, "ports.json") }

func writePorts(f layout, p Ports) error {
	raw, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return fmt.Errorf("testenv: encode ports: %w", err)
	}
	if err := os.MkdirAll(f.dir, 0o755); err != nil {
		return fmt.Errorf("testenv: create %s: %w", f.dir, err)
	}
	if err := os.WriteFile(portsFile(f), raw, 0o644); err != nil {
		return fmt.Errorf("testenv: write ports: %w", err)
	}
	return nil
}

func readPorts(f layout) (Ports, error) {
	var p Ports
	raw, err := os.ReadFile(portsFile(f))
	if err != nil {
		return p, fmt.Errorf("testenv: read ports of the running control plane: %w", err)
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return p, fmt.Errorf("testenv: decode %s: %w", portsFile(f), err)
	}
	return p, nil
}
