package budget

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr"
)

// Reloader reads the config file again when its contents change (a
// mounted ConfigMap is swapped behind a symlink, so its modification time
// alone is not to be trusted) and gives the new budgets to the Checker. A
// file that cannot be read or parsed is logged, and the last good budgets
// stay.
type Reloader struct {
	path    string
	checker *Checker
	log     logr.Logger
	seen    []byte // contents last read, good or not: each change is logged once
}

// NewReloader watches path for checker; initial is the contents the
// checker's current config was parsed from (LoadFile returns them).
func NewReloader(path string, checker *Checker, initial []byte, log logr.Logger) *Reloader {
	return &Reloader{path: path, checker: checker, log: log, seen: initial}
}

// Reload reads the file once and applies it if it changed. It reports
// whether it applied new budgets; the error says why a bad file was not
// applied, or that pushing the keys of revoked evaluations failed.
func (r *Reloader) Reload() (applied bool, err error) {
	data, err := os.ReadFile(r.path)
	if err != nil {
		return false, fmt.Errorf("reading budget config: %w", err)
	}
	if bytes.Equal(data, r.seen) {
		return false, nil
	}
	r.seen = data
	cfg, err := Parse(data)
	if err != nil {
		return false, fmt.Errorf("budget config %s: %w; keeping the budgets read last", r.path, err)
	}
	revoked, err := r.checker.SetConfig(cfg)
	r.log.Info("budget config reloaded", "path", r.path, "namespaces", len(cfg.Namespaces))
	if len(revoked) > 0 {
		r.log.Info("budgets lowered below usage: revoked the newest admissions", "evaluationKeys", revoked)
	}
	return true, err
}

// Run calls Reload every interval until ctx ends, logging errors.
func (r *Reloader) Run(ctx context.Context, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if _, err := r.Reload(); err != nil {
				r.log.Error(err, "budget config not reloaded")
			}
		}
	}
}
