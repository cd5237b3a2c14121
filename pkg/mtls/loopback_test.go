package mtls

import "testing"

func TestLoopbackAddr(t *testing.T) {
	tests := []struct {
		addr string
		want bool
	}{
		{"127.0.0.1:9090", true},
		{"127.1.2.3:9090", true},
		{"[::1]:9090", true},
		{"localhost:9090", true},
		{":9090", false},
		{"0.0.0.0:9090", false},
		{"10.0.0.1:9090", false},
		{"admitter:9090", false},
		{"127.0.0.1", false}, // not host:port
	}
	for _, tt := range tests {
		if got := LoopbackAddr(tt.addr); got != tt.want {
			t.Errorf("LoopbackAddr(%q) = %v, want %v", tt.addr, got, tt.want)
		}
	}
}

func TestLoopbackTarget(t *testing.T) {
	tests := []struct {
		target string
		want   bool
	}{
		{"127.0.0.1:9091", true},
		{"dns:///127.0.0.1:9091", true},
		{"dns://8.8.8.8/127.0.0.1:9091", true},
		{"dns:127.0.0.1:9091", true},
		{"passthrough:///localhost:9091", true},
		{"dns:///[::1]:9091", true},
		{"localhost", true},
		{"unix:///run/provider.sock", true},
		{"unix-abstract:provider", true},
		{"dns:///checks.sluice-system:9091", false},
		{"dns:///localhost.evil.example:9091", false},
		{"10.0.0.1:9091", false},
		{"dns:///0.0.0.0:9091", false},
		{"xds:///127.0.0.1:9091", false},
	}
	for _, tt := range tests {
		if got := LoopbackTarget(tt.target); got != tt.want {
			t.Errorf("LoopbackTarget(%q) = %v, want %v", tt.target, got, tt.want)
		}
	}
}
