#!/usr/bin/env bash
# Starts sluice's local control plane on loopback: etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler and kwok with SLUICE_NODES fake
# nodes. State lives in .local/ (kubeconfig, logs/, pids/, etcd/). Running it
# again while the cluster is up only says so. See docs/local-cluster.md.
#
# The flags of every component are defined once, in the Go package
# test/testenv, which the tests use too; this script builds the binaries and
# runs that package's command.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"

"${root}/hack/build-cluster.sh"

state="${SLUICE_STATE_DIR:-${root}/.local}"
mkdir -p "${state}/bin"
# Built rather than `go run` so its exit status reaches this script.
go build -o "${state}/bin/localcluster" ./test/testenv/cmd/localcluster
up() { "${state}/bin/localcluster" up; }

rc=0
up || rc=$?
if [[ ${rc} -eq 3 ]]; then
	echo "cluster-up: the control plane is only partly running; restarting it" >&2
	"${root}/hack/cluster-down.sh"
	rc=0
	up || rc=$?
fi
exit "${rc}"
