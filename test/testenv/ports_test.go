package testenv

import (
	"net"
	"strconv"
	"testing"
)

// TestFreePortAvoidsEphemeralRange: the ports handed out are distinct,
// bindable, and out of the range outbound connections take theirs from.
func TestFreePortAvoidsEphemeralRange(t *testing.T) {
	high := ephemeralLow()
	if high-lowestPort < 1000 {
		t.Skipf("the ephemeral range starts at %d: FreePort falls back to the kernel's choice", high)
	}
	seen := map[int]bool{}
	for range 200 {
		port, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if port < lowestPort || port >= high {
			t.Fatalf("port %d is outside [%d, %d)", port, lowestPort, high)
		}
		if seen[port] {
			t.Fatalf("port %d handed out twice", port)
		}
		seen[port] = true
	}
	// The last one is free to bind.
	var last int
	for p := range seen {
		last = p
	}
	l, err := net.Listen("tcp", net.JoinHostPort(loopback, strconv.Itoa(last)))
	if err != nil {
		t.Fatalf("port %d was handed out but cannot be bound: %v", last, err)
	}
	_ = l.Close()
}
