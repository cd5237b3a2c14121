# Pinned versions of the local control plane. hack/kube/go.mod and
# hack/etcd/go.mod must name the same Kubernetes and etcd releases.
KUBE_VERSION=v1.36.3
ETCD_VERSION=v3.6.8
KWOK_VERSION=v0.8.0
