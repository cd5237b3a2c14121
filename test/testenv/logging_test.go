package testenv

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/go-logr/logr"
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
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// controller-runtime's root logger can be set only once per
			// process (RunMain already did), so the sink is tested as built.
			var buf bytes.Buffer
			tt.log(errorLogger(&buf).WithName("cache"))
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
