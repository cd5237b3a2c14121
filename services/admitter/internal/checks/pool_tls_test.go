package checks

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	"github.com/sluice-dev/sluice/internal/devca"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/test/fakecheck"
)

// startTLSFake starts a fake provider serving TLS with a certificate from
// pki's CA; with clientCAs it requires client certificates they sign.
func startTLSFake(t *testing.T, pki testPKI, clientCAs []byte) *fakecheck.Provider {
	t.Helper()
	cfg, err := fakecheck.LoopbackTLS(pki.ca, clientCAs)
	if err != nil {
		t.Fatal(err)
	}
	return fakecheck.StartT(t, fakecheck.WithTLS(cfg))
}

// TestPoolTLS calls providers over TLS with real handshakes: each call
// succeeds when the material fits the provider, and otherwise fails with
// the TLS reason and the handshake's own error, which the Active condition
// and the check state then carry.
func TestPoolTLS(t *testing.T) {
	provider, admitter, stranger := newTestPKI(t, "provider CA"), newTestPKI(t, "admitter CA"), newTestPKI(t, "stranger CA")
	mutual := startTLSFake(t, provider, admitter.ca.CertPEM)
	serverOnly := startTLSFake(t, provider, nil)
	plain := fakecheck.StartT(t)
	down := startTLSFake(t, provider, nil)
	down.Down()

	secrets := newSecretStore(
		secret(testNamespace, "provider-ca", map[string][]byte{"bundle.pem": provider.ca.CertPEM}),
		tlsSecret("admitter-client", admitter.client),
		tlsSecret("stranger-client", stranger.client),
	)
	caRef := &v1alpha1.SecretKeyReference{Name: "provider-ca", Key: "bundle.pem"}
	// Under TLS 1.3 a provider refuses a client certificate after the
	// handshake, with an alert that may lose the race with the reset.
	refusedClientCertificate := []string{"remote error: tls: certificate required", "the provider hung up as soon as the handshake ended"}
	tests := []struct {
		name     string
		target   string
		tls      v1alpha1.ProviderTLS
		policy   v1alpha1.FailurePolicy
		wantCode codes.Code // of the call; OK: it succeeds
		// wantReason is the Active condition's reason, and the check
		// state's for Evaluate; their messages hold one of wantMsg.
		wantReason string
		wantMsg    []string
	}{
		{name: "mutual TLS from Secrets", target: mutual.Target(),
			tls: v1alpha1.ProviderTLS{CASecretRef: caRef, ClientCertificateSecretRef: &v1alpha1.SecretReference{Name: "admitter-client"}}},
		{name: "server TLS with an inline CA and the server name localhost", target: "dns:///" + serverOnly.Target(),
			tls: v1alpha1.ProviderTLS{CABundle: string(provider.ca.CertPEM), ServerName: "localhost"}},
		{name: "a certificate from another CA", target: serverOnly.Target(), policy: v1alpha1.IgnoreFailure,
			tls:      v1alpha1.ProviderTLS{CABundle: string(stranger.ca.CertPEM)},
			wantCode: codes.Unavailable, wantReason: v1alpha1.ReasonTLSHandshakeFailed,
			wantMsg: []string{"TLS handshake with the provider failed: tls: failed to verify certificate: x509: certificate signed by unknown authority"}},
		{name: "a certificate for another name", target: serverOnly.Target(),
			tls:      v1alpha1.ProviderTLS{CASecretRef: caRef, ServerName: "checks.example"},
			wantCode: codes.Unavailable, wantReason: v1alpha1.ReasonTLSHandshakeFailed,
			wantMsg: []string{"x509: certificate is valid for localhost, not checks.example"}},
		{name: "no client certificate for a provider that requires one", target: mutual.Target(), policy: v1alpha1.IgnoreFailure,
			tls:      v1alpha1.ProviderTLS{CASecretRef: caRef},
			wantCode: codes.Unavailable, wantReason: v1alpha1.ReasonTLSHandshakeFailed, wantMsg: refusedClientCertificate},
		{name: "a client certificate the provider does not trust", target: mutual.Target(),
			tls:      v1alpha1.ProviderTLS{CASecretRef: caRef, ClientCertificateSecretRef: &v1alpha1.SecretReference{Name: "stranger-client"}},
			wantCode: codes.Unavailable, wantReason: v1alpha1.ReasonTLSHandshakeFailed, wantMsg: refusedClientCertificate},
		{name: "TLS to a plaintext provider", target: plain.Target(),
			tls:      v1alpha1.ProviderTLS{CASecretRef: caRef},
			wantCode: codes.Unavailable, wantReason: v1alpha1.ReasonTLSHandshakeFailed, wantMsg: []string{"does not look like a TLS handshake"}},
		{name: "a missing Secret", target: serverOnly.Target(), policy: v1alpha1.IgnoreFailure,
			tls:      v1alpha1.ProviderTLS{CASecretRef: &v1alpha1.SecretKeyReference{Name: "nowhere", Key: "ca.crt"}},
			wantCode: codes.Unavailable, wantReason: v1alpha1.ReasonTLSConfigInvalid, wantMsg: []string{"Secret sluice-system/nowhere not found"}},
		// A provider that is down is unreachable, not a TLS failure, and
		// Ignore covers it.
		{name: "a TLS provider that is down", target: down.Target(), policy: v1alpha1.IgnoreFailure,
			tls:      v1alpha1.ProviderTLS{CASecretRef: caRef},
			wantCode: codes.Unavailable, wantReason: "ProviderUnreachable", wantMsg: []string{"connection refused"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newTestPool(t, WithSecrets(secrets, testNamespace))
			ac := tlsCheck(tc.target, tc.tls)
			ac.Spec.FailurePolicy = tc.policy

			info, probe, err := p.Describe(testCtx(t), ac)
			if code := status.Code(err); code != tc.wantCode {
				t.Fatalf("Describe: code %s (%v), want %s", code, err, tc.wantCode)
			}
			active, reason, msg := Activity(info, probe, err)
			if wantActive := tc.wantCode == codes.OK; active != wantActive || (!active && reason != tc.wantReason) || !containsAny(msg, tc.wantMsg) {
				t.Fatalf("Activity = %v %s %q, want %v %s with %q", active, reason, msg, wantActive, tc.wantReason, tc.wantMsg)
			}

			req := request()
			resp, err := p.Evaluate(testCtx(t), ac, req)
			if code := status.Code(err); code != tc.wantCode {
				t.Fatalf("Evaluate: code %s (%v), want %s", code, err, tc.wantCode)
			}
			if tc.wantCode == codes.OK {
				return
			}
			ans := Read(ac, req, resp, err)
			_, isTLS := AsTLSError(err)
			switch {
			case isTLS && (ans.State != v1alpha1.CheckStatePending || ans.Reason != tc.wantReason):
				t.Errorf("check state %s %s, want Pending %s whatever the failure policy", ans.State, ans.Reason, tc.wantReason)
			case !isTLS && tc.policy == v1alpha1.IgnoreFailure && ans.State != v1alpha1.CheckStateReady:
				t.Errorf("check state %s %s, want Ready: Ignore covers an unreachable provider", ans.State, ans.Reason)
			case !containsAny(ans.Message, tc.wantMsg):
				t.Errorf("check message %q, want it to contain %q", ans.Message, tc.wantMsg)
			}
		})
	}
}

// containsAny reports whether s contains one of parts; no parts: true.
func containsAny(s string, parts []string) bool {
	if len(parts) == 0 {
		return true
	}
	for _, p := range parts {
		if strings.Contains(s, p) {
			return true
		}
	}
	return false
}

// pooledFingerprints are the fingerprints of the pool's connections to
// endpoint.
func pooledFingerprints(p *Pool, endpoint string) map[string]*poolConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]*poolConn{}
	for key, pc := range p.conns {
		if key.endpoint == endpoint {
			out[key.fingerprint] = pc
		}
	}
	return out
}

// TestPoolTLSSecretChange checks that a changed Secret takes effect with
// the next call, on a connection of its own: a CA Secret fixed after a
// failed handshake, then a rotated client certificate. The connections
// made with the old material go idle and are closed.
func TestPoolTLSSecretChange(t *testing.T) {
	provider, admitter, stranger := newTestPKI(t, "provider CA"), newTestPKI(t, "admitter CA"), newTestPKI(t, "stranger CA")
	fake := startTLSFake(t, provider, admitter.ca.CertPEM)
	secrets := newSecretStore(
		secret(testNamespace, "ca", map[string][]byte{"ca.crt": stranger.ca.CertPEM}), // the wrong CA
		tlsSecret("client", admitter.client),
	)
	// Idleness is judged by the fake clock, which moves only when told.
	p := newTestPool(t, WithSecrets(secrets, testNamespace), WithIdleTimeout(testIdleTimeout))
	clock := newFakeClock()
	p.now = clock.Now
	ac := tlsCheck(fake.Target(), v1alpha1.ProviderTLS{
		CASecretRef:                &v1alpha1.SecretKeyReference{Name: "ca"},
		ClientCertificateSecretRef: &v1alpha1.SecretReference{Name: "client"},
	})

	_, err := p.Evaluate(testCtx(t), ac, request())
	if tlsErr, ok := AsTLSError(err); !ok || tlsErr.Reason != v1alpha1.ReasonTLSHandshakeFailed {
		t.Fatalf("Evaluate with the wrong CA: %v, want a %s TLSError", err, v1alpha1.ReasonTLSHandshakeFailed)
	}
	wrongCA := pooledFingerprints(p, fake.Target())
	if len(wrongCA) != 1 {
		t.Fatalf("%d connections after the first call, want 1", len(wrongCA))
	}

	secrets.put(secret(testNamespace, "ca", map[string][]byte{"ca.crt": provider.ca.CertPEM}))
	if _, err := p.Evaluate(testCtx(t), ac, request()); err != nil {
		t.Fatalf("Evaluate once the CA Secret is fixed: %v", err)
	}
	fixed := pooledFingerprints(p, fake.Target())
	if len(fixed) != 2 {
		t.Fatalf("%d connections after the CA Secret changed, want 2: the old one and one with the new CA", len(fixed))
	}

	rotated, err := admitter.ca.Issue(devca.Request{CommonName: "sluice-admitter", Life: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	secrets.put(tlsSecret("client", rotated))
	clock.Advance(time.Hour) // every connection so far is idle
	if _, err := p.Evaluate(testCtx(t), ac, request()); err != nil {
		t.Fatalf("Evaluate with the rotated client certificate: %v", err)
	}
	if n := fake.EvaluateCount("ns", "w"); n != 2 {
		t.Fatalf("the provider answered %d calls, want 2: the wrong CA's never reached it", n)
	}

	waitSweeps(t, p, 2)
	kept := pooledFingerprints(p, fake.Target())
	if len(kept) != 1 {
		t.Fatalf("%d connections after the sweep, want only the rotated certificate's", len(kept))
	}
	for fp, pc := range kept {
		if _, old := fixed[fp]; old {
			t.Fatalf("the sweep kept connection %s of the old material, want the rotated certificate's", fp)
		}
		if pc.conn.GetState() == connectivity.Shutdown {
			t.Fatal("the connection in use was closed")
		}
	}
	for fp, pc := range fixed {
		if pc.conn.GetState() != connectivity.Shutdown {
			t.Errorf("idle connection %s of old material is %s, want closed", fp, pc.conn.GetState())
		}
	}
}
