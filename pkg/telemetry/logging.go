package telemetry

import (
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"

	"github.com/go-logr/logr"
)

// NewLogger returns a structured logr.Logger writing to w through log/slog.
//
// level is "debug", "info", "warn", "error", or a non-negative number N that
// enables logr's V(N) messages (logr V(N) is slog level -N, so "debug" is
// the same as "4" and "info" as "0"). format is "json" or "text".
func NewLogger(w io.Writer, level, format string) (logr.Logger, error) {
	lvl, err := parseLevel(level)
	if err != nil {
		return logr.Logger{}, err
	}
	opts := &slog.HandlerOptions{Level: lvl}
	var h slog.Handler
	switch strings.ToLower(strings.TrimSpace(format)) {
	case "json":
		h = slog.NewJSONHandler(w, opts)
	case "text":
		h = slog.NewTextHandler(w, opts)
	default:
		return logr.Logger{}, fmt.Errorf("log format %q is not supported: must be \"json\" or \"text\"", format)
	}
	return logr.FromSlogHandler(h), nil
}

func parseLevel(level string) (slog.Level, error) {
	s := strings.ToLower(strings.TrimSpace(level))
	if s == "" {
		return slog.LevelInfo, nil
	}
	if n, err := strconv.Atoi(s); err == nil {
		if n < 0 {
			return 0, fmt.Errorf("log level %d is not valid: a verbosity must be >= 0", n)
		}
		return slog.Level(-n), nil
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil || strings.ContainsAny(s, "+-") {
		return 0, fmt.Errorf("log level %q is not valid: must be debug, info, warn, error or a verbosity >= 0", level)
	}
	return l, nil
}
