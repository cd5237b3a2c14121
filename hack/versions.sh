# Pinned versions of the local control plane. hack/cluster/go.mod must name
# the same Kubernetes, etcd and kwok releases; hack/build-cluster.sh checks.
KUBE_VERSION=v1.36.3
ETCD_VERSION=v3.6.8
KWOK_VERSION=v0.8.0
