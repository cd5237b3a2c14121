#!/usr/bin/env bash
# Builds the local control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, kwok) from their Go modules. Binaries are cached
# outside the clone, keyed by version, so every clone on a machine shares one
# build; bin/ in the clone links to that cache.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "${root}/hack/versions.sh"

cache="${SLUICE_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME}/.cache}/sluice}"
dest="${cache}/cluster-k8s${KUBE_VERSION}-etcd${ETCD_VERSION}-kwok${KWOK_VERSION}"
mkdir -p "${dest}" "${root}/bin"

# One build at a time per cache: a second caller (another clone, a parallel
# cluster-up) waits, then finds the binaries built.
exec 9>"${dest}/.lock"
flock 9

minor="${KUBE_VERSION#v}"; minor="${minor#*.}"; minor="${minor%%.*}"
ldflags="-s -w \
 -X k8s.io/component-base/version.gitVersion=${KUBE_VERSION} \
 -X k8s.io/component-base/version.gitMajor=1 \
 -X k8s.io/component-base/version.gitMinor=${minor} \
 -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/client-go/pkg/version.gitVersion=${KUBE_VERSION} \
 -X k8s.io/client-go/pkg/version.gitMajor=1 \
 -X k8s.io/client-go/pkg/version.gitMinor=${minor}"

build() { # name dir package
	local name="$1" dir="$2" pkg="$3"
	if [[ -x "${dest}/${name}" ]]; then return; fi
	echo "building ${name} (first time only; cached in ${dest})" >&2
	(cd "${root}/${dir}" && CGO_ENABLED=0 go build -trimpath -ldflags "${ldflags}" -o "${dest}/${name}.tmp" "${pkg}")
	mv "${dest}/${name}.tmp" "${dest}/${name}"
}

build etcd hack/etcd .
for c in kube-apiserver kube-scheduler kube-controller-manager kubectl; do
	build "${c}" hack/kube "k8s.io/kubernetes/cmd/${c}"
done
if [[ ! -x "${dest}/kwok" ]]; then
	echo "building kwok ${KWOK_VERSION} (first time only)" >&2
	GOBIN="${dest}/.kwok" CGO_ENABLED=0 go install -trimpath "sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}"
	mv "${dest}/.kwok/kwok" "${dest}/kwok"
fi

for b in etcd kube-apiserver kube-scheduler kube-controller-manager kubectl kwok; do
	ln -sfn "${dest}/${b}" "${root}/bin/${b}"
done
