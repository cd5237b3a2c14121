package telemetry

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestNewLoggerLevels(t *testing.T) {
	tests := []struct {
		level      string
		wantV      []int // verbosities that must be written
		wantNotV   []int // verbosities that must be dropped
		wantErrors bool  // whether Error() is written
	}{
		{level: "info", wantV: []int{0}, wantNotV: []int{1}, wantErrors: true},
		{level: "", wantV: []int{0}, wantNotV: []int{1}, wantErrors: true},
		{level: "debug", wantV: []int{0, 1, 4}, wantNotV: []int{5}, wantErrors: true},
		{level: "2", wantV: []int{0, 2}, wantNotV: []int{3}, wantErrors: true},
		{level: "error", wantNotV: []int{0}, wantErrors: true},
		{level: "WARN", wantNotV: []int{0}, wantErrors: true},
	}
	for _, tt := range tests {
		t.Run(tt.level, func(t *testing.T) {
			var buf bytes.Buffer
			log, err := NewLogger(&buf, tt.level, "json")
			if err != nil {
				t.Fatalf("NewLogger: %v", err)
			}
			check := func(v int, want bool) {
				buf.Reset()
				log.V(v).Info("hello", "v", v)
				if got := buf.Len() > 0; got != want {
					t.Errorf("level %q: V(%d) written = %v, want %v (output %q)", tt.level, v, got, want, buf.String())
				}
			}
			for _, v := range tt.wantV {
				check(v, true)
			}
			for _, v := range tt.wantNotV {
				check(v, false)
			}
			buf.Reset()
			log.Error(nil, "boom")
			if got := buf.Len() > 0; got != tt.wantErrors {
				t.Errorf("Error written = %v, want %v", got, tt.wantErrors)
			}
		})
	}
}

func TestNewLoggerFormats(t *testing.T) {
	tests := []struct {
		format string
		check  func(t *testing.T, out string)
	}{
		{format: "json", check: func(t *testing.T, out string) {
			var m map[string]any
			if err := json.Unmarshal([]byte(out), &m); err != nil {
				t.Fatalf("output is not JSON: %v: %q", err, out)
			}
			if m["msg"] != "pod ungated" || m["pod"] != "ns/p" || m["logger"] != "grouper" {
				t.Errorf("unexpected fields: %v", m)
			}
		}},
		{format: "text", check: func(t *testing.T, out string) {
			for _, want := range []string{`msg="pod ungated"`, "pod=ns/p", "logger=grouper"} {
				if !strings.Contains(out, want) {
					t.Errorf("output %q lacks %q", out, want)
				}
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.format, func(t *testing.T) {
			var buf bytes.Buffer
			log, err := NewLogger(&buf, "info", tt.format)
			if err != nil {
				t.Fatalf("NewLogger: %v", err)
			}
			log.WithName("grouper").Info("pod ungated", "pod", "ns/p")
			tt.check(t, buf.String())
		})
	}
}

func TestNewLoggerRejectsBadInput(t *testing.T) {
	tests := []struct {
		name, level, format, wantErr string
	}{
		{name: "unknown format", level: "info", format: "xml", wantErr: `log format "xml"`},
		{name: "unknown level", level: "loud", format: "json", wantErr: `log level "loud"`},
		{name: "negative verbosity", level: "-1", format: "json", wantErr: "verbosity must be >= 0"},
		{name: "offset level", level: "info+2", format: "json", wantErr: `log level "info+2"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewLogger(&bytes.Buffer{}, tt.level, tt.format)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}
