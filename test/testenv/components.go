package testenv

import (
	"fmt"
	"strconv"
	"strings"
)

// This file is the single definition of how each component is started;
// hack/cluster-up.sh runs it too, through cmd/localcluster.

const (
	loopback = "127.0.0.1"

	// FeatureGates are enabled on kube-apiserver, kube-scheduler and
	// kube-controller-manager: the scheduling.k8s.io Workload and PodGroup
	// API and gang scheduling.
	FeatureGates = "GenericWorkload=true,GangScheduling=true"
	// RuntimeConfig serves the scheduling.k8s.io/v1alpha2 API.
	RuntimeConfig = "scheduling.k8s.io/v1alpha2=true"

	serviceAccountIssuer = "https://kubernetes.default.svc.cluster.local"
	serviceClusterIPs    = "10.96.0.0/16"
)

// disabledControllers need a cloud provider or a kubelet, or would fight
// kwok: kwok keeps nodes Ready without heartbeats, so the node lifecycle
// controller would taint them unreachable and evict their pods.
var disabledControllers = []string{
	"node-lifecycle-controller",
	"taint-eviction-controller",
	"node-ipam-controller",
	"node-route-controller",
	"cloud-node-lifecycle-controller",
	"service-lb-controller",
	"persistentvolume-attach-detach-controller",
	"ttl-controller",
	"certificatesigningrequest-signing-controller",
	"certificatesigningrequest-approving-controller",
	"certificatesigningrequest-cleaner-controller",
}

// componentSpec is one process to run.
type componentSpec struct {
	name string
	bin  string
	args []string
	// healthURL is polled after start; empty for components whose
	// readiness is checked otherwise (etcd through the API server, kwok
	// through its nodes).
	healthURL string
}

// componentSpecs returns the components opts asks for, etcd and
// kube-apiserver first.
func componentSpecs(f layout, p Ports, o Options) []componentSpec {
	specs := []componentSpec{etcdSpec(f, p), apiServerSpec(f, p, o)}
	if o.ControllerManager {
		specs = append(specs, controllerManagerSpec(f, p))
	}
	if o.Scheduler {
		specs = append(specs, schedulerSpec(f, p))
	}
	if o.Kwok {
		specs = append(specs, kwokSpec(f))
	}
	return specs
}

func etcdSpec(f layout, p Ports) componentSpec {
	client := fmt.Sprintf("http://%s:%d", loopback, p.Etcd)
	peer := fmt.Sprintf("http://%s:%d", loopback, p.EtcdPeer)
	return componentSpec{
		name: "etcd",
		bin:  f.bins.etcd,
		args: []string{
			"--name=sluice",
			"--data-dir=" + f.etcdData,
			"--listen-client-urls=" + client,
			"--advertise-client-urls=" + client,
			"--listen-peer-urls=" + peer,
			"--initial-advertise-peer-urls=" + peer,
			"--initial-cluster=sluice=" + peer,
			// The state is disposable: trade crash safety for write speed.
			"--unsafe-no-fsync",
			// CPU profiles for the benchmarks, on the loopback client URL.
			"--enable-pprof",
			"--log-level=warn",
		},
	}
}

func apiServerSpec(f layout, p Ports, o Options) componentSpec {
	args := []string{
		fmt.Sprintf("--etcd-servers=http://%s:%d", loopback, p.Etcd),
		"--bind-address=" + loopback,
		"--advertise-address=" + loopback,
		"--secure-port=" + strconv.Itoa(p.APIServer),
		"--tls-cert-file=" + f.servingCert,
		"--tls-private-key-file=" + f.servingKey,
		"--client-ca-file=" + f.caCert,
		"--token-auth-file=" + f.tokenCSV,
		"--authorization-mode=Node,RBAC",
		"--service-account-issuer=" + serviceAccountIssuer,
		"--api-audiences=" + serviceAccountIssuer,
		"--service-account-key-file=" + f.saPub,
		"--service-account-signing-key-file=" + f.saKey,
		"--service-cluster-ip-range=" + serviceClusterIPs,
		"--feature-gates=" + FeatureGates,
		"--runtime-config=" + RuntimeConfig,
		// ServiceAccount: kwok pods run nothing, so a mounted token is
		// useless, and the plugin would reject pods in a new namespace
		// until the controller-manager has created its default
		// ServiceAccount. TaintNodesByCondition: it taints new nodes
		// not-ready, and only the node lifecycle controller, which kwok
		// nodes cannot live with, would remove the taint.
		"--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
		// The kubernetes Service cannot point at a loopback address, and no
		// pod needs it: kwok pods run nothing.
		"--endpoint-reconciler-type=none",
		"--allow-privileged=true",
		// Benchmarks read CPU profiles from /debug/pprof (admin only); it
		// costs nothing until asked for.
		"--profiling=true",
	}
	return componentSpec{name: "kube-apiserver", bin: f.bins.apiServer, args: args}
}

func controllerManagerSpec(f layout, p Ports) componentSpec {
	controllers := []string{"*"}
	for _, c := range disabledControllers {
		controllers = append(controllers, "-"+c)
	}
	return componentSpec{
		name: "kube-controller-manager",
		bin:  f.bins.controllerManager,
		args: append(delegatedServing(f, p.ControllerManager),
			"--kubeconfig="+f.kubeconfig,
			"--leader-elect=false",
			"--controllers="+strings.Join(controllers, ","),
			"--service-account-private-key-file="+f.saKey,
			"--root-ca-file="+f.caCert,
			"--use-service-account-credentials=false",
			"--kube-api-qps="+strconv.Itoa(ClientQPS),
			"--kube-api-burst="+strconv.Itoa(ClientBurst),
			"--feature-gates="+FeatureGates,
		),
		healthURL: fmt.Sprintf("https://%s:%d/healthz", loopback, p.ControllerManager),
	}
}

func schedulerSpec(f layout, p Ports) componentSpec {
	return componentSpec{
		name: "kube-scheduler",
		bin:  f.bins.scheduler,
		args: append(delegatedServing(f, p.Scheduler),
			"--config="+f.schedulerConfig,
			"--feature-gates="+FeatureGates,
		),
		healthURL: fmt.Sprintf("https://%s:%d/healthz", loopback, p.Scheduler),
	}
}

// delegatedServing are the flags of a component that serves /healthz and
// /metrics over TLS and asks the API server to authenticate its callers.
func delegatedServing(f layout, port int) []string {
	return []string{
		"--bind-address=" + loopback,
		"--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + f.servingCert,
		"--tls-private-key-file=" + f.servingKey,
		"--authentication-kubeconfig=" + f.kubeconfig,
		"--authorization-kubeconfig=" + f.kubeconfig,
		"--client-ca-file=" + f.caCert,
		// Callers authenticate with tokens (TokenReview); the front-proxy
		// settings the lookup would fetch do not exist here.
		"--authentication-skip-lookup",
	}
}

func kwokSpec(f layout) componentSpec {
	return componentSpec{
		name: "kwok",
		bin:  f.bins.kwok,
		args: []string{
			"--kubeconfig=" + f.kubeconfig,
			"--config=" + f.kwokConfig,
			"--config=" + f.kwokStages,
		},
	}
}

// schedulerConfig is kube-scheduler's configuration file: the default
// profile, no leader election, and a client as fast as Env.Config.
func schedulerConfig(f layout) string {
	return fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %q
  qps: %d
  burst: %d
leaderElection:
  leaderElect: false
`, f.kubeconfig, ClientQPS, ClientBurst)
}
