package podgroup

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

func TestParseTotalCount(t *testing.T) {
	tests := []struct {
		in   string
		want int32
		err  error
	}{
		{"1", 1, nil},
		{"10", 10, nil},
		{"2147483647", 2147483647, nil},
		{"0", 0, ErrCountTooSmall},
		{"-3", 0, ErrCountTooSmall},
		{"", 0, ErrCountNotInteger},
		{"ten", 0, ErrCountNotInteger},
		{"1.5", 0, ErrCountNotInteger},
		{"2147483648", 0, ErrCountNotInteger},
		{" 3", 0, ErrCountNotInteger},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseTotalCount(tt.in)
			if got != tt.want || !errors.Is(err, tt.err) {
				t.Fatalf("ParseTotalCount(%q) = %d, %v; want %d, %v", tt.in, got, err, tt.want, tt.err)
			}
		})
	}
}

// FuzzParseTotalCount: whatever the input, the parser either refuses it
// with one of its two errors or returns a count of at least 1 that is the
// input's decimal value.
func FuzzParseTotalCount(f *testing.F) {
	for _, seed := range []string{"1", "8", "0", "-1", "+4", "007", "2147483648", "x", "", "1e3", "٣"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseTotalCount(s)
		if err != nil {
			if n != 0 || (!errors.Is(err, ErrCountNotInteger) && !errors.Is(err, ErrCountTooSmall)) {
				t.Fatalf("ParseTotalCount(%q) = %d, %v", s, n, err)
			}
			return
		}
		if n < 1 {
			t.Fatalf("ParseTotalCount(%q) = %d, want at least 1", s, n)
		}
		if back, perr := strconv.ParseInt(strings.TrimPrefix(s, "+"), 10, 64); perr != nil || back != int64(n) {
			t.Fatalf("ParseTotalCount(%q) = %d, not the input's value", s, n)
		}
	})
}
