// Package sdktest runs a provider built with the SDK inside a Go test: on
// a free loopback port, stopped (calls in flight drained) when the test
// ends. Point the conformance kit, or a client of your own, at the address
// it returns.
package sdktest

import (
	"context"
	"net"
	"testing"

	"github.com/sluice-dev/sluice/services/checks/sdk"
)

// Start serves a provider of info and checker, built with opts, until the
// test ends, and returns its address (host:port).
func Start(t testing.TB, info sdk.Info, checker sdk.Checker, opts ...sdk.Option) string {
	t.Helper()
	srv, err := sdk.NewServer(info, checker, opts...)
	if err != nil {
		t.Fatalf("sdktest: %v", err)
	}
	return Serve(t, srv)
}

// Serve serves srv on 127.0.0.1 until the test ends and returns its
// address.
func Serve(t testing.TB, srv *sdk.Server) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("sdktest: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("sdktest: provider stopped: %v", err)
		}
	})
	return lis.Addr().String()
}
