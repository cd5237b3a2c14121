package checkvalidate

import (
	"strings"
	"testing"
)

func TestQualifiedName(t *testing.T) {
	tests := []struct {
		key     string
		wantErr string
	}{
		{key: "app"},
		{key: "example.com/pool"},
		{key: "a.b-c/x_y.z-1"},
		{key: strings.Repeat("a", 63)},
		{key: "", wantErr: "name part must not be empty"},
		{key: "example.com/", wantErr: "name part must not be empty"},
		{key: "/pool", wantErr: "prefix before '/' must not be empty"},
		{key: "Example.com/pool", wantErr: "prefix \"Example.com\""},
		{key: "a/b/c", wantErr: "name part \"b/c\""},
		{key: "-app", wantErr: "must consist of alphanumerics"},
		{key: "app_", wantErr: "must consist of alphanumerics"},
		{key: strings.Repeat("a", 64), wantErr: "at most 63 characters, got 64"},
		{key: strings.Repeat("a", 254) + "/x", wantErr: "at most 253 characters"},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			assertErr(t, QualifiedName(tt.key), tt.wantErr)
		})
	}
}

func TestLabelValue(t *testing.T) {
	tests := []struct {
		value   string
		wantErr string
	}{
		{value: ""},
		{value: "gpu-a100"},
		{value: "v1.2_3"},
		{value: strings.Repeat("x", 63)},
		{value: strings.Repeat("x", 64), wantErr: "at most 63 characters, got 64"},
		{value: "a b", wantErr: "must be empty or consist of"},
		{value: "a/b", wantErr: "must be empty or consist of"},
		{value: ".a", wantErr: "must be empty or consist of"},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			assertErr(t, LabelValue(tt.value), tt.wantErr)
		})
	}
}

func TestDNSSubdomain(t *testing.T) {
	tests := []struct {
		name    string
		wantErr string
	}{
		{name: "nodepool.checks.sluice.dev"},
		{name: "budget"},
		{name: "", wantErr: "must not be empty"},
		{name: "Budget.example.com", wantErr: "must consist of lowercase"},
		{name: "a..b", wantErr: "must consist of lowercase"},
		{name: "a_b.com", wantErr: "must consist of lowercase"},
		{name: strings.Repeat("a.", 127), wantErr: "at most 253 characters"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assertErr(t, DNSSubdomain(tt.name), tt.wantErr)
		})
	}
}

func TestConditionReason(t *testing.T) {
	tests := []struct {
		reason  string
		wantErr string
	}{
		{reason: "CapacityAvailable"},
		{reason: "Budget_Exhausted"},
		{reason: "a"},
		{reason: "", wantErr: "must consist of"},
		{reason: "1Bad", wantErr: "must consist of"},
		{reason: "Has Space", wantErr: "must consist of"},
		{reason: "Trailing:", wantErr: "must consist of"},
		{reason: "A" + strings.Repeat("b", 1024), wantErr: "at most 1024 characters"},
	}
	for _, tt := range tests {
		t.Run(tt.reason, func(t *testing.T) {
			assertErr(t, ConditionReason(tt.reason), tt.wantErr)
		})
	}
}

func TestIsReserved(t *testing.T) {
	tests := []struct {
		key  string
		want bool
	}{
		{key: "sluice.dev/workload", want: true},
		{key: "kueue.x-k8s.io/podset", want: true},
		{key: "nodepool.sluice.dev/pool", want: false},
		{key: "example.com/sluice.dev", want: false},
		{key: "sluice.dev", want: false},
		{key: "app", want: false},
	}
	for _, tt := range tests {
		if got := IsReserved(tt.key); got != tt.want {
			t.Errorf("IsReserved(%q) = %v, want %v", tt.key, got, tt.want)
		}
	}
}

// assertErr fails unless err is nil when want is empty, or contains want.
func assertErr(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatalf("unexpected error: %v", err)
	case want != "" && err == nil:
		t.Fatalf("no error, want one containing %q", want)
	case want != "" && !strings.Contains(err.Error(), want):
		t.Fatalf("error %q does not contain %q", err, want)
	}
}
