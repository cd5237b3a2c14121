package kube

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Client-side rate limits. controller-runtime and client-go default to 20
// QPS with a burst of 30 (client-go: 5/10), which caps a service at a few
// dozen writes a second. sluice aims at 150-250 pods a second from creation
// to ungated, each costing several writes (Workload create and status,
// pod patch), so the client limiter would become the bottleneck long
// before the API server does. Overload protection belongs to the API
// server's Priority and Fairness level for sluice's ServiceAccounts.
const (
	DefaultQPS   = 1000
	DefaultBurst = 2000
)

const kubeconfigFlag = "kubeconfig"

// ClientFlags are the Kubernetes client settings on the command line.
type ClientFlags struct {
	// QPS and Burst are the client-side rate limit for API requests.
	QPS   float64
	Burst int

	kubeconfig flag.Value
}

// BindClientFlags registers --kubeconfig, --kube-api-qps and
// --kube-api-burst on fs. If fs already defines --kubeconfig (importing
// controller-runtime registers one on flag.CommandLine), that flag is
// shared rather than defined twice.
func BindClientFlags(fs *flag.FlagSet) *ClientFlags {
	f := &ClientFlags{}
	if existing := fs.Lookup(kubeconfigFlag); existing != nil {
		f.kubeconfig = existing.Value
	} else {
		var path stringValue
		fs.Var(&path, kubeconfigFlag, "path to a kubeconfig; empty means $KUBECONFIG, else in-cluster, else ~/.kube/config")
		f.kubeconfig = &path
	}
	fs.Float64Var(&f.QPS, "kube-api-qps", DefaultQPS, "Kubernetes API client queries per second")
	fs.IntVar(&f.Burst, "kube-api-burst", DefaultBurst, "Kubernetes API client burst")
	return f
}

// Kubeconfig returns the --kubeconfig value.
func (f *ClientFlags) Kubeconfig() string {
	return f.kubeconfig.String()
}

// RESTConfig loads the client configuration the flags describe.
func (f *ClientFlags) RESTConfig(userAgent string) (*rest.Config, error) {
	cfg, err := RESTConfig(f.Kubeconfig(), float32(f.QPS), f.Burst, userAgent)
	if err != nil {
		return nil, fmt.Errorf("kube client flags: %w", err)
	}
	return cfg, nil
}

// RESTConfig loads a client configuration and applies the rate limit and
// user agent (e.g. "sluice-grouper/v0.1.0"; the API server also derives
// the default field manager from it). The configuration comes from the
// first of: the kubeconfig file named by kubeconfig, the files in
// $KUBECONFIG, the in-cluster ServiceAccount, ~/.kube/config.
func RESTConfig(kubeconfig string, qps float32, burst int, userAgent string) (*rest.Config, error) {
	if qps <= 0 {
		return nil, fmt.Errorf("kube API QPS %v is not valid: must be > 0", qps)
	}
	if burst < 1 {
		return nil, fmt.Errorf("kube API burst %d is not valid: must be >= 1", burst)
	}
	cfg, err := load(kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.QPS = qps
	cfg.Burst = burst
	if userAgent != "" {
		cfg.UserAgent = userAgent
	}
	return cfg, nil
}

func load(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("load kubeconfig %q: %w", kubeconfig, err)
		}
		return cfg, nil
	}
	if env := os.Getenv(clientcmd.RecommendedConfigPathEnvVar); env != "" {
		cfg, err := loadDefaultRules()
		if err != nil {
			return nil, fmt.Errorf("load kubeconfig from $%s=%q: %w", clientcmd.RecommendedConfigPathEnvVar, env, err)
		}
		return cfg, nil
	}
	cfg, err := rest.InClusterConfig()
	if err == nil {
		return cfg, nil
	}
	if !errors.Is(err, rest.ErrNotInCluster) {
		return nil, fmt.Errorf("load in-cluster config: %w", err)
	}
	cfg, err = loadDefaultRules()
	if err != nil {
		return nil, fmt.Errorf("no Kubernetes client config: not in a cluster, no --kubeconfig, no $%s, and %s: %w",
			clientcmd.RecommendedConfigPathEnvVar, clientcmd.RecommendedHomeFile, err)
	}
	return cfg, nil
}

// loadDefaultRules reads $KUBECONFIG (a path list) or else ~/.kube/config,
// the same way kubectl does.
func loadDefaultRules() (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
}

// stringValue is a flag.Value holding a string.
type stringValue string

func (s *stringValue) String() string     { return string(*s) }
func (s *stringValue) Set(v string) error { *s = stringValue(v); return nil }
