// Command localcluster starts sluice's long-lived local control plane with
// the settings of package testenv; hack/cluster-up.sh runs it. The
// components keep running after it exits; hack/cluster-down.sh stops them.
//
// Usage: localcluster up
//
// Settings come from the environment (see docs/local-cluster.md):
// SLUICE_STATE_DIR (default <module root>/.local), SLUICE_NODES,
// SLUICE_NODE_CPU, SLUICE_NODE_MEMORY, SLUICE_NODE_PODS, SLUICE_ETCD_PORT,
// SLUICE_ETCD_PEER_PORT, SLUICE_APISERVER_PORT,
// SLUICE_CONTROLLER_MANAGER_PORT, SLUICE_SCHEDULER_PORT.
//
// Exit status 3 means the state dir's control plane is only partly running.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/sluice-dev/sluice/test/testenv"
)

const exitPartlyRunning = 3

func main() {
	if len(os.Args) != 2 || os.Args[1] != "up" {
		fmt.Fprintln(os.Stderr, "usage: localcluster up")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	os.Exit(up(ctx))
}

func up(ctx context.Context) int {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	opts, err := optionsFromEnv()
	if err != nil {
		log.Error("invalid settings", "err", err)
		return 2
	}
	opts.Logf = func(format string, args ...any) { log.Info(fmt.Sprintf(format, args...)) }

	began := time.Now()
	env, err := testenv.Start(ctx, opts)
	if errors.Is(err, testenv.ErrPartlyRunning) {
		log.Error("cannot start", "err", err)
		return exitPartlyRunning
	}
	if err != nil {
		log.Error("cannot start the local control plane", "err", err)
		return 1
	}
	state := "started"
	if env.Attached {
		state = "already up"
	}
	fmt.Printf("local control plane %s (%s): API server %s, %d kwok nodes\n",
		state, time.Since(began).Round(10*time.Millisecond), env.APIServerURL, opts.Nodes)
	fmt.Printf("  export KUBECONFIG=%s\n  logs: %s\n", env.Kubeconfig, env.LogDir())
	return 0
}

func optionsFromEnv() (testenv.Options, error) {
	root, err := testenv.ModuleRoot()
	if err != nil {
		return testenv.Options{}, err
	}
	o := testenv.Options{
		Scheduler:         true,
		ControllerManager: true,
		Kwok:              true,
		Detach:            true,
		Dir:               envString("SLUICE_STATE_DIR", filepath.Join(root, ".local")),
		Node: testenv.NodeShape{
			CPU:    envString("SLUICE_NODE_CPU", testenv.DefaultNodeCPU),
			Memory: envString("SLUICE_NODE_MEMORY", testenv.DefaultNodeMemory),
		},
	}
	ints := []struct {
		name string
		def  int
		dst  *int
	}{
		{"SLUICE_NODES", testenv.DefaultNodes, &o.Nodes},
		{"SLUICE_NODE_PODS", testenv.DefaultNodePods, &o.Node.Pods},
		{"SLUICE_ETCD_PORT", 2379, &o.Ports.Etcd},
		{"SLUICE_ETCD_PEER_PORT", 2380, &o.Ports.EtcdPeer},
		{"SLUICE_APISERVER_PORT", 6443, &o.Ports.APIServer},
		{"SLUICE_CONTROLLER_MANAGER_PORT", 10257, &o.Ports.ControllerManager},
		{"SLUICE_SCHEDULER_PORT", 10259, &o.Ports.Scheduler},
	}
	for _, v := range ints {
		n, err := envInt(v.name, v.def)
		if err != nil {
			return o, err
		}
		*v.dst = n
	}
	if o.Nodes < 1 {
		return o, fmt.Errorf("SLUICE_NODES must be at least 1, got %d", o.Nodes)
	}
	return o, nil
}

func envString(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func envInt(name string, def int) (int, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%s must be an integer, got %q", name, v)
	}
	return n, nil
}
