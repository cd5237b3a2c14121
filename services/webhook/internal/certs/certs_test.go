package certs

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"path/filepath"
	"testing"
	"time"
)

func TestGenerateServesVerifiableTLS(t *testing.T) {
	dir := t.TempDir()
	caPEM, err := Generate(dir, []string{"127.0.0.1", "localhost"}, time.Hour)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile))
	if err != nil {
		t.Fatalf("load key pair: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("CA PEM does not parse")
	}

	lis, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}})
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	defer lis.Close()
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			_ = c.Close()
		}
	}()

	_, port, _ := net.SplitHostPort(lis.Addr().String())
	for _, host := range []string{"127.0.0.1", "localhost"} {
		conn, err := tls.Dial("tcp", net.JoinHostPort("127.0.0.1", port), &tls.Config{RootCAs: pool, ServerName: host})
		if err != nil {
			t.Errorf("TLS to %s with the generated CA: %v", host, err)
			continue
		}
		_ = conn.Close()
	}
	if _, err := tls.Dial("tcp", lis.Addr().String(), &tls.Config{RootCAs: pool, ServerName: "elsewhere.example"}); err == nil {
		t.Error("certificate verified for a host it was not issued for")
	}
}

func TestGenerateNeedsHosts(t *testing.T) {
	if _, err := Generate(t.TempDir(), nil, time.Hour); err == nil {
		t.Fatal("Generate without hosts succeeded")
	}
}
