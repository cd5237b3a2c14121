package app

import (
	"strings"
	"testing"
	"time"
)

// TestReplacementWindow: unset takes the default, zero stays zero (the
// quota given back at once), and a negative window is refused naming the
// flag.
func TestReplacementWindow(t *testing.T) {
	d := func(v time.Duration) *time.Duration { return &v }
	for _, tt := range []struct {
		name string
		set  *time.Duration
		want time.Duration
	}{
		{"unset", nil, DefaultPodGroupReplacementWindow},
		{"zero", d(0), 0},
		{"set", d(2 * time.Minute), 2 * time.Minute},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Config{PodGroupReplacementWindow: tt.set}.replacementWindow()
			if err != nil || got != tt.want {
				t.Fatalf("window %s, %v; want %s", got, err, tt.want)
			}
		})
	}
	err := Config{PodGroupReplacementWindow: d(-time.Second)}.ValidateReplacementWindow()
	if err == nil || !strings.Contains(err.Error(), "--pod-group-replacement-window") {
		t.Fatalf("a negative window: %v, want an error naming the flag", err)
	}
}
