package app

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/pkg/mtls"
	"github.com/sluice-dev/sluice/services/grouper/internal/shard"
)

func TestValidate(t *testing.T) {
	valid := func() Config {
		return Config{AdmitterAddr: "127.0.0.1:9090", Workers: 1, CallTimeout: time.Second, Shard: shard.Shard{Count: 1}}
	}
	tests := []struct {
		name    string
		edit    func(*Config)
		wantErr string
	}{
		{name: "plaintext to loopback", edit: func(*Config) {}},
		{name: "plaintext to dns loopback", edit: func(c *Config) { c.AdmitterAddr = "dns:///localhost:9090" }},
		{name: "plaintext to a remote admitter", edit: func(c *Config) { c.AdmitterAddr = "dns:///sluice-admitter.sluice-system.svc:9090" },
			wantErr: "--admitter-addr dns:///sluice-admitter.sluice-system.svc:9090 is not a loopback target"},
		{name: "TLS with a file missing", edit: func(c *Config) {
			c.AdmitterAddr = "dns:///sluice-admitter.sluice-system.svc:9090"
			c.TLS = &mtls.Files{CertFile: "tls.crt", KeyFile: "tls.key"}
		}, wantErr: "--tls-ca-file is required"},
		{name: "no workers", edit: func(c *Config) { c.Workers = 0 }, wantErr: "--workers 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid()
			tt.edit(&c)
			err := c.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate: %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}
