#!/usr/bin/env bash
# Stops the local control plane started by hack/cluster-up.sh. Its state
# (etcd data, certificates, kubeconfig, logs) stays in .local/ for the next
# cluster-up; delete .local/ for a fresh cluster.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
state="${SLUICE_STATE_DIR:-${root}/.local}"
pids="${state}/pids"
components=(kwok kube-scheduler kube-controller-manager kube-apiserver etcd)

# running NAME: prints the pid of component NAME if its pid file names a live
# process that still runs that binary (pids get recycled).
running() {
	local file="${pids}/$1.pid" pid argv0
	[[ -f "${file}" ]] || return 1
	pid="$(<"${file}")"
	[[ "${pid}" =~ ^[0-9]+$ ]] || return 1
	argv0="$( { tr "\0" "\n" <"/proc/${pid}/cmdline"; } 2>/dev/null | head -n1)" || return 1
	[[ "$(basename -- "${argv0}")" == "$1" ]] || return 1
	echo "${pid}"
}

# Each component leads its own process group. All get SIGTERM at once (they
# shut down in parallel, a few seconds each); stragglers get SIGKILL after 15s.
declare -A victims=()
for name in "${components[@]}"; do
	if pid="$(running "${name}")"; then
		victims[${name}]=${pid}
		kill -TERM -- "-${pid}" 2>/dev/null || true
	fi
done
for name in "${components[@]}"; do
	pid="${victims[${name}]:-}"
	if [[ -n "${pid}" ]]; then
		for _ in $(seq 1 150); do
			kill -0 "${pid}" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL -- "-${pid}" 2>/dev/null || true
		echo "stopped ${name} (pid ${pid})"
	fi
	rm -f "${pids}/${name}.pid"
done
if [[ ${#victims[@]} -eq 0 ]]; then
	echo "local control plane is not running"
fi
