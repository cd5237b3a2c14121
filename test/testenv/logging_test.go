package testenv

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

func TestSetLogger(t *testing.T) {
	tests := []struct {
		name    string
		log     func(logr.Logger)
		written string // "" when nothing may be written
	}{
		{name: "errors are written", log: func(l logr.Logger) { l.Error(errors.New("boom"), "watch failed") }, written: "watch failed"},
		{name: "info is dropped", log: func(l logr.Logger) { l.Info("routine") }},
		{name: "verbose info is dropped", log: func(l logr.Logger) { l.V(1).Info("chatty") }},
	}
	t.Cleanup(func() { SetLogger(os.Stderr) })
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			SetLogger(&buf)
			// Loggers derived from controller-runtime's root, as its
			// packages derive theirs, must reach the sink.
			tt.log(ctrllog.Log.WithName("cache"))
			got := buf.String()
			switch {
			case tt.written == "" && got != "":
				t.Errorf("wrote %q, want nothing", got)
			case tt.written != "" && !strings.Contains(got, tt.written):
				t.Errorf("wrote %q, want it to contain %q", got, tt.written)
			}
		})
	}
}
