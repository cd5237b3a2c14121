package testenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

const (
	tempDirPrefix = "sluice-testenv-"
	// ownerFile in a temporary state dir holds the pid of the process that
	// created it, so a later Start can remove dirs whose owner was killed.
	ownerFile = "owner.pid"
	// keepEnv set to any value keeps temporary state dirs after Stop.
	keepEnv = "SLUICE_TESTENV_KEEP"
	// binDirEnv overrides where the control-plane binaries are found.
	binDirEnv = "SLUICE_BIN_DIR"
)

// layout names every file of one control plane's state directory.
type layout struct {
	dir, root string
	bins      binaries

	logs, pids, etcdData string

	caCert, caKey           string
	servingCert, servingKey string
	saKey, saPub            string
	tokenCSV, token         string

	kubeconfig      string
	schedulerConfig string
	kwokConfig      string
	kwokStages      string
	nodeTemplate    string
}

func newLayout(dir, root string, bins binaries) layout {
	pki := filepath.Join(dir, "pki")
	kwok := filepath.Join(root, "hack", "kwok")
	return layout{
		dir: dir, root: root, bins: bins,
		logs:            filepath.Join(dir, "logs"),
		pids:            filepath.Join(dir, "pids"),
		etcdData:        filepath.Join(dir, "etcd"),
		caCert:          filepath.Join(pki, "ca.crt"),
		caKey:           filepath.Join(pki, "ca.key"),
		servingCert:     filepath.Join(pki, "serving.crt"),
		servingKey:      filepath.Join(pki, "serving.key"),
		saKey:           filepath.Join(pki, "service-account.key"),
		saPub:           filepath.Join(pki, "service-account.pub"),
		tokenCSV:        filepath.Join(pki, "tokens.csv"),
		token:           filepath.Join(pki, "admin.token"),
		kubeconfig:      filepath.Join(dir, "kubeconfig"),
		schedulerConfig: filepath.Join(dir, "kube-scheduler.yaml"),
		kwokConfig:      filepath.Join(kwok, "kwok.yaml"),
		kwokStages:      filepath.Join(kwok, "stages.yaml"),
		nodeTemplate:    filepath.Join(kwok, "node.yaml"),
	}
}

// ModuleRoot returns the directory of the nearest go.mod at or above the
// working directory.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("testenv: working directory: %w", err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("testenv: no go.mod at or above %s", dir)
		}
	}
}

// binaries are the absolute paths of the control-plane executables.
type binaries struct {
	etcd, apiServer, controllerManager, scheduler, kwok string
	// kubectl is not started; tests run it as a user would.
	kubectl string
}

func findBinaries(root string, o Options) (binaries, error) {
	dir := o.BinDir
	if dir == "" {
		dir = os.Getenv(binDirEnv)
	}
	if dir == "" {
		dir = filepath.Join(root, "bin")
	}
	b := binaries{
		etcd:              filepath.Join(dir, "etcd"),
		apiServer:         filepath.Join(dir, "kube-apiserver"),
		controllerManager: filepath.Join(dir, "kube-controller-manager"),
		scheduler:         filepath.Join(dir, "kube-scheduler"),
		kwok:              filepath.Join(dir, "kwok"),
		kubectl:           filepath.Join(dir, "kubectl"),
	}
	need := []string{b.etcd, b.apiServer}
	if o.ControllerManager {
		need = append(need, b.controllerManager)
	}
	if o.Scheduler {
		need = append(need, b.scheduler)
	}
	if o.Kwok {
		need = append(need, b.kwok)
	}
	var missing []string
	for _, p := range need {
		st, err := os.Stat(p)
		if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			missing = append(missing, filepath.Base(p))
		}
	}
	if len(missing) > 0 {
		return b, fmt.Errorf("testenv: %s missing in %s; build the control plane once with `make cluster-up` or hack/build-cluster.sh",
			strings.Join(missing, ", "), dir)
	}
	return b, nil
}

// removeStaleDirs deletes temporary state dirs whose owning process is gone
// (a test binary killed before it could clean up). Dirs kept on purpose
// hold only logs and are left alone.
func removeStaleDirs(logf func(string, ...any)) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), tempDirPrefix+"*"))
	for _, d := range dirs {
		raw, err := os.ReadFile(filepath.Join(d, ownerFile))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
		if err != nil || processAlive(pid) {
			continue
		}
		if err := os.RemoveAll(d); err == nil {
			logf("removed state of dead test process %d: %s", pid, d)
		}
	}
}

// processAlive reports whether pid names a live process (or one we may not
// signal, which is alive too).
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
