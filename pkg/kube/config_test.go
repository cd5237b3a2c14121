package kube

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeKubeconfig writes a minimal kubeconfig for server into dir.
func writeKubeconfig(t *testing.T, dir, name, server string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	content := `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: ` + server + `
users:
- name: u
  user:
    token: secret
contexts:
- name: ctx
  context: {cluster: c, user: u}
current-context: ctx
`
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestRESTConfigSources(t *testing.T) {
	dir := t.TempDir()
	flagFile := writeKubeconfig(t, dir, "flag", "https://from-flag:6443")
	envFile := writeKubeconfig(t, dir, "env", "https://from-env:6443")
	missing := filepath.Join(dir, "missing")

	tests := []struct {
		name       string
		kubeconfig string
		env        map[string]string
		wantHost   string
		wantErr    string
	}{
		{name: "flag wins over KUBECONFIG", kubeconfig: flagFile, env: map[string]string{"KUBECONFIG": envFile}, wantHost: "https://from-flag:6443"},
		{name: "KUBECONFIG when no flag", env: map[string]string{"KUBECONFIG": envFile}, wantHost: "https://from-env:6443"},
		{name: "KUBECONFIG path list skips missing files", env: map[string]string{"KUBECONFIG": missing + string(os.PathListSeparator) + envFile}, wantHost: "https://from-env:6443"},
		{name: "KUBECONFIG wins over in-cluster", env: map[string]string{"KUBECONFIG": envFile, "KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}, wantHost: "https://from-env:6443"},
		{name: "missing flag file", kubeconfig: missing, wantErr: `load kubeconfig "` + missing + `"`},
		{name: "KUBECONFIG naming only missing files", env: map[string]string{"KUBECONFIG": missing}, wantErr: "$KUBECONFIG=" + `"` + missing + `"`},
		{name: "in cluster without a token", env: map[string]string{"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}, wantErr: "load in-cluster config"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range []string{"KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"} {
				t.Setenv(k, tt.env[k])
			}
			cfg, err := RESTConfig(tt.kubeconfig, 200, 400, "sluice-test/v0")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("RESTConfig: %v", err)
			}
			if cfg.Host != tt.wantHost {
				t.Errorf("Host = %q, want %q", cfg.Host, tt.wantHost)
			}
		})
	}
}

func TestRESTConfigClientSettings(t *testing.T) {
	file := writeKubeconfig(t, t.TempDir(), "kc", "https://api:6443")
	tests := []struct {
		name      string
		qps       float32
		burst     int
		userAgent string
		wantErr   string
	}{
		{name: "applied", qps: 200, burst: 400, userAgent: "sluice-admitter/v1"},
		{name: "zero qps", qps: 0, burst: 400, wantErr: "kube API QPS 0 is not valid: must be > 0"},
		{name: "negative qps", qps: -1, burst: 400, wantErr: "kube API QPS -1 is not valid"},
		{name: "zero burst", qps: 10, burst: 0, wantErr: "kube API burst 0 is not valid: must be >= 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := RESTConfig(file, tt.qps, tt.burst, tt.userAgent)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.QPS != tt.qps || cfg.Burst != tt.burst || cfg.UserAgent != tt.userAgent {
				t.Errorf("QPS=%v Burst=%d UserAgent=%q, want %v %d %q", cfg.QPS, cfg.Burst, cfg.UserAgent, tt.qps, tt.burst, tt.userAgent)
			}
			if cfg.BearerToken != "secret" {
				t.Errorf("credentials from the kubeconfig were lost: token %q", cfg.BearerToken)
			}
		})
	}
}

func TestBindClientFlags(t *testing.T) {
	file := writeKubeconfig(t, t.TempDir(), "kc", "https://api:6443")
	tests := []struct {
		name           string
		preregistered  bool // --kubeconfig already defined, as controller-runtime does on flag.CommandLine
		args           []string
		wantKubeconfig string
		wantQPS        float64
		wantBurst      int
	}{
		{name: "defaults", wantQPS: DefaultQPS, wantBurst: DefaultBurst},
		{name: "overrides", args: []string{"--kubeconfig=" + file, "--kube-api-qps=50", "--kube-api-burst=75"},
			wantKubeconfig: file, wantQPS: 50, wantBurst: 75},
		{name: "shares an existing --kubeconfig", preregistered: true, args: []string{"--kubeconfig=" + file},
			wantKubeconfig: file, wantQPS: DefaultQPS, wantBurst: DefaultBurst},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			if tt.preregistered {
				fs.String("kubeconfig", "", "defined elsewhere")
			}
			f := BindClientFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			if f.Kubeconfig() != tt.wantKubeconfig || f.QPS != tt.wantQPS || f.Burst != tt.wantBurst {
				t.Errorf("kubeconfig=%q qps=%v burst=%d, want %q %v %d",
					f.Kubeconfig(), f.QPS, f.Burst, tt.wantKubeconfig, tt.wantQPS, tt.wantBurst)
			}
			if tt.wantKubeconfig == "" {
				return
			}
			cfg, err := f.RESTConfig("sluice-test")
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Host != "https://api:6443" || cfg.QPS != float32(tt.wantQPS) || cfg.Burst != tt.wantBurst {
				t.Errorf("RESTConfig Host=%q QPS=%v Burst=%d", cfg.Host, cfg.QPS, cfg.Burst)
			}
		})
	}
}
