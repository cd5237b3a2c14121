#!/usr/bin/env bash
# Builds the local control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, kwok) from the Go module in hack/cluster, in one
# `go build`: the packages they share compile once and the six binaries link
# side by side. Binaries are cached outside the clone, keyed by the versions
# and the module's go.sum, so every clone on a machine shares one build; bin/
# in the clone links to that cache.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "${root}/hack/versions.sh"
module="${root}/hack/cluster"
binaries=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok)

# go.mod decides what is built; versions.sh names it for people and for the
# version stamp. They must agree.
for pin in "k8s.io/kubernetes ${KUBE_VERSION}" "go.etcd.io/etcd/server/v3 ${ETCD_VERSION}" "sigs.k8s.io/kwok ${KWOK_VERSION}"; do
	if ! grep -qE "^\s*(require )?${pin}( |$)" "${module}/go.mod"; then
		echo "hack/cluster/go.mod does not require ${pin} (hack/versions.sh); make them agree" >&2
		exit 1
	fi
done

cache="${SLUICE_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME}/.cache}/sluice}"
sum="$(sha256sum "${module}/go.sum" | cut -c1-12)"
dest="${cache}/cluster-k8s${KUBE_VERSION}-etcd${ETCD_VERSION}-kwok${KWOK_VERSION}-${sum}"
mkdir -p "${dest}" "${root}/bin"

# One build at a time per cache: a second caller (another clone, a parallel
# cluster-up) waits, then finds the binaries built.
exec 9>"${dest}/.lock"
flock 9

missing=0
for b in "${binaries[@]}"; do
	[[ -x "${dest}/${b}" ]] || missing=1
done
if ((missing)); then
	echo "building ${binaries[*]} (first time only; cached in ${dest})" >&2
	minor="${KUBE_VERSION#v}"; minor="${minor#*.}"; minor="${minor%%.*}"
	ldflags="-s -w \
 -X k8s.io/component-base/version.gitVersion=${KUBE_VERSION} \
 -X k8s.io/component-base/version.gitMajor=1 \
 -X k8s.io/component-base/version.gitMinor=${minor} \
 -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/client-go/pkg/version.gitVersion=${KUBE_VERSION} \
 -X k8s.io/client-go/pkg/version.gitMajor=1 \
 -X k8s.io/client-go/pkg/version.gitMinor=${minor}"
	tmp="$(mktemp -d "${dest}/.build.XXXXXX")"
	trap 'rm -rf "${tmp}"' EXIT
	(cd "${module}" && CGO_ENABLED=0 go build -trimpath -ldflags "${ldflags}" -o "${tmp}/" \
		./etcd \
		k8s.io/kubernetes/cmd/kube-apiserver \
		k8s.io/kubernetes/cmd/kube-controller-manager \
		k8s.io/kubernetes/cmd/kube-scheduler \
		k8s.io/kubernetes/cmd/kubectl \
		sigs.k8s.io/kwok/cmd/kwok)
	for b in "${binaries[@]}"; do
		mv "${tmp}/${b}" "${dest}/${b}"
	done
fi

for b in "${binaries[@]}"; do
	ln -sfn "${dest}/${b}" "${root}/bin/${b}"
done
