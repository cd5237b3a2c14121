package testenv

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Ports for the components come from below the kernel's ephemeral range.
// A port the kernel picks for a listener and frees at once is one any
// outbound connection may take before the component binds it (the
// benchmarks' thousands of connections did); below the range only a
// listener ever takes a port.
const (
	lowestPort = 10000
	// defaultEphemeralLow is Linux's default lower bound of
	// net.ipv4.ip_local_port_range.
	defaultEphemeralLow = 32768
)

// nextPort walks the range from a random start, so that two calls in one
// process never hand out the same port and two test binaries rarely meet.
var (
	nextPort     atomic.Int64
	nextPortOnce sync.Once
)

// FreePort returns a loopback port nothing listens on right now, below the
// kernel's ephemeral range (see lowestPort); where that range starts too
// low to leave room, the kernel picks one.
func FreePort() (int, error) {
	high := ephemeralLow()
	if high-lowestPort < 1000 {
		return kernelPort()
	}
	span := int64(high - lowestPort)
	nextPortOnce.Do(func() { nextPort.Store(rand.Int64N(span)) })
	for range span {
		port := lowestPort + int(nextPort.Add(1)%span)
		l, err := net.Listen("tcp", net.JoinHostPort(loopback, strconv.Itoa(port)))
		if err != nil {
			continue // taken: try the next one
		}
		if err := l.Close(); err != nil {
			return 0, fmt.Errorf("testenv: free port %d: %w", port, err)
		}
		return port, nil
	}
	return 0, fmt.Errorf("testenv: no free loopback port in [%d, %d)", lowestPort, high)
}

// FreeAddr is FreePort as a loopback host:port.
func FreeAddr() (string, error) {
	port, err := FreePort()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(loopback, strconv.Itoa(port)), nil
}

// ephemeralLow is the lower bound of the kernel's ephemeral port range.
func ephemeralLow() int {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return defaultEphemeralLow
	}
	fields := strings.Fields(string(data))
	if len(fields) != 2 {
		return defaultEphemeralLow
	}
	low, err := strconv.Atoi(fields[0])
	if err != nil {
		return defaultEphemeralLow
	}
	return low
}

// kernelPort asks the kernel for an unused loopback port.
func kernelPort() (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(loopback, "0"))
	if err != nil {
		return 0, fmt.Errorf("testenv: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
