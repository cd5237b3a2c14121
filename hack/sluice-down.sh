#!/usr/bin/env bash
# Stops the sluice services started by sluice-up.sh, then the local control
# plane.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
pids="${root}/.local/pids"

for name in webhook grouper checks-approval checks admitter; do
	pidfile="${pids}/sluice-${name}.pid"
	[[ -f "${pidfile}" ]] || continue
	pid="$(cat "${pidfile}")"
	if kill -0 "${pid}" 2>/dev/null; then
		kill -TERM "${pid}"
		for _ in $(seq 1 100); do kill -0 "${pid}" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "${pid}" 2>/dev/null || true
		echo "stopped ${name}"
	fi
	rm -f "${pidfile}"
done

"${root}/hack/cluster-down.sh"
