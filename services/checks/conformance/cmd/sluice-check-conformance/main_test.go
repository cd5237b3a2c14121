package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/devca"
	"github.com/sluice-dev/sluice/pkg/mtls"
	"github.com/sluice-dev/sluice/services/checks/providers/nodepool"
	"github.com/sluice-dev/sluice/services/checks/sdk"
	"github.com/sluice-dev/sluice/services/checks/sdk/sdktest"
)

func startNodepool(t *testing.T, opts ...sdk.Option) string {
	return sdktest.Start(t, nodepool.Info("test"), nodepool.Checker{}, opts...)
}

// writeFile writes content to name in a fresh directory and returns its
// path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestRun(t *testing.T) {
	target := startNodepool(t)
	pool := []string{"--target", target, "--check-name", "pool", "--parameters", `{"nodeLabels": {"pool": "a100"}}`, "--timeout", "5s"}
	good := writeFile(t, "good.json", `{"fixtures": [
	  {"name": "a100", "expect": {"state": "STATE_READY", "reason": "NodePoolAssigned",
	   "podSetUpdates": [{"name": "main", "labels": {"nodepool.sluice.dev/pool": "a100"}, "nodeSelector": {"pool": "a100"}}]}},
	  {"name": "no-node-labels", "parameters": {}, "expect": {"code": "INVALID_ARGUMENT"}}]}`)
	wrong := writeFile(t, "wrong.json", `{"fixtures": [
	  {"name": "v100", "expect": {"state": "STATE_READY", "podSetUpdates": [{"name": "main", "labels": {"nodepool.sluice.dev/pool": "a100"}, "nodeSelector": {"pool": "v100"}}]}}]}`)
	malformed := writeFile(t, "malformed.json", `{"fixtures": [{"name": "a100", "expect": {"state": "READY"}}]}`)

	// A provider serving mutual TLS, a client of its CA and a CA that signs neither.
	ca, other := newCA(t), newCA(t)
	server, client, stranger := issue(t, ca, "provider.example"), issue(t, ca, ""), issue(t, other, "")
	mtlsTarget := startNodepool(t, sdk.WithTLS(mtls.Files{CertFile: server.cert(), KeyFile: server.key(), CAFile: server.ca()}))
	mtlsPool := []string{"--target", mtlsTarget, "--check-name", "pool", "--parameters", `{"nodeLabels": {"pool": "a100"}}`, "--timeout", "5s"}
	clientCert := []string{"--cert-file", client.cert(), "--key-file", client.key()}
	missing := filepath.Join(t.TempDir(), "none.crt")
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  []string
		wantErr  string
	}{
		{
			name:     "conformant",
			args:     append(pool[:len(pool):len(pool)], "--fixtures", good, "--keepalive-soak", "1s"),
			wantCode: 0,
			wantOut: []string{
				"PASS  Identity/GetProviderInfo", "PASS  Evaluate/AdmittedFirst", "PASS  Evaluate/Repeatable", "PASS  Evaluate/TwoChecksOneProvider",
				"PASS  Evaluate/DuplicatePodSet", "PASS  Release/MissingEvaluationKey", "PASS  Release/Twice",
				"SKIP  Release/ThenNewReservation: provider does not advertise CAPABILITY_RELEASE",
				"SKIP  WatchChanges/Open: provider does not advertise CAPABILITY_WATCH_CHANGES",
				"PASS  Fixture/a100", "PASS  Fixture/no-node-labels", "PASS  Keepalive/Soak",
				"22 passed, 0 failed, 3 skipped",
			},
		},
		{
			name:     "soak off",
			args:     pool,
			wantCode: 0,
			wantOut:  []string{"SKIP  Keepalive/Soak: the keepalive soak is off; --keepalive-soak 100s", "19 passed, 0 failed, 4 skipped"},
		},
		{
			name:     "fixture not met",
			args:     append(pool[:len(pool):len(pool)], "--fixtures", wrong),
			wantCode: 1,
			wantOut:  []string{"FAIL  Fixture/v100", `pod_set_updates["main"].node_selector["pool"]: want "v100", got "a100"`, "1 failed"},
		},
		{
			name:     "missing parameters fail",
			args:     []string{"--target", target},
			wantCode: 1,
			wantOut:  []string{"FAIL  Evaluate/ValidAnswer", "parameters.nodeLabels: required", "failed"},
		},
		{name: "no target", args: nil, wantCode: 2, wantErr: "--target is required"},
		{name: "bad parameters", args: []string{"--target", target, "--parameters", "[1]"}, wantCode: 2, wantErr: "--parameters must be a JSON object"},
		{name: "unknown flag", args: []string{"--nope"}, wantCode: 2, wantErr: "flag provided but not defined"},
		{name: "stray argument", args: []string{"--target", target, "fixtures.json"}, wantCode: 2, wantErr: `unexpected arguments ["fixtures.json"]`},
		{name: "malformed fixtures", args: []string{"--target", target, "--fixtures", malformed}, wantCode: 2,
			wantErr: `--fixtures: ` + malformed + `: fixtures[0] ("a100"): expect.state: "READY" is not an answer`},
		{name: "missing fixtures file", args: []string{"--target", target, "--fixtures", filepath.Join(t.TempDir(), "none.json")}, wantCode: 2, wantErr: "--fixtures: read fixtures"},
		{name: "trigger command not found", args: []string{"--target", target, "--trigger-change-command", "no-such-command-c11 --now"}, wantCode: 2,
			wantErr: `--trigger-change-command: exec: "no-such-command-c11"`},
		{name: "negative soak", args: []string{"--target", target, "--keepalive-soak", "-1s"}, wantCode: 2, wantErr: "--keepalive-soak must not be negative"},
		{
			name:     "mutual TLS",
			args:     slices.Concat(mtlsPool, []string{"--ca-file", client.ca(), "--keepalive-soak", "1s"}, clientCert),
			wantCode: 0,
			wantOut:  []string{"conformance: " + mtlsTarget + " (mutual TLS)", "PASS  Evaluate/PodSetUpdates", "PASS  Keepalive/Soak", "20 passed, 0 failed, 3 skipped"},
		},
		{
			name:     "mutual TLS with a server name",
			args:     slices.Concat(mtlsPool, []string{"--ca-file", client.ca(), "--server-name", "provider.example"}, clientCert),
			wantCode: 0,
			wantOut:  []string{"19 passed, 0 failed, 4 skipped"},
		},
		{
			name:     "wrong CA",
			args:     slices.Concat(mtlsPool, []string{"--ca-file", stranger.ca()}, clientCert),
			wantCode: 1,
			wantOut: []string{"FAIL  Connect", "certificate signed by unknown authority",
				"the provider's certificate does not chain to the CA the kit trusts (--ca-file)", "0 passed, 1 failed, 0 skipped"},
		},
		{
			name:     "no client certificate",
			args:     slices.Concat(mtlsPool, []string{"--ca-file", client.ca()}),
			wantCode: 1,
			wantOut:  []string{"FAIL  Connect", "--cert-file and --key-file", "0 passed, 1 failed, 0 skipped"},
		},
		{
			name:     "server name the certificate lacks",
			args:     slices.Concat(mtlsPool, []string{"--ca-file", client.ca(), "--server-name", "other.example"}, clientCert),
			wantCode: 1,
			wantOut:  []string{"FAIL  Connect", "not other.example", "--server-name sets the name to expect"},
		},
		{
			name:     "plaintext to mutual TLS",
			args:     mtlsPool,
			wantCode: 1,
			wantOut:  []string{"FAIL  Connect", "if it serves TLS, give the kit the CA that signs its certificate (--ca-file)"},
		},
		{name: "client certificate without CA", args: slices.Concat(mtlsPool, clientCert), wantCode: 2, wantErr: "--ca-file is required for TLS"},
		{name: "server name without CA", args: append(mtlsPool[:len(mtlsPool):len(mtlsPool)], "--server-name", "provider.example"), wantCode: 2,
			wantErr: "--ca-file is required for TLS"},
		{name: "key without certificate", args: append(mtlsPool[:len(mtlsPool):len(mtlsPool)], "--ca-file", client.ca(), "--key-file", client.key()), wantCode: 2,
			wantErr: "--cert-file and --key-file go together"},
		{name: "unreadable CA", args: append(mtlsPool[:len(mtlsPool):len(mtlsPool)], "--ca-file", missing), wantCode: 2, wantErr: "--ca-file: open " + missing},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(t.Context(), tt.args, &stdout, &stderr)
			if code != tt.wantCode {
				t.Fatalf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.wantCode, &stdout, &stderr)
			}
			for _, w := range tt.wantOut {
				if !strings.Contains(stdout.String(), w) {
					t.Errorf("stdout does not contain %q:\n%s", w, &stdout)
				}
			}
			if tt.wantErr != "" && !strings.Contains(stderr.String(), tt.wantErr) {
				t.Errorf("stderr does not contain %q:\n%s", tt.wantErr, &stderr)
			}
			if tt.wantCode == 2 && stdout.Len() > 0 {
				t.Errorf("exit 2 after running cases:\n%s", &stdout)
			}
		})
	}
}

// identity is a directory holding tls.crt, tls.key and ca.crt.
type identity string

func (d identity) cert() string { return filepath.Join(string(d), devca.CertFile) }
func (d identity) key() string  { return filepath.Join(string(d), devca.KeyFile) }
func (d identity) ca() string   { return filepath.Join(string(d), devca.CAFile) }

func newCA(t *testing.T) *devca.CA {
	t.Helper()
	ca, err := devca.New("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// issue writes a certificate of ca for the loopback names and dnsName
// (if any), with ca's bundle, to a fresh directory.
func issue(t *testing.T, ca *devca.CA, dnsName string) identity {
	t.Helper()
	names := devca.LoopbackNames
	if dnsName != "" {
		names = append([]string{dnsName}, names...)
	}
	leaf, err := ca.Issue(devca.Request{DNSNames: names, IPs: devca.LoopbackIPs(), Life: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := devca.WriteIdentity(dir, leaf, ca.CertPEM); err != nil {
		t.Fatal(err)
	}
	return identity(dir)
}
