package testenv

import (
	"io"
	"log/slog"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// SetLogger gives controller-runtime's global logger, through which the
// clients and caches a test process creates log, a sink that writes their
// errors to w. Without one controller-runtime drops every message and, 30
// seconds into the process, prints a warning with a stack trace instead.
// RunMain calls it with os.Stderr; a test binary that starts its control
// plane with Start calls it from its TestMain.
func SetLogger(w io.Writer) {
	ctrllog.SetLogger(errorLogger(w))
}

// errorLogger writes only errors to w.
func errorLogger(w io.Writer) logr.Logger {
	return logr.FromSlogHandler(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelError}))
}
