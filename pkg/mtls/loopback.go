package mtls

import (
	"net"
	"net/netip"
	"strings"
)

// LoopbackAddr reports whether a listen address (host:port) binds only a
// loopback interface. An empty host ("":9090) binds every interface, so it
// is not loopback.
func LoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	return loopbackHost(host)
}

// LoopbackTarget reports whether a gRPC target reaches only this machine:
// a unix socket, or a loopback host (localhost, 127.0.0.0/8, ::1) with or
// without the dns:/// or passthrough:/// scheme. A DNS name other than
// localhost may resolve anywhere, so it is not loopback.
func LoopbackTarget(target string) bool {
	if strings.HasPrefix(target, "unix:") || strings.HasPrefix(target, "unix-abstract:") {
		return true
	}
	for _, scheme := range []string{"dns:", "passthrough:"} {
		if rest, ok := strings.CutPrefix(target, scheme); ok {
			// dns://authority/host:port or dns:///host:port
			rest = strings.TrimPrefix(rest, "//")
			_, hostPort, found := strings.Cut(rest, "/")
			if !found {
				hostPort = rest
			}
			target = hostPort
			break
		}
	}
	host, _, err := net.SplitHostPort(target)
	if err != nil {
		host = target // a target may omit the port
	}
	return loopbackHost(host)
}

func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(strings.Trim(host, "[]"))
	return err == nil && ip.IsLoopback()
}
