package app

import (
	"strings"
	"testing"
	"time"
)

// TestReleaseWait: unset takes the default, zero stays zero (hand over
// at the first failure), and a negative wait is refused naming the flag.
func TestReleaseWait(t *testing.T) {
	d := func(v time.Duration) *time.Duration { return &v }
	for _, tt := range []struct {
		name string
		set  *time.Duration
		want time.Duration
	}{
		{"unset", nil, DefaultReleaseWait},
		{"zero", d(0), 0},
		{"set", d(5 * time.Second), 5 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Config{ReleaseWait: tt.set}.releaseWait()
			if err != nil || got != tt.want {
				t.Fatalf("wait %s, %v; want %s", got, err, tt.want)
			}
		})
	}
	err := Config{ReleaseWait: d(-time.Second)}.ValidateReleaseWait()
	if err == nil || !strings.Contains(err.Error(), "--release-wait") {
		t.Fatalf("a negative wait: %v, want an error naming the flag", err)
	}
}
