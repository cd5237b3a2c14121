package kube

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sluice-dev/sluice/test/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(testenv.RunMain(m, testenv.Options{}, func(e *testenv.Env) error { env = e; return nil }))
}

// TestRESTConfigReachesAPIServer loads the control plane's kubeconfig the
// way a service does and writes through it: the server address, its CA and
// the client credentials all come through.
func TestRESTConfigReachesAPIServer(t *testing.T) {
	tests := []struct {
		name       string
		kubeconfig string // empty: found through $KUBECONFIG
	}{
		{name: "from --kubeconfig", kubeconfig: env.Kubeconfig},
		{name: "from $KUBECONFIG"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("KUBECONFIG", env.Kubeconfig)
			cfg, err := RESTConfig(tt.kubeconfig, DefaultQPS, DefaultBurst, "sluice-test/v0")
			if err != nil {
				t.Fatalf("RESTConfig: %v", err)
			}
			cs, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-config-test-" + string(rune('a'+i)), Namespace: "default"}}
			if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
				t.Fatalf("create ConfigMap: %v", err)
			}
			v, err := cs.Discovery().ServerVersion()
			if err != nil {
				t.Fatalf("server version: %v", err)
			}
			if !strings.HasPrefix(v.GitVersion, "v1.36.") {
				t.Errorf("server version %q, want the local v1.36 control plane", v.GitVersion)
			}
		})
	}
}
